"""``--compare-live``'s pure parts: table state diff and allowed repeats vs differences."""

from __future__ import annotations

import dataclasses
import re

import pytest
from replay_sessions import T0, failing_session

from streams.core.engine import SessionEngine
from streams.core.events import Budget, TraceEvent
from streams.core.statecodec import decode_state, encode_state
from streams.replay.compare import CompareReport
from streams.replay.replay import ReplayResult, diff_live, replay_events
from streams.replay.state import StateReplay, Tables, diff_tables, replay_state
from streams.serde import AssessmentWire
from streams.worker.processor import EventProcessor
from streams.worker.state import SessionCounters


def fleet() -> list[TraceEvent]:
    """Three interleaved sessions (patterns, assessments, budgets, errors)."""
    per = [failing_session(f"s{i}", T0 + 70 * i, n=6 + i) for i in range(3)]
    out: list[TraceEvent] = []
    for i in range(max(len(p) for p in per)):
        out += [p[i] for p in per if i < len(p)]
    return out


def worker_like_tables(events: list[TraceEvent]) -> Tables:
    """What a worker that crashed and was redelivered, and evicts hard, ends with:
    the same processor over dict tables, flushes every 5 events, cache of 1
    session, and the first 12 events delivered twice (at-least-once)."""
    tables: Tables = {"sessions": {}, "budgets": {}, "minutes": {}, "engines": {}}
    proc = EventProcessor(
        tables["sessions"], tables["budgets"], tables["minutes"], tables["engines"], max_sessions=1
    )
    for n, ev in enumerate([*events[:12], *events], 1):
        proc.apply(ev, partition=0)
        if n % 5 == 0:
            proc.flush()
            proc.evict()
    proc.flush()
    return tables


def sids(events: list[TraceEvent]) -> list[str]:
    return sorted({e.session_id for e in events})


def test_state_of_a_correct_worker_equals_the_replay() -> None:
    evs = fleet()
    live, mine = worker_like_tables(evs), replay_state(evs)
    diff = diff_tables(live, mine, sids(evs))
    assert diff.ok, [d.describe() for d in diff.differences]
    assert diff.sessions == 3
    # counters, budgets, engines per session, plus minute values
    assert diff.values_compared >= 3 * 3 + 1
    # engine values are the worker's deflated form; the comparison decodes both
    assert mine["engines"][b"s1"][:1] == b"\x00"


def test_regressed_session_is_named_by_table_and_field() -> None:
    """The issue #15 shape: a session's changelog carries an older value."""
    evs = fleet()
    live, mine = worker_like_tables(evs), replay_state(evs)
    s1 = [e for e in evs if e.session_id == "s1"]
    older = replay_state(s1[:5])  # what the table held 5 events in
    live["sessions"][b"s1"] = older["sessions"][b"s1"]
    live["engines"][b"s1"] = older["engines"][b"s1"]
    diff = diff_tables(live, mine, sids(evs))
    text = [d.describe() for d in diff.differences]
    full = SessionCounters.decode(mine["sessions"][b"s1"])
    assert f"s1 sessions.last_seq: live 4, replay {full.last_seq}" in text
    assert f"s1 sessions.events: live 5, replay {full.events}" in text
    assert f"s1 engines.last_seq: live 4, replay {full.last_seq}" in text
    assert any(t.startswith("s1 engines.analysis.") for t in text)
    assert {d.session_id for d in diff.differences} == {"s1"}  # s0, s2 are right
    # the live tables lack s1's latest events: the report says what a too-early
    # compare against a running worker looks like, and stays not clean
    assert diff.behind() == ["s1"]
    report = CompareReport(outputs=diff_live(ReplayResult(None), [], []), state=diff)
    assert not report.ok
    assert "1 session(s) with live tables behind the replay (live last_seq lower: s1)" in (
        report.render()
    )
    # a live value *ahead* of the replay is not "behind"
    live["sessions"][b"s1"], mine["sessions"][b"s1"] = (
        mine["sessions"][b"s1"],
        live["sessions"][b"s1"],
    )
    live["engines"][b"s1"], mine["engines"][b"s1"] = mine["engines"][b"s1"], live["engines"][b"s1"]
    ahead = diff_tables(live, mine, sids(evs))
    assert not ahead.ok and ahead.behind() == []
    assert (
        "behind the replay"
        not in CompareReport(outputs=diff_live(ReplayResult(None), [], []), state=ahead).render()
    )


