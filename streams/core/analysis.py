"""Incremental trajectory analysis: tool-call records, counters and pattern firing.

Contract notes (deviations from ``docs/architecture.md`` are listed here):

* ``TrajectoryAnalysisConfig.detectors`` holds *detector factories* (frozen
  config dataclasses such as ``DoomLoopDetector()``, each with ``name`` and
  ``build(cfg, snapshot)``), entry-point / ``module:Class`` strings, or plain
  stateless ``PatternDetector`` objects.  The spec types it
  ``tuple[PatternDetector, ...]``; a config is shared by many sessions, so it
  must not hold per-session mutable state — every builder builds its own logic.
* ``PatternDetector.detect`` receives an :class:`~streams.core.patterns.AnalysisView`
  (the builder's live view, no copying), and is called once per *completed*
  tool call, not per event.
* ``tool_frequency()`` / ``error_frequency()`` / ``recent_*`` are over the
  window (the last ``window_size`` completed calls); the scalar counters
  (``tool_call_count``, ``error_count``, ...) are over the whole session.
* ``ToolCallRecord`` carries, beyond the contract's fields, values derived once
  at completion (``exact_key``, ``coarse_key``, ``verb``, ``kind``,
  ``resource``, ``error_signature``, ``output_key``) so detectors never re-parse
  arguments; ``error_frequency()`` keys are those ``error_signature`` values.
* Patterns have a ``key`` (which instance of the type: loop signature, error
  signature, ...) — "fired" means newly detected or a different key; while the
  same key stays active its details (repetitions, confidence, evidence) are
  refreshed in ``patterns()`` without firing again.
* The builder is itself an ``AnalysisView`` (``last_call``, ``last_compact``,
  ``suggested_tools()``, ``task`` besides the spec's members); ``build()``
  returns an immutable :class:`TrajectoryAnalysis` copy.

Event semantics:

* ``model_step`` counts a turn; ``tool_call`` opens a call (``tool_call_count``
  counts these); ``tool_result`` or ``error`` carrying the open call's
  ``call_id`` (or with either id absent) completes it; a call still open when the
  next ``tool_call`` arrives completes as success with no output.  A result that
  matches no open call and names a tool becomes a record by itself (traces that
  only log results); otherwise it is counted in ``orphan_result_count``.
* An ``error`` without ``call_id`` is an agent-level error
  (``agent_error_count``), not a tool failure.
* Control events (``session_start`` … ``restore``) are not trajectory actions;
  ``session_start``'s ``metadata["task"]`` becomes ``task`` (Drift's scope),
  cut to ``MAX_TASK_CHARS`` because it travels in every snapshot.
* Time is event time only: ``duration_ms`` = latest minus earliest event
  timestamp seen (robust to out-of-order delivery).

Memory is bounded: the window deque, a capped tool-name set (``MAX_TOOL_NAMES``),
a capped firing-count table (``MAX_FIRED_KEYS``), and each detector's own
window-independent state.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from importlib import metadata
from itertools import islice
from typing import Any, Final

from streams.core.errors import ConfigError
from streams.core.events import META_TASK, JsonValue, TraceEvent
from streams.core.frozen import quick_init
from streams.core.patterns import (
    AnalysisView,
    DetectorFactory,
    PatternDetector,
    ToolCallRecord,
    TrajectoryPattern,
)
from streams.core.similarity import (
    abbreviate,
    canonical_json,
    describe_action,
    error_signature,
    summarize_params,
)
from streams.core.statecodec import state_type

#: Entry-point group custom detectors register under.
DETECTOR_ENTRY_POINT_GROUP: Final = "trajectory_streams.detectors"
MAX_TOOL_NAMES: Final = 1024
MAX_FIRED_KEYS: Final = 256
#: The task text kept (Drift's scope; it is part of every snapshot).
MAX_TASK_CHARS: Final = 4096
_RECENT_IDS: Final = 32


def _default_detectors() -> tuple[Any, ...]:
    from streams.core.detectors import DEFAULT_DETECTORS

    return DEFAULT_DETECTORS


@dataclass(frozen=True, slots=True)
class TrajectoryAnalysisConfig:
    """Analysis settings (spec defaults).  Validated on construction."""

    window_size: int = 50
    doom_loop_threshold: int = 3
    doom_loop_min_length: int = 2
    similarity_threshold: float = 0.8
    error_window: int = 10
    stall_threshold: int = 5
    detectors: tuple[Any, ...] = field(default_factory=_default_detectors)

    def __post_init__(self) -> None:
        checks: tuple[tuple[str, int | float, int], ...] = (
            ("window_size", self.window_size, 1),
            ("doom_loop_threshold", self.doom_loop_threshold, 2),
            ("doom_loop_min_length", self.doom_loop_min_length, 1),
            ("error_window", self.error_window, 1),
            ("stall_threshold", self.stall_threshold, 1),
        )
        for name, value, low in checks:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(name, f"must be an integer >= {low}, got {value!r}")
        sim = self.similarity_threshold
        if isinstance(sim, bool) or not isinstance(sim, int | float) or not 0.0 < sim <= 1.0:
            raise ConfigError("similarity_threshold", f"must be a number in (0, 1], got {sim!r}")
        if not isinstance(self.detectors, tuple):
            raise ConfigError("detectors", f"must be a tuple, got {type(self.detectors).__name__}")
        resolved = tuple(load_detector(d) if isinstance(d, str) else d for d in self.detectors)
        names: set[str] = set()
        for i, det in enumerate(resolved):
            if not (isinstance(det, (DetectorFactory, PatternDetector))):
                raise ConfigError(
                    f"detectors[{i}]",
                    f"{det!r} is neither a detector factory (name, build) nor a "
                    "PatternDetector (name, detect, reset)",
                )
            if det.name in names:
                raise ConfigError(f"detectors[{i}]", f"duplicate detector name {det.name!r}")
            names.add(det.name)
        object.__setattr__(self, "detectors", resolved)


def load_detector(spec: str) -> Any:
    """Resolve a detector from configuration: entry-point name or ``module:Class``.

    Built-in detector names (``doom_loop``, ...) resolve too.  A class is
    instantiated with its defaults.  Raises :class:`ConfigError` naming ``spec``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("detectors", f"detector spec must be a non-empty string, got {spec!r}")
    obj: Any
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"detectors.{spec}", f"cannot import module {module_name!r}: {exc}"
            ) from exc
        obj = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise ConfigError(
                    f"detectors.{spec}", f"module {module_name!r} has no attribute {attr!r}"
                )
            obj = getattr(obj, part)
    else:
        from streams.core.detectors import BUILTIN_DETECTORS

        if spec in BUILTIN_DETECTORS:
            obj = BUILTIN_DETECTORS[spec]
        else:
            eps = [
                ep
                for ep in metadata.entry_points(group=DETECTOR_ENTRY_POINT_GROUP)
                if ep.name == spec
            ]
            if not eps:
                raise ConfigError(
                    f"detectors.{spec}",
                    f"no built-in detector or entry point named {spec!r} in group "
                    f"{DETECTOR_ENTRY_POINT_GROUP!r}; use 'module:Class' or install the plugin",
                )
            try:
                obj = eps[0].load()
            except Exception as exc:
                raise ConfigError(
                    f"detectors.{spec}", f"entry point failed to load: {exc}"
                ) from exc
    if isinstance(obj, type):
        try:
            obj = obj()
        except TypeError as exc:
            raise ConfigError(
                f"detectors.{spec}", f"cannot instantiate {obj.__name__} with defaults: {exc}"
            ) from exc
    if not (isinstance(obj, (DetectorFactory, PatternDetector))):
        raise ConfigError(
            f"detectors.{spec}", f"{obj!r} is not a detector (needs name + build or detect/reset)"
        )
    return obj


