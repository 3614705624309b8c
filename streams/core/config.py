"""Engine configuration: analysis settings, observers with triggers, named profiles.

File form (YAML or JSON; every key optional, unknown keys are errors)::

    analysis:                 # TrajectoryAnalysisConfig fields
      window_size: 50
      doom_loop_threshold: 3
    observers:                # the default profile
      - name: resource        # an observer kind: resource | pattern
        trigger: {every_n_calls: 10, after_consecutive_errors: 3}
        thresholds: {caution_threshold: 0.3, warning_threshold: 0.1}
    profiles:                 # picked by session_start metadata["observer_profile"]
      strict:
        - name: resource
          trigger: {every_n_calls: 5}
    max_snapshots: 8          # snapshot/restore points kept per session
    history_size: 10          # assessments kept for trend analysis

Errors are :class:`~streams.core.errors.ConfigError` whose key is the dotted
path of the bad key (``observers[1].trigger.every_n_calls``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from streams.core.errors import ConfigError
from streams.core.observers import ObserverConfig, ObserverTrigger, TrajectoryObserver
from streams.core.pattern_observer import PatternObserver
from streams.core.resource import ResourceObserver

if TYPE_CHECKING:
    from streams.core.analysis import TrajectoryAnalysisConfig

#: Observer kinds a configuration may name, and the class each builds.
OBSERVER_KINDS: Final[dict[str, Callable[..., TrajectoryObserver]]] = {
    "resource": ResourceObserver,
    "pattern": PatternObserver,
}
DEFAULT_PROFILE: Final = "default"

Threshold = bool | int | float


@dataclass(frozen=True, slots=True)
class ObserverSpec:
    """One configured observer: its kind, trigger and constructor thresholds."""

    name: str
    trigger: ObserverTrigger
    thresholds: tuple[tuple[str, Threshold], ...] = ()

    def build(self) -> ObserverConfig:
        """The live :class:`ObserverConfig` (validates the thresholds)."""
        try:
            kind = OBSERVER_KINDS[self.name]
        except KeyError:
            raise ConfigError(
                "observers.name",
                f"unknown observer {self.name!r}; known: {', '.join(sorted(OBSERVER_KINDS))}",
            ) from None
        return ObserverConfig(observer=kind(**dict(self.thresholds)), trigger=self.trigger)


def _default_analysis() -> TrajectoryAnalysisConfig:
    from streams.core.analysis import TrajectoryAnalysisConfig

    return TrajectoryAnalysisConfig()


DEFAULT_OBSERVERS: Final[tuple[ObserverSpec, ...]] = (
    ObserverSpec(
        "resource",
        ObserverTrigger(every_n_calls=10, after_consecutive_errors=3),
        (("require_budget", True),),
    ),
    ObserverSpec("pattern", ObserverTrigger(on_every_call=True)),
)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything a :class:`~streams.core.engine.SessionEngine` needs to run.

    ``profiles`` maps a profile name to the observers it runs instead of
    ``observers``; the ``default`` profile is always ``observers``.
    """

    analysis: TrajectoryAnalysisConfig = field(default_factory=_default_analysis)
    observers: tuple[ObserverSpec, ...] = DEFAULT_OBSERVERS
    profiles: tuple[tuple[str, tuple[ObserverSpec, ...]], ...] = ()
    max_snapshots: int = 8
    history_size: int = 10

    def __post_init__(self) -> None:
        for key in ("max_snapshots", "history_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(key, f"expected a positive integer, got {value!r}")
        seen: set[str] = set()
        for name, _ in self.profiles:
            if name in seen or name == DEFAULT_PROFILE:
                raise ConfigError(
                    f"profiles.{name}",
                    "duplicate profile name (or 'default', which is `observers`)",
                )
            seen.add(name)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return (DEFAULT_PROFILE, *(name for name, _ in self.profiles))

    def observers_for(self, profile: str | None) -> tuple[ObserverSpec, ...]:
        """The observer specs of ``profile`` (None or "default": ``observers``)."""
        if profile is None or profile == DEFAULT_PROFILE:
            return self.observers
        for name, specs in self.profiles:
            if name == profile:
                return specs
        raise ConfigError(
            "observer_profile",
            f"unknown profile {profile!r}; known: {', '.join(self.profile_names)}",
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Build from a parsed YAML/JSON mapping; every bad key is named."""
        _check_keys(
            data, "", {"analysis", "observers", "profiles", "max_snapshots", "history_size"}
        )
        kwargs: dict[str, Any] = {}
        if "analysis" in data:
            kwargs["analysis"] = _analysis_from_mapping(data["analysis"], "analysis")
        if "observers" in data:
            kwargs["observers"] = _observers_from(data["observers"], "observers")
        if "profiles" in data:
            profiles = data["profiles"]
            if not isinstance(profiles, Mapping):
                raise ConfigError(
                    "profiles",
                    f"expected a mapping of name -> observer list, got {_tname(profiles)}",
                )
            out: list[tuple[str, tuple[ObserverSpec, ...]]] = []
            for name, specs in profiles.items():
                if not isinstance(name, str) or not name:
                    raise ConfigError(
                        "profiles", f"profile names must be non-empty strings, got {name!r}"
                    )
                out.append((name, _observers_from(specs, f"profiles.{name}")))
            kwargs["profiles"] = tuple(out)
        for key in ("max_snapshots", "history_size"):
            if key in data:
                kwargs[key] = data[key]
        return cls(**kwargs)


def _tname(value: object) -> str:
    return type(value).__name__


def _check_keys(data: object, path: str, allowed: set[str]) -> None:
    where = path or "<config>"
    if not isinstance(data, Mapping):
        raise ConfigError(where, f"expected a mapping, got {_tname(data)}")
    for key in data:
        if key not in allowed:
            full = f"{path}.{key}" if path else str(key)
            raise ConfigError(full, f"unknown key; allowed here: {', '.join(sorted(allowed))}")


def _trigger_from(data: object, path: str) -> ObserverTrigger:
    names = {f.name for f in dataclasses.fields(ObserverTrigger)}
    _check_keys(data, path, names)
    assert isinstance(data, Mapping)
    try:
        trigger = ObserverTrigger(**dict(data))
    except ConfigError as exc:
        raise ConfigError(
            f"{path}.{exc.key.removeprefix('trigger.')}", str(exc).split(": ", 1)[1]
        ) from exc
    if trigger.is_empty:
        raise ConfigError(
            path,
            "no condition set: give every_n_calls, after_consecutive_errors, "
            "every_n_seconds or on_every_call: true",
        )
    return trigger


def _observers_from(data: object, path: str) -> tuple[ObserverSpec, ...]:
    if not isinstance(data, (list, tuple)):
        raise ConfigError(path, f"expected a list of observers, got {_tname(data)}")
    specs: list[ObserverSpec] = []
    names: set[str] = set()
    for i, item in enumerate(data):
        ipath = f"{path}[{i}]"
        _check_keys(item, ipath, {"name", "trigger", "thresholds"})
        assert isinstance(item, Mapping)
        name = item.get("name")
        if name not in OBSERVER_KINDS:
            raise ConfigError(
                f"{ipath}.name",
                f"unknown observer {name!r}; known: {', '.join(sorted(OBSERVER_KINDS))}",
            )
        if name in names:
            raise ConfigError(
                f"{ipath}.name",
                f"observer {name!r} listed twice; each observer keeps its own state",
            )
        names.add(name)
        if "trigger" not in item:
            raise ConfigError(f"{ipath}.trigger", "missing: say when the observer runs")
        trigger = _trigger_from(item["trigger"], f"{ipath}.trigger")
        raw = item.get("thresholds") or {}
        kind = OBSERVER_KINDS[name]
        allowed = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
        _check_keys(raw, f"{ipath}.thresholds", allowed)
        thresholds: list[tuple[str, Threshold]] = []
        for key, value in raw.items():
            if not isinstance(value, (bool, int, float)):
                raise ConfigError(
                    f"{ipath}.thresholds.{key}",
                    f"expected a number or true/false, got {_tname(value)}",
                )
            thresholds.append((key, value))
        spec = ObserverSpec(name=name, trigger=trigger, thresholds=tuple(sorted(thresholds)))
        try:
            spec.build()
        except ConfigError as exc:
            raise ConfigError(f"{ipath}.{exc.key}", str(exc).split(": ", 1)[1]) from exc
        except TypeError as exc:
            raise ConfigError(f"{ipath}.thresholds", str(exc)) from exc
        specs.append(spec)
    return tuple(specs)


def _analysis_from_mapping(data: object, path: str) -> TrajectoryAnalysisConfig:
    from streams.core import analysis as analysis_mod

    cfg_cls = analysis_mod.TrajectoryAnalysisConfig
    allowed = {f.name for f in dataclasses.fields(cfg_cls)}
    _check_keys(data, path, allowed)
    assert isinstance(data, Mapping)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        kpath = f"{path}.{key}"
        if key == "detectors":
            kwargs[key] = _detectors_from(value, kpath)
            continue
        if isinstance(value, (list, dict)):
            raise ConfigError(kpath, f"expected a number, got {_tname(value)}")
        kwargs[key] = value
    try:
        return cfg_cls(**kwargs)
    except ConfigError as exc:
        key = exc.key if exc.key.startswith(f"{path}.") else f"{path}.{exc.key}"
        raise ConfigError(key, str(exc).split(": ", 1)[1]) from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(path, str(exc)) from exc


def _detectors_from(value: object, path: str) -> Any:
    """Detector names (built-in, entry point or ``module:Class``), resolved by
    ``TrajectoryAnalysisConfig`` itself (``streams.core.analysis.load_detector``)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, "expected a list of detector names (strings)")
    return tuple(value)


def load_config(path: str | Path) -> EngineConfig:
    """Read an :class:`EngineConfig` from a YAML (``.yaml``/``.yml``) or JSON file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read config file: {exc.strerror or exc}") from exc
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml  # type: ignore[import-untyped,unused-ignore]

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(str(p), f"not valid YAML: {exc}") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                str(p),
                f"not valid JSON ({exc.msg} at line {exc.lineno}); "
                "use a .yaml/.yml suffix for YAML",
            ) from exc
    if data is None:
        data = {}
    return EngineConfig.from_mapping(data)


__all__ = [
    "DEFAULT_OBSERVERS",
    "DEFAULT_PROFILE",
    "OBSERVER_KINDS",
    "EngineConfig",
    "ObserverSpec",
    "load_config",
]