def test_missing_and_undecodable_live_values_are_differences() -> None:
    evs = fleet()
    live, mine = worker_like_tables(evs), replay_state(evs)
    del live["sessions"][b"s0"]
    live["budgets"][b"s2"] = b"not json"
    text = [d.describe() for d in diff_tables(live, mine, sids(evs)).differences]
    assert "s0 sessions: live (none), replay (a value)" in text
    assert any(t.startswith("s2 budgets: live undecodable (") for t in text)
    # a session the replay does not cover is not compared
    live["sessions"][b"other"] = b"x"
    assert len(diff_tables(live, mine, sids(evs)).differences) == 2


def test_minutes_difference_names_the_minute_key() -> None:
    evs = fleet()
    live, mine = worker_like_tables(evs), replay_state(evs)
    key = next(k for k in live["minutes"] if k.startswith(b"s1@"))
    live["minutes"][key] = replay_state([e for e in evs if e.session_id == "s1"][:3])["minutes"][
        key
    ]
    text = [d.describe() for d in diff_tables(live, mine, sids(evs)).differences]
    assert any(t.startswith(f"s1 minutes[{key.decode()}].") for t in text), text


def test_timer_made_engine_fields_are_skipped_only_for_timer_sessions() -> None:
    """A deadline assessment (wall-time timer) changes the live engine only."""
    evs = [
        TraceEvent("session_start", "t1", 0, T0),
        TraceEvent("budget", "t1", 1, T0, budget=Budget(deadline_ms=T0 + 5000)),
        TraceEvent("tool_call", "t1", 2, T0 + 100, tool_name="bash", call_id="c", input={}),
    ]
    tables: Tables = {"sessions": {}, "budgets": {}, "minutes": {}, "engines": {}}
    proc = EventProcessor(
        tables["sessions"], tables["budgets"], tables["minutes"], tables["engines"]
    )
    for ev in evs:
        proc.apply(ev)
    assert proc.on_timer(T0 + 60_000)  # the deadline passed: a timer assessment
    proc.flush()
    mine = replay_state(evs)
    strict = diff_tables(tables, mine, ["t1"])
    fields = {d.field.split(".")[0] for d in strict.differences}
    assert fields and fields <= {"current", "history", "observer_states", "deadline_reported_ms"}
    lenient = diff_tables(tables, mine, ["t1"], timer_sessions=["t1"])
    assert lenient.ok and lenient.timer_sessions == 1
    # event-made fields are still compared for a timer session
    state = decode_state(tables["engines"][b"t1"])
    tables["engines"][b"t1"] = encode_state(dataclasses.replace(state, last_seq=1))
    bad = diff_tables(tables, mine, ["t1"], timer_sessions=["t1"])
    assert [d.describe() for d in bad.differences] == ["t1 engines.last_seq: live 1, replay 2"]


def test_state_replay_feed_passes_events_through_once() -> None:
    evs = fleet()
    state = StateReplay()
    result = replay_events(state.feed(iter(evs)))
    assert result.events == state.events == len(evs)
    assert state.tables() == replay_state(evs)


def _outputs(result: ReplayResult) -> list[object]:
    return [
        (
            s.session_id,
            s.events,
            s.records,
            s.patterns,
            s.assessments,
            s.tool_calls,
            s.final_severity,
        )
        for s in result.ordered()
    ] + [result.rejected]