@state_type("analysis.pending_call/1")
@quick_init
@dataclass(frozen=True, slots=True)
class PendingCall:
    """A ``tool_call`` whose result has not arrived yet."""

    call_id: str | None
    tool_name: str
    params: JsonValue
    params_summary: str
    timestamp_ms: int


@state_type("analysis.state/1")
@dataclass(frozen=True, slots=True)
class AnalysisState:
    """Everything a builder needs to resume: plain frozen values only."""

    window: tuple[ToolCallRecord, ...]
    turn_count: int
    tool_call_count: int
    error_count: int
    consecutive_errors: int
    completed_calls: int
    unique_tools: tuple[str, ...]
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    task: str | None
    pending: PendingCall | None
    suggestions: tuple[tuple[str, int], ...]
    active: tuple[tuple[str, TrajectoryPattern], ...]
    fired: tuple[tuple[str, str, int], ...]
    recent_call_ids: tuple[str, ...]
    agent_error_count: int
    orphan_result_count: int
    detectors: tuple[tuple[str, Any], ...]
    version: int = 1


@dataclass(frozen=True, slots=True)
class TrajectoryAnalysis:
    """An immutable snapshot of the analysis (what ``build()`` returns)."""

    turn_count: int
    tool_call_count: int
    error_count: int
    consecutive_errors: int
    unique_tools_used: frozenset[str]
    duration_ms: int
    calls: tuple[ToolCallRecord, ...]
    tool_counts: Mapping[str, int]
    error_counts: Mapping[str, int]
    active_patterns: tuple[TrajectoryPattern, ...]
    task: str | None = None
    suggestions: Mapping[str, int] = field(default_factory=dict)
    agent_error_count: int = 0
    orphan_result_count: int = 0

    @property
    def duration(self) -> timedelta:
        return timedelta(milliseconds=self.duration_ms)

    @property
    def last_call(self) -> ToolCallRecord | None:
        return self.calls[-1] if self.calls else None

    @property
    def last_compact(self) -> ToolCallRecord | None:
        return compact_record(self.calls[-1]) if self.calls else None

    def recent_tool_calls(self, n: int) -> tuple[ToolCallRecord, ...]:
        """The last ``n`` completed calls in the window, oldest first."""
        return self.calls[-n:] if n > 0 else ()

    def recent_errors(self, n: int) -> tuple[ToolCallRecord, ...]:
        """The last ``n`` failed calls in the window, oldest first."""
        if n <= 0:
            return ()
        out = [c for c in self.calls if not c.success]
        return tuple(out[-n:])

    def tool_frequency(self) -> dict[str, int]:
        return dict(self.tool_counts)

    def error_frequency(self) -> dict[str, int]:
        """Failures in the window by normalized error signature."""
        return dict(self.error_counts)

    def suggested_tools(self) -> Mapping[str, int]:
        return dict(self.suggestions)

    def patterns(self) -> dict[str, TrajectoryPattern]:
        """Active patterns by type (the latest one when several share a type)."""
        return {p.pattern_type: p for p in self.active_patterns}

    def has_pattern(self, pattern_type: str) -> bool:
        return any(p.pattern_type == pattern_type for p in self.active_patterns)


