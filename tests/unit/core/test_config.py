"""EngineConfig: defaults, mapping/YAML/JSON loading, and errors naming the bad key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streams.core.config import DEFAULT_OBSERVERS, EngineConfig, ObserverSpec, load_config
from streams.core.errors import ConfigError
from streams.core.observers import ObserverTrigger
from streams.core.pattern_observer import PatternObserver
from streams.core.resource import ResourceObserver


def test_defaults() -> None:
    cfg = EngineConfig()
    assert cfg.observers == DEFAULT_OBSERVERS
    res, pat = (s.build() for s in cfg.observers)
    assert isinstance(res.observer, ResourceObserver)
    assert res.trigger == ObserverTrigger(every_n_calls=10, after_consecutive_errors=3)
    assert isinstance(pat.observer, PatternObserver)
    assert pat.trigger == ObserverTrigger(on_every_call=True)
    assert cfg.analysis.window_size == 50 and cfg.max_snapshots == 8 and cfg.history_size == 10
    assert cfg.profile_names == ("default",)
    assert EngineConfig.from_mapping({}) == cfg


FULL = {
    "analysis": {
        "window_size": 20,
        "doom_loop_threshold": 4,
        "detectors": ["doom_loop", "repeated_error"],
    },
    "observers": [
        {
            "name": "resource",
            "trigger": {"every_n_calls": 5},
            "thresholds": {"caution_threshold": 0.4},
        },
    ],
    "profiles": {
        "strict": [
            {"name": "resource", "trigger": {"every_n_seconds": 30, "after_consecutive_errors": 2}},
            {
                "name": "pattern",
                "trigger": {"on_every_call": True},
                "thresholds": {"warning_confidence": 0.8},
            },
        ]
    },
    "max_snapshots": 3,
    "history_size": 4,
}


def _check_full(cfg: EngineConfig) -> None:
    assert cfg.analysis.window_size == 20 and cfg.analysis.doom_loop_threshold == 4
    assert [d.name for d in cfg.analysis.detectors] == ["doom_loop", "repeated_error"]
    (res,) = (s.build() for s in cfg.observers)
    assert res.observer == ResourceObserver(caution_threshold=0.4)
    strict = cfg.observers_for("strict")
    assert [s.name for s in strict] == ["resource", "pattern"]
    assert strict[1].build().observer == PatternObserver(warning_confidence=0.8)
    assert strict[0].trigger == ObserverTrigger(every_n_seconds=30, after_consecutive_errors=2)
    assert cfg.max_snapshots == 3 and cfg.history_size == 4
    assert cfg.observers_for(None) == cfg.observers_for("default") == cfg.observers


def test_from_mapping_full() -> None:
    _check_full(EngineConfig.from_mapping(FULL))


def test_load_yaml_and_json(tmp_path: Path) -> None:
    y = tmp_path / "engine.yaml"
    y.write_text(
        """
analysis:
  window_size: 20
  doom_loop_threshold: 4
  detectors: [doom_loop, repeated_error]
observers:
  - name: resource
    trigger: {every_n_calls: 5}
    thresholds: {caution_threshold: 0.4}
profiles:
  strict:
    - name: resource
      trigger: {every_n_seconds: 30, after_consecutive_errors: 2}
    - name: pattern
      trigger: {on_every_call: true}
      thresholds: {warning_confidence: 0.8}
max_snapshots: 3
history_size: 4
"""
    )
    _check_full(load_config(y))
    j = tmp_path / "engine.json"
    j.write_text(json.dumps(FULL))
    _check_full(load_config(j))
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    assert load_config(empty) == EngineConfig()


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"bogus": 1}, "bogus"),
        ({"analysis": {"window": 5}}, "analysis.window"),
        ({"analysis": {"window_size": 0}}, "analysis.window_size"),
        ({"analysis": {"similarity_threshold": [1]}}, "analysis.similarity_threshold"),
        ({"analysis": {"detectors": "doom_loop"}}, "analysis.detectors"),
        ({"analysis": {"detectors": ["no_such_detector"]}}, "analysis.detectors.no_such_detector"),
        ({"analysis": []}, "analysis"),
        ({"observers": {"name": "resource"}}, "observers"),
        (
            {"observers": [{"name": "nope", "trigger": {"on_every_call": True}}]},
            "observers[0].name",
        ),
        ({"observers": [{"name": "resource"}]}, "observers[0].trigger"),
        ({"observers": [{"name": "resource", "trigger": {}}]}, "observers[0].trigger"),
        (
            {"observers": [{"name": "resource", "trigger": {"every_n_call": 3}}]},
            "observers[0].trigger.every_n_call",
        ),
        (
            {"observers": [{"name": "resource", "trigger": {"every_n_calls": -3}}]},
            "observers[0].trigger.every_n_calls",
        ),
        (
            {"observers": [{"name": "resource", "trigger": {"on_every_call": True}, "when": 1}]},
            "observers[0].when",
        ),
        (
            {
                "observers": [
                    {
                        "name": "resource",
                        "trigger": {"on_every_call": True},
                        "thresholds": {"caution": 0.3},
                    }
                ]
            },
            "observers[0].thresholds.caution",
        ),
        (
            {
                "observers": [
                    {
                        "name": "resource",
                        "trigger": {"on_every_call": True},
                        "thresholds": {"caution_threshold": 3},
                    }
                ]
            },
            "observers[0].thresholds.caution_threshold",
        ),
        (
            {
                "observers": [
                    {
                        "name": "pattern",
                        "trigger": {"on_every_call": True},
                        "thresholds": {"warning_error_count": [1]},
                    }
                ]
            },
            "observers[0].thresholds.warning_error_count",
        ),
        (
            {
                "observers": [
                    {"name": "resource", "trigger": {"on_every_call": True}},
                    {"name": "resource", "trigger": {"every_n_calls": 2}},
                ]
            },
            "observers[1].name",
        ),
        (
            {
                "observers": [
                    {
                        "name": "resource",
                        "trigger": {"on_every_call": True},
                        "thresholds": {"pace": "yes"},
                    }
                ]
            },
            "observers[0].thresholds.pace",
        ),
        (
            {
                "observers": [
                    {
                        "name": "resource",
                        "trigger": {"on_every_call": True},
                        "thresholds": {"pace": 1},
                    }
                ]
            },
            "observers[0].thresholds.pace",
        ),
        ({"profiles": [1]}, "profiles"),
        (
            {"profiles": {"x": [{"name": "resource", "trigger": {"nope": 1}}]}},
            "profiles.x[0].trigger.nope",
        ),
        ({"profiles": {"default": []}}, "profiles.default"),
        ({"max_snapshots": 0}, "max_snapshots"),
        ({"history_size": "10"}, "history_size"),
    ],
)
def test_invalid_keys_are_named(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_mapping(data)
    assert info.value.key == key, str(info.value)


def test_unknown_profile() -> None:
    with pytest.raises(ConfigError, match="unknown profile 'x'"):
        EngineConfig().observers_for("x")


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(bad)
    bady = tmp_path / "bad.yaml"
    bady.write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bady)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(top)


def test_observer_spec_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="unknown observer"):
        ObserverSpec("nope", ObserverTrigger(on_every_call=True)).build()