def test_compare_state_runs_the_engine_once_per_event(monkeypatch) -> None:
    """``--compare-live`` takes its outputs from the tables' engine run: same outputs
    and tables as two separate runs, with one ``on_event`` per event (it was two)."""
    evs = fleet()
    # a duplicate and an event the engine rejects: both handled the same either way
    bad = TraceEvent("restore", "s1", 99, T0 + 9000, metadata={"snapshot_id": "nope"})
    evs = [*evs, evs[4], bad]
    alone = replay_events(evs)
    calls = 0
    real = SessionEngine.on_event

    def counted(self: SessionEngine, ev: TraceEvent) -> object:
        nonlocal calls
        calls += 1
        return real(self, ev)

    monkeypatch.setattr(SessionEngine, "on_event", counted)
    state = StateReplay()
    shared = replay_events(evs, state=state)
    assert calls == len(evs)
    assert _outputs(shared) == _outputs(alone)
    assert shared.sessions["s2"].patterns and shared.sessions["s2"].assessments
    assert state.tables() == replay_state(evs)
    assert state.events == len(evs) and [q for _, q, _ in state.rejected] == [99]


def test_an_event_live_ingest_refuses_changes_no_table() -> None:
    """``event_error`` refuses it (the worker dead-letters it before the processor):
    no output and no table value, whether or not the state is rebuilt."""
    evs = fleet()
    refused = dataclasses.replace(evs[5], seq=-3)
    state = StateReplay()
    result = replay_events([*evs, refused], state=state)
    assert _outputs(result) == _outputs(replay_events([*evs, refused]))
    assert [(s, q) for s, q, _ in result.rejected] == [(refused.session_id, -3)]
    assert state.tables() == replay_state(evs)


def test_absorbed_tables_of_two_shares_equal_one_replay() -> None:
    """What ``--jobs N`` does with the workers' tables: disjoint sessions merge into
    the tables of one replay; a key built twice is an error."""
    evs = fleet()
    whole = StateReplay()
    replay_events(evs, state=whole)
    parts = [StateReplay(), StateReplay()]
    replay_events([e for e in evs if e.session_id == "s1"], state=parts[0])
    replay_events([e for e in evs if e.session_id != "s1"], state=parts[1])
    merged = StateReplay()
    for part in parts:
        merged.absorb(part.tables(), part.rejected, part.events)
    assert merged.tables() == whole.tables() and merged.events == len(evs)
    with pytest.raises(ValueError, match="built by two replay workers"):
        merged.absorb(parts[0].tables(), [], 0)


# ------------------------------------------------------------------ allowed repeats


def test_identical_repeats_are_allowed_not_differences() -> None:
    result = replay_events(failing_session("s1", T0))
    sr = result.sessions["s1"]
    assert sr.patterns and len(sr.assessments) >= 2
    patterns = [*sr.patterns, sr.patterns[0], sr.patterns[0]]
    assessments = [*sr.assessments, sr.assessments[1]]
    for complete in (False, True):
        diff = diff_live(result, patterns, assessments, complete=complete)
        assert diff.ok, diff.render()
        assert diff.allowed_repeats == 3
        assert diff.patterns_compared == len(sr.patterns)
    p0, a1 = sr.patterns[0], sr.assessments[1]
    assert diff.repeats == [
        f"s1 pattern (seq {p0.seq}, {p0.pattern_type}): 2 identical repeat(s)",
        f"s1 assessment (seq {a1.seq}, event): 1 identical repeat(s)",
    ]
    assert "3 allowed repeat(s)" in diff.render()


def test_a_repeat_with_different_content_is_a_difference() -> None:
    result = replay_events(failing_session("s1", T0))
    sr = result.sessions["s1"]
    p0, a1 = sr.patterns[0], sr.assessments[1]
    other_p = dataclasses.replace(p0, occurrences=p0.occurrences + 7)
    diff = diff_live(result, [*sr.patterns, other_p], list(sr.assessments))
    assert not diff.ok and diff.allowed_repeats == 0
    assert "repeat with different content" in diff.differences[0]
    other_a = dataclasses.replace(a1, rendered=a1.rendered + "\nmore")
    diff = diff_live(result, list(sr.patterns), [*sr.assessments, other_a])
    assert [d.split("\n")[0] for d in diff.differences] == [
        f"s1 assessment at seq {a1.seq}: repeat with different content"
    ]
    # a field outside the replay contract still makes a repeat "different"
    detail = dataclasses.replace(p0, details={"x": 1})
    assert not diff_live(result, [*sr.patterns, detail], list(sr.assessments)).ok