def compact_record(record: ToolCallRecord) -> ToolCallRecord:
    """``record`` without its potentially large ``params`` and ``error_message``.

    Detectors keep these in their bounded rings: everything they compare
    (keys, kind, resource, signature) and cite (``params_summary``) stays, while
    snapshots stop carrying each call's full arguments several times over.
    """
    r = record
    return ToolCallRecord(
        r.call_index,
        r.tool_name,
        r.params_summary,
        None,
        r.success,
        None,
        r.timestamp_ms,
        r.call_id,
        r.latency_ms,
        r.output_summary,
        r.exact_key,
        r.coarse_key,
        r.verb,
        r.kind,
        r.resource,
        r.error_signature,
        r.output_key,
    )


#: ``json.dumps(value, sort_keys=True, default=str)`` (see ``canonical_json``)
_JSON_ENCODE: Final = canonical_json


def _text(value: JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return _JSON_ENCODE(value)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_RESTAMPED: Final = frozenset({"occurrences", "first_seen_ms", "call_index"})


def _copyable_fields(cls: type) -> tuple[str, ...]:
    """The fields :func:`_restamped` copies, or () when a copy could differ from
    ``replace`` (an ``init=False`` field or a ``__post_init__`` may derive values)."""
    fs = fields(cls)
    if hasattr(cls, "__post_init__") or any(not f.init for f in fs):
        return ()
    return tuple(f.name for f in fs if f.name not in _RESTAMPED)


def _restamped(
    pattern: TrajectoryPattern, occurrences: int, first_seen_ms: int, call_index: int
) -> TrajectoryPattern:
    """``dataclasses.replace(pattern, occurrences=..., first_seen_ms=..., call_index=...)``
    at a third of its cost (it runs for every active pattern on every completed
    call): the other fields are copied as they are, so the copy equals the one
    ``replace`` makes.  ``__init__``/``__post_init__`` are not re-run: ``pattern``
    already passed them and the three new values are the builder's own counters.
    """
    cls = type(pattern)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = _copyable_fields(cls)
    if not names:  # a plugin pattern with derived fields: let its __init__ run
        return replace(
            pattern, occurrences=occurrences, first_seen_ms=first_seen_ms, call_index=call_index
        )
    new = object.__new__(cls)
    put = object.__setattr__
    for name in names:
        put(new, name, getattr(pattern, name))
    put(new, "occurrences", occurrences)
    put(new, "first_seen_ms", first_seen_ms)
    put(new, "call_index", call_index)
    return new


#: :attr:`_DetectorSlot.snap` when the detector was called since its last snapshot.
_STALE: Final[Any] = object()


class _DetectorSlot:
    """A built detector and how to snapshot it; ``detect`` and ``on_event`` are its
    bound methods, looked up once (they run on every call / every event).

    ``snap`` is the detector's last ``snapshot()`` value, or ``_STALE``.  Invariant:
    whatever calls into the detector (``detect``, ``on_event``, ``reset``) sets it
    to ``_STALE`` first.  A detector's state is what the builder's calls made it
    (detectors see events only through the builder, and time only as event time),
    so a snapshot taken with no call since is still its snapshot, and
    :meth:`TrajectoryBuilder.snapshot` hands out that very object again: most
    events complete no tool call, and re-building (then re-encoding) each
    detector's snapshot at every commit was a large part of a worker's CPU.
    """

    __slots__ = ("detect", "detector", "factory", "name", "on_event", "snap")

    def __init__(self, factory: Any, detector: PatternDetector) -> None:
        self.factory = factory
        self.detector = detector
        self.name = detector.name
        self.detect = detector.detect
        self.on_event: Any = getattr(detector, "on_event", None)
        self.snap: Any = _STALE


def _event_slots(slots: list[_DetectorSlot]) -> tuple[_DetectorSlot, ...]:
    return tuple(s for s in slots if callable(getattr(s.detector, "on_event", None)))


def _is_factory(spec: Any) -> bool:
    """``isinstance(spec, DetectorFactory)``, without the runtime-Protocol machinery.

    The same test a runtime Protocol makes (a ``name`` attribute, a ``build`` that
    is not None), written out: ``isinstance`` against a Protocol walks the
    Protocol's MRO on every call (~20 us in CPython 3.11), and every new session
    builds each configured detector (a tenth of a worker's CPU on a fleet with
    many short sessions).
    """
    return hasattr(spec, "name") and getattr(spec, "build", None) is not None


def _build_detector(spec: Any, cfg: TrajectoryAnalysisConfig, snapshot: Any) -> _DetectorSlot:
    if _is_factory(spec):
        return _DetectorSlot(spec, spec.build(cfg, snapshot))
    det = copy.deepcopy(spec)
    det.reset()
    return _DetectorSlot(spec, det)


class TrajectoryBuilder:
    """Builds a :class:`TrajectoryAnalysis` incrementally, one event at a time.

    Per-event cost is O(1) amortized plus the detectors' own bounded work; the
    detectors run only when a tool call completes.  The builder implements
    :class:`~streams.core.patterns.AnalysisView` itself, which is what the
    detectors read (no copies).
    """

    def __init__(self, config: TrajectoryAnalysisConfig | None = None) -> None:
        self._cfg = config if config is not None else TrajectoryAnalysisConfig()
        self._slots: list[_DetectorSlot] = []
        self._event_slots: tuple[_DetectorSlot, ...] = ()
        self._init_state()
        self._slots = [_build_detector(d, self._cfg, None) for d in self._cfg.detectors]
        self._event_slots = _event_slots(self._slots)

    @classmethod
    def from_config(cls, config: TrajectoryAnalysisConfig) -> TrajectoryBuilder:
        return cls(config)

    @property
    def config(self) -> TrajectoryAnalysisConfig:
        return self._cfg

    def _init_state(self) -> None:
        self._window: deque[ToolCallRecord] = deque(maxlen=self._cfg.window_size)
        # the view's ``last_call``/``last_compact`` as plain attributes, not
        # properties: detectors read them ~17 times per completed call.  Invariant:
        # ``last_call`` is ``_window[-1]`` (None when empty) and ``last_compact``
        # its ``compact_record``; only ``_append``/``_complete``/``build_from`` set them.
        self.last_call: ToolCallRecord | None = None
        self.last_compact: ToolCallRecord | None = None
        self._errors: deque[ToolCallRecord] = deque()
        self._tool_counts: dict[str, int] = {}
        self._error_counts: dict[str, int] = {}
        self._turns = 0
        self._tool_calls = 0
        self._error_total = 0
        self._consecutive = 0
        self._completed = 0
        self._tools: dict[str, None] = {}
        self._first_ts: int | None = None
        self._last_ts: int | None = None
        self._task: str | None = None
        self._pending: PendingCall | None = None
        self._suggestions: dict[str, int] = {}
        self._active: dict[str, TrajectoryPattern] = {}
        # newer details of an active pattern (same key) not yet merged into _active
        self._latest: dict[str, TrajectoryPattern] = {}
        # bumped by every change to the active patterns (never goes back, not even on
        # reset): equal versions of one builder mean equal patterns()
        self._patterns_version: int = getattr(self, "_patterns_version", -1) + 1
        self._fired: dict[tuple[str, str], int] = {}
        self._recent_ids: deque[str] = deque(maxlen=_RECENT_IDS)
        self._agent_errors = 0
        self._orphans = 0

    def reset(self) -> None:
        """Forget everything (as if no event had been seen)."""
        self._init_state()
        for slot in self._slots:
            slot.snap = _STALE
            slot.detector.reset()

    # ----------------------------------------------------------------- events
    def on_event(self, ev: TraceEvent) -> tuple[TrajectoryPattern, ...]:
        """Apply one event; return the patterns that *fired* on it.

        Detectors with an ``on_event`` method (:class:`EventDetector`) then see
        the event itself too, after it was applied.
        """
        fired = self._on_event(ev)
        if not self._event_slots:
            return fired
        more: list[TrajectoryPattern] = []
        active = self._active
        for slot in self._event_slots:
            slot.snap = _STALE
            pattern = slot.on_event(ev, self)
            if pattern is None and slot.name not in active:
                continue  # nothing seen, nothing to clear: what _settle would conclude
            self._settle(slot, pattern, self._completed, ev.timestamp_ms, more)
        return fired + tuple(more) if more else fired

    def _on_event(self, ev: TraceEvent) -> tuple[TrajectoryPattern, ...]:
        ts = ev.timestamp_ms
        first = self._first_ts
        if first is None:
            self._first_ts = ts
            self._last_ts = ts
        elif ts > first:
            if self._last_ts is None or ts > self._last_ts:
                self._last_ts = ts
        elif ts < first:
            self._first_ts = ts  # late, out-of-order event: the span grows backwards
        etype = ev.type
        if etype == "tool_call":
            fired: tuple[TrajectoryPattern, ...] = ()
            if self._pending is not None:
                fired = self._complete(self._pending, True, None, None, None, ts)
            name = ev.tool_name or "unknown"
            self._pending = PendingCall(
                ev.call_id,
                name,
                ev.input,
                ev.params_summary if ev.params_summary is not None else summarize_params(ev.input),
                ts,
            )
            self._tool_calls += 1
            self._note_tool(name)
            return fired
        if etype == "tool_result" or (etype == "error" and ev.call_id is not None):
            failed = etype == "error" or ev.is_error
            pending = self._pending
            if pending is not None and (
                ev.call_id is None or pending.call_id is None or ev.call_id == pending.call_id
            ):
                return self._complete(
                    pending, not failed, ev.error_message, ev.output, ev.latency_ms, ts
                )
            if (
                ev.tool_name
                and (ev.call_id is None or ev.call_id not in self._recent_ids)
                and (pending is None or pending.call_id != ev.call_id)
            ):
                self._tool_calls += 1
                self._note_tool(ev.tool_name)
                lone = PendingCall(
                    ev.call_id,
                    ev.tool_name,
                    ev.input,
                    ev.params_summary
                    if ev.params_summary is not None
                    else summarize_params(ev.input),
                    ts,
                )
                return self._complete(
                    lone, not failed, ev.error_message, ev.output, ev.latency_ms, ts, lone=True
                )
            self._orphans += 1
            return ()
        if etype == "model_step":
            self._turns += 1
        elif etype == "error":
            self._agent_errors += 1
        elif etype == "session_start":
            task = ev.metadata.get(META_TASK) if ev.metadata else None
            if task:
                self._task = task[:MAX_TASK_CHARS]
        return ()

    def note_suggestion(self, tool_name: str) -> None:
        """Record that an assessment suggested ``tool_name`` (ToolAvoidance input).

        The count is "suggestions since the tool was last used"; using the tool
        clears it.
        """
        if not tool_name:
            return
        if tool_name not in self._suggestions and len(self._suggestions) >= 64:
            self._suggestions.pop(next(iter(self._suggestions)))
        self._suggestions[tool_name] = self._suggestions.get(tool_name, 0) + 1

    def _note_tool(self, name: str) -> None:
        if name not in self._tools and len(self._tools) < MAX_TOOL_NAMES:
            self._tools[name] = None

    def _complete(
        self,
        pending: PendingCall,
        success: bool,
        error_message: str | None,
        output: JsonValue,
        latency_ms: int | None,
        ts: int,
        *,
        lone: bool = False,
    ) -> tuple[TrajectoryPattern, ...]:
        self._pending = None if not lone else self._pending
        self._completed += 1
        out_text = _text(output)
        output_summary = abbreviate(out_text) if out_text else None
        info = describe_action(pending.tool_name, pending.params)
        signature: str | None = None
        if not success:
            signature = error_signature(error_message, out_text)
        out_digest = hashlib.blake2b(
            out_text[:4096].encode("utf-8", "surrogatepass"), digest_size=6
        ).hexdigest()
        record = ToolCallRecord(  # positional, in field order (keywords cost more)
            self._completed,
            pending.tool_name,
            pending.params_summary,
            pending.params,
            success,
            error_message,
            ts if lone else pending.timestamp_ms,
            pending.call_id,
            latency_ms,
            output_summary,
            info.exact_key,
            info.coarse_key,
            info.verb,
            info.kind,
            info.resource,
            signature,
            f"{int(success)}:{signature or ''}:{len(out_text)}:{out_digest}",
        )
        if pending.call_id is not None:
            self._recent_ids.append(pending.call_id)
        self._append(record)
        if record.params is None and record.error_message is None:
            self.last_compact = record
        else:
            self.last_compact = compact_record(record)
        return self._run_detectors(record)

    def _append(self, record: ToolCallRecord) -> None:
        window = self._window
        if len(window) == window.maxlen:
            old = window[0]
            n = self._tool_counts[old.tool_name] - 1
            if n:
                self._tool_counts[old.tool_name] = n
            else:
                del self._tool_counts[old.tool_name]
            if not old.success:
                self._errors.popleft()
                sig = old.error_signature or ""
                m = self._error_counts[sig] - 1
                if m:
                    self._error_counts[sig] = m
                else:
                    del self._error_counts[sig]
        window.append(record)
        self.last_call = record
        self._tool_counts[record.tool_name] = self._tool_counts.get(record.tool_name, 0) + 1
        if record.success:
            self._consecutive = 0
        else:
            self._consecutive += 1
            self._error_total += 1
            self._errors.append(record)
            sig = record.error_signature or ""
            self._error_counts[sig] = self._error_counts.get(sig, 0) + 1
        if record.tool_name in self._suggestions:
            del self._suggestions[record.tool_name]

    def _run_detectors(self, record: ToolCallRecord) -> tuple[TrajectoryPattern, ...]:
        fired: list[TrajectoryPattern] = []
        active = self._active
        for slot in self._slots:
            slot.snap = _STALE
            pattern = slot.detect(self)
            if pattern is None and slot.name not in active:
                continue  # nothing seen, nothing to clear: what _settle would conclude
            self._settle(slot, pattern, record.call_index, record.timestamp_ms, fired)
        return tuple(fired) if fired else ()

    def _settle(
        self,
        slot: _DetectorSlot,
        pattern: TrajectoryPattern | None,
        call_index: int,
        timestamp_ms: int,
        fired: list[TrajectoryPattern],
    ) -> None:
        """Record what ``slot`` sees now: clear, refresh (same key) or fire."""
        active = self._active
        name = slot.name
        prev = active.get(name)
        if pattern is None:
            if prev is not None:
                del active[name]
                self._latest.pop(name, None)
                self._patterns_version += 1
            return
        self._patterns_version += 1
        if (
            prev is not None
            and prev.pattern_type == pattern.pattern_type
            and prev.key == pattern.key
        ):
            # Still the same instance: keep the firing's identity, refresh the
            # details lazily (materialized in patterns()/build()/snapshot()).
            self._latest[name] = pattern
            return
        fkey = (pattern.pattern_type, pattern.key)
        count = self._fired.pop(fkey, 0) + 1
        if len(self._fired) >= MAX_FIRED_KEYS:
            self._fired.pop(next(iter(self._fired)))
        self._fired[fkey] = count
        pattern = _restamped(pattern, count, timestamp_ms, call_index)
        active[name] = pattern
        self._latest.pop(name, None)
        fired.append(pattern)

    # ------------------------------------------------------------ view (live)
    @property
    def turn_count(self) -> int:
        return self._turns

    @property
    def tool_call_count(self) -> int:
        return self._tool_calls

    @property
    def error_count(self) -> int:
        return self._error_total

    @property
    def consecutive_errors(self) -> int:
        return self._consecutive

    @property
    def task(self) -> str | None:
        return self._task

    @property
    def duration_ms(self) -> int:
        if self._first_ts is None or self._last_ts is None:
            return 0
        return self._last_ts - self._first_ts

    @property
    def duration(self) -> timedelta:
        return timedelta(milliseconds=self.duration_ms)

    @property
    def unique_tools_used(self) -> frozenset[str]:
        return frozenset(self._tools)

    def recent_tool_calls(self, n: int) -> tuple[ToolCallRecord, ...]:
        if n <= 0:
            return ()
        items = tuple(islice(reversed(self._window), n))
        return items[::-1]

    def recent_errors(self, n: int) -> tuple[ToolCallRecord, ...]:
        if n <= 0:
            return ()
        items = tuple(islice(reversed(self._errors), n))
        return items[::-1]

    def tool_frequency(self) -> dict[str, int]:
        return dict(self._tool_counts)

    def error_frequency(self) -> dict[str, int]:
        return dict(self._error_counts)

    def suggested_tools(self) -> Mapping[str, int]:
        return self._suggestions

    def _merged_active(self) -> dict[str, TrajectoryPattern]:
        """Active patterns with their latest details merged in (and cached)."""
        if self._latest:
            for name, newer in self._latest.items():
                prev = self._active[name]
                self._active[name] = _restamped(
                    newer, prev.occurrences, prev.first_seen_ms, prev.call_index
                )
            self._latest.clear()
        return self._active

    @property
    def patterns_version(self) -> int:
        """Changes whenever the active patterns (or their details) change, and only
        then: the engine skips observers that declare they would say nothing new
        (``idle_when_unchanged``) while it, the history and the call count stay."""
        return self._patterns_version

    def patterns(self) -> dict[str, TrajectoryPattern]:
        if not self._active:
            return {}
        return {p.pattern_type: p for p in self._merged_active().values()}

    def has_pattern(self, pattern_type: str) -> bool:
        return any(p.pattern_type == pattern_type for p in self._active.values())

    # ------------------------------------------------------- build / snapshot
    def build(self) -> TrajectoryAnalysis:
        """An immutable copy of the current analysis (O(window))."""
        return TrajectoryAnalysis(
            turn_count=self._turns,
            tool_call_count=self._tool_calls,
            error_count=self._error_total,
            consecutive_errors=self._consecutive,
            unique_tools_used=frozenset(self._tools),
            duration_ms=self.duration_ms,
            calls=tuple(self._window),
            tool_counts=dict(self._tool_counts),
            error_counts=dict(self._error_counts),
            active_patterns=tuple(self._merged_active().values()),
            task=self._task,
            suggestions=dict(self._suggestions),
            agent_error_count=self._agent_errors,
            orphan_result_count=self._orphans,
        )

    def snapshot(self) -> AnalysisState:
        """Capture the full state as plain frozen values (see :meth:`build_from`)."""
        dets: list[tuple[str, Any]] = []
        for slot in self._slots:
            snap = slot.snap
            if snap is _STALE:  # called since its last snapshot (see _DetectorSlot)
                take = getattr(slot.detector, "snapshot", None)
                snap = slot.snap = take() if callable(take) else None
            dets.append((slot.name, snap))
        return AnalysisState(
            window=tuple(self._window),
            turn_count=self._turns,
            tool_call_count=self._tool_calls,
            error_count=self._error_total,
            consecutive_errors=self._consecutive,
            completed_calls=self._completed,
            unique_tools=tuple(self._tools),
            first_timestamp_ms=self._first_ts,
            last_timestamp_ms=self._last_ts,
            task=self._task,
            pending=self._pending,
            suggestions=tuple(self._suggestions.items()),
            active=tuple(self._merged_active().items()),
            fired=tuple((t, k, c) for (t, k), c in self._fired.items()),
            recent_call_ids=tuple(self._recent_ids),
            agent_error_count=self._agent_errors,
            orphan_result_count=self._orphans,
            detectors=tuple(dets),
        )

    @classmethod
    def build_from(
        cls, config: TrajectoryAnalysisConfig, state: AnalysisState
    ) -> TrajectoryBuilder:
        """A builder resumed from ``state``: continuing gives the same results as
        never having snapshotted (same config assumed; a smaller window keeps the
        newest records)."""
        self = cls.__new__(cls)
        self._cfg = config
        self._init_state()
        for rec in state.window:
            self._window.append(rec)
        for rec in self._window:
            self._tool_counts[rec.tool_name] = self._tool_counts.get(rec.tool_name, 0) + 1
            if not rec.success:
                self._errors.append(rec)
                sig = rec.error_signature or ""
                self._error_counts[sig] = self._error_counts.get(sig, 0) + 1
        self.last_call = self._window[-1] if self._window else None
        self.last_compact = compact_record(self._window[-1]) if self._window else None
        self._turns = state.turn_count
        self._tool_calls = state.tool_call_count
        self._error_total = state.error_count
        self._consecutive = state.consecutive_errors
        self._completed = state.completed_calls
        self._tools = dict.fromkeys(state.unique_tools)
        self._first_ts = state.first_timestamp_ms
        self._last_ts = state.last_timestamp_ms
        self._task = state.task
        self._pending = state.pending
        self._suggestions = dict(state.suggestions)
        self._active = dict(state.active)
        self._fired = {(t, k): c for t, k, c in state.fired}
        self._recent_ids.extend(state.recent_call_ids)
        self._agent_errors = state.agent_error_count
        self._orphans = state.orphan_result_count
        snaps = dict(state.detectors)
        self._slots = [_build_detector(d, config, snaps.get(d.name)) for d in config.detectors]
        self._event_slots = _event_slots(self._slots)
        return self

    def feed(self, events: Iterable[TraceEvent]) -> list[TrajectoryPattern]:
        """Apply many events; return every pattern that fired, in order."""
        out: list[TrajectoryPattern] = []
        for ev in events:
            out.extend(self.on_event(ev))
        return out


def state_field_names() -> tuple[str, ...]:
    """Field names of :class:`AnalysisState` (for codecs that map by name)."""
    return tuple(f.name for f in fields(AnalysisState))


_view_check: type[AnalysisView] = TrajectoryBuilder
_view_check2: type[AnalysisView] = TrajectoryAnalysis

__all__ = [
    "DETECTOR_ENTRY_POINT_GROUP",
    "MAX_FIRED_KEYS",
    "MAX_TASK_CHARS",
    "MAX_TOOL_NAMES",
    "AnalysisState",
    "PatternDetector",
    "PendingCall",
    "ToolCallRecord",
    "TrajectoryAnalysis",
    "TrajectoryAnalysisConfig",
    "TrajectoryBuilder",
    "TrajectoryPattern",
    "compact_record",
    "load_detector",
    "state_field_names",
]
