"""TrajectoryBuilder semantics: pairing, counters, windows, firing, snapshots."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from streams.core.analysis import (
    AnalysisState,
    TrajectoryAnalysis,
    TrajectoryAnalysisConfig,
    TrajectoryBuilder,
)
from streams.core.detectors import DoomLoopDetector, ErrorCascadeDetector
from streams.core.errors import ConfigError
from streams.core.events import TraceEvent


class Ev:
    """Event factory with increasing seq and event time."""

    def __init__(self, step_ms: int = 1000) -> None:
        self.seq = 0
        self.step = step_ms

    def __call__(self, etype: str, **kw: Any) -> TraceEvent:
        self.seq += 1
        return TraceEvent(
            type=etype,  # type: ignore[arg-type]
            session_id="s",
            seq=self.seq,
            timestamp_ms=10_000 + self.step * self.seq,
            **kw,
        )


def test_counters_and_pairing() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    b.on_event(ev("session_start", metadata={"task": "fix x"}))
    b.on_event(ev("model_step", text="think"))
    b.on_event(ev("tool_call", tool_name="bash", call_id="1", input={"command": "ls -la /tmp"}))
    b.on_event(ev("tool_result", tool_name="bash", call_id="1", output="a b"))
    b.on_event(ev("model_step"))
    b.on_event(ev("tool_call", tool_name="read_file", call_id="2", input={"path": "/a/b.py"}))
    b.on_event(ev("error", call_id="2", error_message="No such file: /a/b.py"))
    b.on_event(ev("tool_call", tool_name="bash", call_id="3", input={"command": "make"}))
    b.on_event(ev("tool_result", call_id="3", is_error=True, error_message="make: *** Error 2"))
    b.on_event(ev("budget"))
    a = b.build()
    assert a.turn_count == 2
    assert a.tool_call_count == 3
    assert a.error_count == 2
    assert a.consecutive_errors == 2
    assert a.unique_tools_used == frozenset({"bash", "read_file"})
    assert a.task == "fix x"
    assert a.duration_ms == 9000 and a.duration == timedelta(seconds=9)
    assert b.duration == a.duration and b.unique_tools_used == a.unique_tools_used
    assert [c.call_index for c in a.recent_tool_calls(5)] == [1, 2, 3]
    assert [c.tool_name for c in a.recent_errors(1)] == ["bash"]
    assert a.tool_frequency() == {"bash": 2, "read_file": 1}
    assert sum(a.error_frequency().values()) == 2
    first = a.recent_tool_calls(3)[0]
    assert first.params_summary == "ls -la /tmp"
    assert first.success and first.output_summary == "a b"
    assert first.cite() == "#1 bash(ls -la /tmp)"


def test_call_without_result_completes_as_success_on_next_call() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    b.on_event(ev("tool_call", tool_name="a", call_id="1"))
    assert b.build().recent_tool_calls(5) == ()
    b.on_event(ev("tool_call", tool_name="b", call_id="2"))
    calls = b.build().recent_tool_calls(5)
    assert [(c.tool_name, c.success, c.output_summary) for c in calls] == [("a", True, None)]
    # the late result of the auto-completed call is an orphan, not a second record
    b.on_event(ev("tool_result", tool_name="a", call_id="1", is_error=True))
    a = b.build()
    assert a.orphan_result_count == 1 and a.error_count == 0


def test_result_without_call_becomes_a_record() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    b.on_event(ev("tool_result", tool_name="search", call_id="x", output="hits"))
    b.on_event(ev("tool_result", call_id="y"))  # no tool name: orphan
    a = b.build()
    assert [c.tool_name for c in a.calls] == ["search"]
    assert a.tool_call_count == 1 and a.orphan_result_count == 1


def test_agent_level_error_is_not_a_tool_failure() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    b.on_event(ev("error", error_message="format error"))
    a = b.build()
    assert a.agent_error_count == 1 and a.error_count == 0 and a.calls == ()


def test_params_summary_derived_and_abbreviated() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    long_cmd = "python -c '" + "x" * 300 + "'"
    b.on_event(ev("tool_call", tool_name="bash", call_id="1", input={"command": long_cmd}))
    b.on_event(ev("tool_call", tool_name="t", call_id="2", params_summary="given"))
    b.on_event(ev("tool_call", tool_name="t", call_id="3"))
    calls = b.build().calls
    assert len(calls[0].params_summary) == 80 and calls[0].params_summary.endswith("…")
    assert calls[1].params_summary == "given"


def test_window_bounds_memory_and_frequencies() -> None:
    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(window_size=3, detectors=()))
    for i, tool in enumerate(["a", "a", "b", "c", "c"]):
        b.on_event(ev("tool_call", tool_name=tool, call_id=str(i)))
        b.on_event(ev("tool_result", call_id=str(i), is_error=tool == "a", error_message="E: x"))
    a = b.build()
    assert [c.tool_name for c in a.calls] == ["b", "c", "c"]
    assert a.tool_frequency() == {"b": 1, "c": 2}
    assert a.error_frequency() == {}  # both failures left the window
    assert a.error_count == 2 and a.tool_call_count == 5
    assert a.recent_errors(5) == ()


def test_patterns_fire_on_transitions_only() -> None:
    ev = Ev()
    cfg = TrajectoryAnalysisConfig(detectors=(DoomLoopDetector(), ErrorCascadeDetector()))
    b = TrajectoryBuilder.from_config(cfg)
    fired = []
    for i in range(6):
        b.on_event(ev("tool_call", tool_name="bash", call_id=str(i), input={"command": "make"}))
        fired.append(
            b.on_event(ev("tool_result", call_id=str(i), is_error=True, error_message="E: x"))
        )
    types = [[p.pattern_type for p in f] for f in fired]
    assert types == [[], [], ["doom_loop", "error_cascade"], [], [], []]
    a = b.build()
    assert a.has_pattern("doom_loop") and a.has_pattern("error_cascade")
    assert not a.has_pattern("drift")
    loop = a.patterns()["doom_loop"]
    assert loop.occurrences == 1 and loop.call_index == 3


def test_reset_forgets_everything() -> None:
    ev = Ev()
    b = TrajectoryBuilder()
    for i in range(4):
        b.on_event(ev("tool_call", tool_name="bash", call_id=str(i), input={"command": "make"}))
        b.on_event(ev("tool_result", call_id=str(i), is_error=True))
    assert b.build().patterns()
    b.reset()
    empty = TrajectoryBuilder().build()
    assert b.build() == empty
    b.on_event(ev("tool_call", tool_name="bash", call_id="x", input={"command": "make"}))
    b.on_event(ev("tool_result", call_id="x", is_error=True))
    assert b.build().patterns() == {}  # the old streak is gone


def test_snapshot_is_plain_and_resumes() -> None:
    ev = Ev()
    b = TrajectoryBuilder()
    events = []
    for i in range(8):
        events.append(ev("tool_call", tool_name="bash", call_id=str(i), input={"command": "make"}))
        events.append(ev("tool_result", call_id=str(i), is_error=i > 2, error_message="E: x"))
    for e in events[:7]:
        b.on_event(e)
    state = b.snapshot()
    assert isinstance(state, AnalysisState)
    resumed = TrajectoryBuilder.build_from(b.config, state)
    out_a = [p for e in events[7:] for p in b.on_event(e)]
    out_b = [p for e in events[7:] for p in resumed.on_event(e)]
    assert out_a == out_b and out_a
    assert b.build() == resumed.build()


def test_analysis_type_is_frozen() -> None:
    a = TrajectoryBuilder().build()
    assert isinstance(a, TrajectoryAnalysis)
    with pytest.raises(AttributeError):
        a.turn_count = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"window_size": 0}, "window_size"),
        ({"doom_loop_threshold": 1}, "doom_loop_threshold"),
        ({"similarity_threshold": 1.5}, "similarity_threshold"),
        ({"similarity_threshold": 0}, "similarity_threshold"),
        ({"error_window": True}, "error_window"),
        ({"stall_threshold": "5"}, "stall_threshold"),
        ({"detectors": ["doom_loop"]}, "detectors"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        TrajectoryAnalysisConfig(**kwargs)
    assert exc.value.key == key


def test_spec_defaults() -> None:
    cfg = TrajectoryAnalysisConfig()
    assert (
        cfg.window_size,
        cfg.doom_loop_threshold,
        cfg.doom_loop_min_length,
        cfg.similarity_threshold,
        cfg.error_window,
        cfg.stall_threshold,
    ) == (50, 3, 2, 0.8, 10, 5)
    assert len(cfg.detectors) == 11  # + monologue, context_loop, alternating_cycle (issue 11)


def test_snapshot_survives_the_canonical_state_codec() -> None:
    """The engine stores ``snapshot()`` through ``streams.core.statecodec``: every value
    in it must be a frozen ``streams.core`` dataclass or plain data, and decoding
    must give an equal state that resumes identically."""
    codec = pytest.importorskip("streams.core.statecodec")
    from streams.core.detectors import DEFAULT_DETECTORS, FileChurnDetector

    cfg = TrajectoryAnalysisConfig(detectors=(*DEFAULT_DETECTORS, FileChurnDetector()))
    ev = Ev()
    b = TrajectoryBuilder(cfg)
    b.on_event(ev("session_start", metadata={"task": "fix src/a.py"}))
    commands = ["make", "make", "make", "cat src/a.py", "sed -i 's/a/b/' src/a.py", "rm x.txt"]
    for i in range(40):
        cmd = commands[i % len(commands)] if i < 30 else "make"
        b.on_event(ev("tool_call", tool_name="bash", call_id=str(i), input={"command": cmd}))
        b.on_event(ev("tool_result", call_id=str(i), is_error=i % 4 == 0, error_message="E: x"))
    b.note_suggestion("run_tests")
    state = b.snapshot()
    assert state.active  # something to carry (incl. a timedelta in ProgressStall)
    back = codec.from_canonical(codec.to_canonical(state))
    assert back == state
    resumed = TrajectoryBuilder.build_from(cfg, back)
    nxt = ev("tool_call", tool_name="bash", call_id="z", input={"command": "make"})
    assert resumed.on_event(nxt) == b.on_event(nxt)
    assert resumed.snapshot() == b.snapshot()


def test_compact_record_drops_only_params_and_error_message() -> None:
    from dataclasses import replace

    from streams.core.analysis import compact_record

    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(detectors=()))
    b.on_event(ev("tool_call", tool_name="bash", call_id="1", input={"command": "make all"}))
    b.on_event(ev("tool_result", call_id="1", is_error=True, error_message="E: boom", output="o"))
    rec = b.build().calls[0]
    assert compact_record(rec) == replace(rec, params=None, error_message=None)
    assert b.last_compact == compact_record(rec)


def test_state_stays_bounded_on_endless_novel_input() -> None:
    """Unique tools, paths, errors and ids forever: the snapshot stops growing."""
    from streams.core.analysis import MAX_FIRED_KEYS, MAX_TOOL_NAMES

    ev = Ev()
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(window_size=20))

    def feed(start: int, stop: int) -> None:
        for i in range(start, stop):
            tool = f"tool{i}" if i % 3 else "bash"
            cmd = {"command": f"cat dir{i}/file{i}.py"} if tool == "bash" else {"path": f"p{i}"}
            b.on_event(ev("tool_call", tool_name=tool, call_id=f"id{i}", input=cmd))
            b.on_event(
                ev("tool_result", call_id=f"id{i}", is_error=i % 2 == 0, error_message=f"E{i}: x")
            )
            b.note_suggestion(f"suggested{i}")

    feed(0, 6000)  # every cap (paths seen: 2048) is saturated by now
    size_a = len(repr(b.snapshot()))
    feed(6000, 12000)
    state = b.snapshot()
    size_b = len(repr(state))
    assert len(state.window) == 20
    assert len(state.unique_tools) <= MAX_TOOL_NAMES
    assert len(state.fired) <= MAX_FIRED_KEYS
    assert len(state.suggestions) <= 64
    assert size_b < 1.05 * size_a, (size_a, size_b)


def test_factory_check_agrees_with_the_protocol_isinstance() -> None:
    """``_is_factory`` replaces ``isinstance(spec, DetectorFactory)`` on the per-session
    build path (speed): it must say the same for factories, plain detectors, a spec
    whose ``build`` is blocked with None, and things that are neither."""
    from streams.core.analysis import _is_factory
    from streams.core.detectors import DEFAULT_DETECTORS
    from streams.core.patterns import DetectorFactory

    class Blocked:
        name = "blocked"
        build = None

    class NoName:
        def build(self, analysis_config: Any, snapshot: Any = None) -> Any:
            return None

    specs: list[Any] = [*DEFAULT_DETECTORS, DoomLoopDetector(), Blocked(), NoName(), object()]
    specs += [TrajectoryAnalysisConfig().detectors[0]]
    for spec in specs:
        assert _is_factory(spec) is isinstance(spec, DetectorFactory), spec
    assert any(_is_factory(s) for s in specs) and not all(_is_factory(s) for s in specs)