def test_missing_extra_and_changed_records_are_differences() -> None:
    result = replay_events(failing_session("s1", T0))
    sr = result.sessions["s1"]
    p0 = sr.patterns[0]
    missing = diff_live(result, list(sr.patterns[1:]), list(sr.assessments))
    assert [re.sub(r"#\d+", "#n", d) for d in missing.differences] == [
        f"s1 pattern #n (seq {p0.seq}, {p0.pattern_type}): replay only, live (none)"
    ]
    extra = dataclasses.replace(p0, seq=999)
    assert "live only" in diff_live(result, [*sr.patterns, extra], sr.assessments).differences[0]
    changed = dataclasses.replace(p0, confidence=0.01)
    bad = diff_live(result, [changed, *sr.patterns[1:]], list(sr.assessments))
    assert len(bad.differences) == 1 and "!= live" in bad.differences[0]
    # timer assessments stay ignored, also when repeated
    timer = AssessmentWire("s1", 3, T0, "timer", rendered="wall time")
    ok = diff_live(result, list(sr.patterns), [*sr.assessments, timer, timer])
    assert ok.ok and ok.timer_assessments_ignored == 2 and ok.allowed_repeats == 0


def test_report_summary_line_and_verdict() -> None:
    evs = fleet()
    result = replay_events(evs)
    patterns = [p for s in result.ordered() for p in s.patterns]
    assessments = [a for s in result.ordered() for a in s.assessments]
    live, mine = worker_like_tables(evs), replay_state(evs)
    clean = CompareReport(
        diff_live(result, [*patterns, patterns[0]], assessments, complete=True),
        diff_tables(live, mine, sids(evs)),
    )
    assert clean.ok
    line = clean.render().splitlines()[-1]
    fields = dict(kv.split("=") for kv in line.removeprefix("compare-live: ").split())
    assert fields == {
        "sessions": "3",
        "state": "compared",
        "state_differences": "0",
        "output_differences": "0",
        "allowed_repeats": "1",
        "timer_assessments_ignored": "0",
        "dead_lettered": "0",
        "undecodable": "0",
        "verdict": "clean",
    }
    live["sessions"][b"s2"] = replay_state([e for e in evs if e.session_id == "s2"][:2])[
        "sessions"
    ][b"s2"]
    bad = CompareReport(
        diff_live(result, patterns, assessments, complete=True),
        diff_tables(live, mine, sids(evs)),
    )
    assert not bad.ok and bad.state_differences >= 2 and bad.output_differences == 0
    assert bad.summary().endswith("verdict=differences")
    data = bad.to_json()
    assert data["ok"] is False and data["state_differences"] == bad.state_differences
    assert data["differences"]["state"][0]["session_id"] == "s2"
    skipped = CompareReport(diff_live(result, patterns, assessments), None, "a slice")
    assert skipped.ok and "state=skipped" in skipped.summary()
    assert "table state: not compared (a slice)" in skipped.render()
    required = CompareReport(diff_live(result, patterns, assessments), None, "a slice")
    required.state_required = True
    assert not required.ok and "state=skipped" in required.summary()
    assert "verdict=differences" in required.summary()
    assert "and required: not clean" in required.render()


def test_an_event_the_engine_rejects_is_skipped_like_the_worker_does() -> None:
    """A restore of an unknown snapshot: the worker dead-letters it and carries on."""
    evs = failing_session("s1", T0, n=3)
    bad = TraceEvent("restore", "s1", len(evs), T0 + 9000, metadata={"snapshot_id": "nope"})
    after = failing_session("s1", T0 + 10_000, n=2)[2:]
    after = [dataclasses.replace(e, seq=len(evs) + 1 + i) for i, e in enumerate(after)]
    stream = [*evs, bad, *after]
    result = replay_events(stream)
    assert [(sid, seq) for sid, seq, _ in result.rejected] == [("s1", bad.seq)]
    assert "snapshot" in result.rejected[0][2]
    assert result.sessions["s1"].events == len(stream)
    state = StateReplay()
    assert replay_events(state.feed(stream)).records() is not None
    assert [(s, q) for s, q, _ in state.rejected] == [("s1", bad.seq)]
    without = replay_state([*evs, *after])
    assert state.tables() == without  # the rejected event changed nothing
