"""The reusable offline loop: one engine per session, records per detection/assessment."""

from __future__ import annotations

from streams.core.config import EngineConfig
from streams.core.engine import SessionEngine
from streams.core.events import TraceEvent
from streams.importers.offline import OfflineAnalyzer, analyze_events


def failing_loop(sid: str, n: int, offset: int = 0) -> list[TraceEvent]:
    events: list[TraceEvent] = []
    for i in range(n):
        base = dict(session_id=sid, tool_name="bash")
        t = 1_700_000_000_000 + (offset + i) * 1000
        events.append(
            TraceEvent(
                type="tool_call",
                seq=2 * i,
                timestamp_ms=t,
                call_id=f"c{i}",
                input={"command": "make"},
                params_summary="make",
                **base,
            )  # type: ignore[arg-type]
        )
        events.append(
            TraceEvent(
                type="tool_result",
                seq=2 * i + 1,
                timestamp_ms=t + 500,
                call_id=f"c{i}",
                output="make: *** [all] Error 2",
                is_error=True,
                error_message="make: *** [all] Error 2",
                **base,
            )  # type: ignore[arg-type]
        )
    return events


def test_interleaved_sessions_match_separate_runs() -> None:
    a = failing_loop("a", 10)
    b = failing_loop("b", 6, offset=100)
    interleaved = [ev for pair in zip(a, b + [None] * len(a), strict=False) for ev in pair if ev]
    together = list(analyze_events(interleaved, EngineConfig()))
    alone = list(analyze_events(a)) + list(analyze_events(b))
    key = lambda r: (r["session_id"], r["seq"], r["kind"], r.get("pattern_type") or r["observer"])  # noqa: E731
    assert sorted(together, key=key) == sorted(alone, key=key)
    assert {r["session_id"] for r in together} == {"a", "b"}


def test_records_mirror_engine_outputs() -> None:
    events = failing_loop("s", 10)
    engine = SessionEngine.create("s", EngineConfig())
    expected_patterns = []
    expected_assessments = []
    for ev in events:
        out = engine.on_event(ev)
        expected_patterns += [(d.seq, d.call_index, d.pattern.pattern_type) for d in out.patterns]
        if out.assessment is not None:
            expected_assessments += [
                (out.assessment.seq, a.observer_name, a.render())
                for a in out.assessment.assessments
            ]
    analyzer = OfflineAnalyzer()
    records = [r for ev in events for r in analyzer.feed(ev)]
    assert expected_patterns, "ten identical failures must fire a pattern"
    assert [
        (r["seq"], r["call_index"], r["pattern_type"]) for r in records if r["kind"] == "pattern"
    ] == expected_patterns
    assert [
        (r["seq"], r["observer"], r["text"]) for r in records if r["kind"] == "assessment"
    ] == expected_assessments
    final = analyzer.final("s")
    assert final is not None and final == engine.current
    assert analyzer.final("unknown") is None
