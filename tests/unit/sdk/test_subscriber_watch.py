"""``trajectory watch``'s pure parts: the per-session view and the --plain lines."""

from __future__ import annotations

from streams.commands.watch import WatchState, plain_line, stats_line
from streams.sdk.subscriber import SubscriberStats
from streams.serde.avro import AssessmentWire, PatternRecord


def wire(sid: str, seq: int, severity: str | None, assessments: object = None) -> AssessmentWire:
    return AssessmentWire(
        sid, seq, 1000 + seq, "event", call_index=seq * 2, max_severity=severity,
        rendered=f"R{seq}", assessments=assessments, parent_session_id="p",
    )  # fmt: skip


def test_trend_follows_the_severities_seen() -> None:
    state = WatchState()
    trends = [
        state.apply(wire("s", i, sev)).trend
        for i, sev in enumerate(["info", "warning", "warning", "caution", None])
    ]
    assert trends == ["steady", "escalating", "steady", "de-escalating", "de-escalating"]
    row = state.rows["s"]
    assert (row.severity, row.call_index, row.seq, row.rendered) == ("info", 8, 4, "R4")
    assert state.most_recent == "s"


def test_a_trend_sent_by_the_worker_wins() -> None:
    state = WatchState()
    state.apply(wire("s", 1, "info"))
    assert state.apply(wire("s", 2, "warning", {"trend": "steady"})).trend == "steady"


def test_patterns_count_without_touching_the_assessment() -> None:
    state = WatchState()
    state.apply(wire("s", 1, "caution"))
    row = state.apply(PatternRecord("s", 7, 1, "doom_loop", call_index=9, severity="warning"))
    assert (row.patterns, row.last_pattern, row.severity, row.call_index) == (
        1,
        "doom_loop",
        "caution",
        9,
    )
    assert state.rows["s"].parent_session_id == "p"


def test_plain_lines() -> None:
    a = wire("s", 3, None)
    assert plain_line(a) == (
        "assessment session=s seq=3 call=6 severity=- trigger=event trend=- parent=p agent=-"
    )
    p = PatternRecord("s", 3, 1, "repeated_error", confidence=0.456, occurrences=2)
    assert plain_line(p) == (
        "pattern session=s seq=3 call=0 type=repeated_error severity=- confidence=0.46 "
        "occurrences=2 parent=- agent=-"
    )
    assert stats_line(SubscriberStats(delivered=2)).startswith("received=0 delivered=2 ")
