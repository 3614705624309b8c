"""Hypothesis properties of the incremental analysis.

(a) incremental == from-scratch recompute (counters, frequencies, recent calls,
    and the patterns whose definition is simple enough to recompute);
(b) no event sequence makes the builder raise;
(c) snapshot → build_from → continue == never snapshotting.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.analysis import TrajectoryAnalysisConfig, TrajectoryBuilder
from streams.core.detectors import DEFAULT_DETECTORS, FileChurnDetector
from streams.core.events import CONTROL_EVENT_TYPES, EVENT_TYPES, TraceEvent
from streams.core.patterns import DoomLoop, ErrorCascade, ProgressStall
from streams.core.similarity import describe_action, error_signature

ALL_DETECTORS = (*DEFAULT_DETECTORS, FileChurnDetector())
TOOLS = ("bash", "read_file", "edit")
COMMANDS = (
    "make",
    "cat src/a.py",
    "sed -i 's/a/b/' src/a.py",
    "rm src/a.py",
    "touch src/a.py",
    "grep -rn foo src",
    "python repro.py",
    "ls  -la",
)
MESSAGES = (None, "E: x at /tmp/1/a.py line 3", "returncode 1", "KeyError: 'k'")


def steps_strategy(commands: tuple[str, ...]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    step = st.one_of(
        st.tuples(st.just("turn")),
        st.tuples(st.just("control"), st.sampled_from(CONTROL_EVENT_TYPES)),
        st.tuples(st.just("suggest"), st.sampled_from((*TOOLS, "run_tests"))),
        st.tuples(
            st.just("call"),
            st.sampled_from(TOOLS),
            st.sampled_from(commands),
            st.sampled_from(("ok", "fail", "fail", "none")),
            st.sampled_from(MESSAGES),
            st.sampled_from(("", "ok output", "Traceback\nValueError: v")),
        ),
    )
    return st.lists(step, max_size=120)


steps_st = steps_strategy(COMMANDS)
#: few distinct actions: loops, cycles and streaks are frequent
loopy_steps_st = steps_strategy(COMMANDS[:2])


def _params(tool: str, cmd: str) -> Any:
    return {"command": cmd} if tool == "bash" else cmd


def to_events(steps: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
    """Steps → ("event", TraceEvent) / ("suggest", tool) actions, in order."""
    out: list[tuple[str, Any]] = []
    seq = 0

    def ev(etype: str, **kw: Any) -> None:
        nonlocal seq
        seq += 1
        out.append(
            (
                "event",
                TraceEvent(
                    type=etype,  # type: ignore[arg-type]
                    session_id="p",
                    seq=seq,
                    timestamp_ms=1_000 + 700 * seq,
                    **kw,
                ),
            )
        )

    for i, s in enumerate(steps):
        if s[0] == "turn":
            ev("model_step")
        elif s[0] == "control":
            ev(s[1], metadata={"task": "fix src/a.py"} if s[1] == "session_start" else {})
        elif s[0] == "suggest":
            out.append(("suggest", s[1]))
        else:
            _, tool, cmd, outcome, msg, output = s
            cid = f"c{i}"
            ev("tool_call", tool_name=tool, call_id=cid, input=_params(tool, cmd))
            if outcome != "none":
                ev(
                    "tool_result",
                    tool_name=tool,
                    call_id=cid,
                    output=output,
                    is_error=outcome == "fail",
                    error_message=msg if outcome == "fail" else None,
                )
    return out


def apply(b: TrajectoryBuilder, actions: list[tuple[str, Any]]) -> list[Any]:
    fired: list[Any] = []
    for kind, value in actions:
        if kind == "event":
            fired.extend(b.on_event(value))
        else:
            b.note_suggestion(value)
    return fired


def oracle(steps: list[tuple[Any, ...]], window: int) -> dict[str, Any]:
    """From-scratch recompute of the documented semantics over the whole list."""
    records: list[tuple[str, Any, bool, str | None]] = []
    pending: tuple[str, Any] | None = None
    calls = 0
    turns = 0
    for s in steps:
        if s[0] == "turn":
            turns += 1
        elif s[0] == "call":
            _, tool, cmd, outcome, msg, output = s
            if pending is not None:
                records.append((pending[0], pending[1], True, None))
            calls += 1
            pending = (tool, _params(tool, cmd))
            if outcome != "none":
                failed = outcome == "fail"
                sig = error_signature(msg, output) if failed else None
                records.append((tool, pending[1], not failed, sig))
                pending = None
    trailing_fail = 0
    for r in reversed(records):
        if r[2]:
            break
        trailing_fail += 1
    run = 0
    if records:
        last = describe_action(records[-1][0], records[-1][1]).exact_key
        for r in reversed(records):
            if describe_action(r[0], r[1]).exact_key != last:
                break
            run += 1
    win = records[-window:]
    return {
        "records": win,
        "turns": turns,
        "calls": calls,
        "errors": sum(1 for r in records if not r[2]),
        "consecutive": trailing_fail,
        "tool_freq": dict(Counter(r[0] for r in win)),
        "error_freq": dict(Counter(r[3] for r in win if not r[2])),
        "tools": {s[1] for s in steps if s[0] == "call"},
        "run": run,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.one_of(steps_st, loopy_steps_st), window=st.sampled_from((1, 3, 7, 50)))
def test_incremental_equals_recompute(steps: list[tuple[Any, ...]], window: int) -> None:
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(window_size=window))
    apply(b, to_events(steps))
    a = b.build()
    want = oracle(steps, window)
    got = [(c.tool_name, c.params, c.success, c.error_signature) for c in a.calls]
    assert got == want["records"]
    assert a.turn_count == want["turns"]
    assert a.tool_call_count == want["calls"]
    assert a.error_count == want["errors"]
    assert a.consecutive_errors == want["consecutive"]
    assert a.tool_frequency() == want["tool_freq"]
    assert a.error_frequency() == want["error_freq"]
    assert a.unique_tools_used == want["tools"]
    for n in (0, 1, 2, 5):
        want_calls = a.calls[-n:] if n else ()
        want_errors = tuple(c for c in a.calls if not c.success)[-n:] if n else ()
        assert a.recent_tool_calls(n) == want_calls
        assert a.recent_errors(n) == want_errors
        # the live view the detectors read must agree with the built copy
        assert b.recent_tool_calls(n) == want_calls
        assert b.recent_errors(n) == want_errors
    assert b.tool_frequency() == want["tool_freq"]
    assert b.error_frequency() == want["error_freq"]
    assert b.last_call == (a.calls[-1] if a.calls else None)
    assert [c.call_index for c in a.calls] == list(
        range(
            len(a.calls) and a.calls[-1].call_index - len(a.calls) + 1, a.calls[-1].call_index + 1
        )
        if a.calls
        else []
    )
    pats = a.patterns()
    # doom_loop: an exact single-action run of >= threshold
    loop = pats.get("doom_loop")
    if want["run"] >= 3:
        assert isinstance(loop, DoomLoop) and loop.cycle_length == 1
        assert loop.repetitions == want["run"]
    elif loop is not None:
        assert isinstance(loop, DoomLoop) and loop.cycle_length >= 2
    # error_cascade: the trailing failure streak
    cascade = pats.get("error_cascade")
    if want["consecutive"] >= 3:
        assert isinstance(cascade, ErrorCascade) and cascade.length == want["consecutive"]
    else:
        assert cascade is None
    # progress_stall (no_success): >= stall_threshold failures in a row
    stall = pats.get("progress_stall")
    if want["consecutive"] >= 5:
        assert isinstance(stall, ProgressStall) and stall.reason == "no_success"
        assert stall.actions_during_stall == want["consecutive"]
    elif stall is not None:
        assert isinstance(stall, ProgressStall) and stall.reason == "no_progress"
    for p in pats.values():
        assert 0.0 <= p.confidence <= 1.0
        assert p.occurrences >= 1 and p.evidence


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
weird_text = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.sampled_from(("", " ", "\x00", "../../etc/passwd", "a" * 500, "\ud800", "é/ü.py", "<x>")),
)
random_event = st.builds(
    TraceEvent,
    type=st.sampled_from(EVENT_TYPES),
    session_id=st.just("r"),
    seq=st.integers(0, 10**6),
    timestamp_ms=st.integers(-(10**12), 10**13),
    call_id=st.one_of(st.none(), st.sampled_from(("1", "2", "3", "x"))),
    tool_name=weird_text,
    input=json_value,
    output=json_value,
    params_summary=weird_text,
    is_error=st.booleans(),
    error_message=weird_text,
    metadata=st.dictionaries(st.sampled_from(("task", "k")), st.text(max_size=20), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(random_event, max_size=80), window=st.sampled_from((1, 2, 50)))
def test_no_event_sequence_raises(events: list[TraceEvent], window: int) -> None:
    b = TrajectoryBuilder(TrajectoryAnalysisConfig(window_size=window, detectors=ALL_DETECTORS))
    for i, e in enumerate(events):
        b.on_event(e)
        if i % 7 == 3:
            b.note_suggestion(e.tool_name or "")
    a = b.build()
    assert len(a.calls) <= window
    stamps = [e.timestamp_ms for e in events]
    assert a.duration_ms == (max(stamps) - min(stamps) if stamps else 0)
    assert a.tool_call_count >= len(a.calls)
    resumed = TrajectoryBuilder.build_from(b.config, b.snapshot())
    assert resumed.build() == a


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.one_of(steps_st, loopy_steps_st),
    cut=st.floats(0.0, 1.0),
    window=st.sampled_from((2, 5, 50)),
)
def test_snapshot_resume_equals_uninterrupted(
    steps: list[tuple[Any, ...]], cut: float, window: int
) -> None:
    cfg = TrajectoryAnalysisConfig(window_size=window, detectors=ALL_DETECTORS)
    actions = to_events(steps)
    k = int(cut * len(actions))
    straight = TrajectoryBuilder(cfg)
    apply(straight, actions[:k])
    tail_straight = apply(straight, actions[k:])

    first = TrajectoryBuilder(cfg)
    apply(first, actions[:k])
    resumed = TrajectoryBuilder.build_from(cfg, first.snapshot())
    tail_resumed = apply(resumed, actions[k:])

    assert tail_resumed == tail_straight
    assert resumed.build() == straight.build()
    assert resumed.snapshot() == straight.snapshot()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.one_of(steps_st, loopy_steps_st), window=st.sampled_from((2, 50)))
def test_snapshot_resume_at_every_step(steps: list[tuple[Any, ...]], window: int) -> None:
    """Every cut point at once: rebuild from a snapshot after each action."""
    cfg = TrajectoryAnalysisConfig(window_size=window, detectors=ALL_DETECTORS)
    actions = to_events(steps)
    straight = TrajectoryBuilder(cfg)
    fired_straight = apply(straight, actions)
    hopping = TrajectoryBuilder(cfg)
    fired_hopping: list[Any] = []
    for action in actions:
        fired_hopping.extend(apply(hopping, [action]))
        hopping = TrajectoryBuilder.build_from(cfg, hopping.snapshot())
    assert fired_hopping == fired_straight
    assert hopping.snapshot() == straight.snapshot()
