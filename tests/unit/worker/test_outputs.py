"""Worker outputs: pattern/assessment/snapshot records built from engine outputs (no Kafka)."""

from __future__ import annotations

from app_events import T0, looping

from streams.core.events import META_SNAPSHOT_ID, TraceEvent
from streams.serde import AssessmentSerde, PatternSerde
from streams.settings import Settings
from streams.snapshots import decode_snapshot
from streams.worker.outputs import OutputEncoder
from streams.worker.processor import EventProcessor


def run(events: list[TraceEvent]) -> tuple[EventProcessor, list]:  # type: ignore[type-arg]
    p = EventProcessor({}, {}, {}, {})
    enc = OutputEncoder(Settings(prefix="t"))
    recs = []
    for ev in events:
        res = p.apply(ev)
        recs.extend(enc.records(ev, res.engine, lambda ev=ev: p.engine_state(ev.session_id)))
    return p, recs


def test_patterns_and_assessments_are_published_once() -> None:
    events = looping(10)
    _, recs = run(events + events[:8])  # redelivered copies publish nothing
    kinds = [r.kind for r in recs]
    patterns = [PatternSerde().decode(r.value) for r in recs if r.kind == "patterns"]
    assert any(p.pattern_type == "doom_loop" for p in patterns)
    assert all(r.key == b"s1" for r in recs)
    assert {p.seq for p in patterns} <= {e.seq for e in events}
    # every assessment goes to the compacted topic and to the history, same bytes
    latest = [r.value for r in recs if r.kind == "assessments"]
    history = [r.value for r in recs if r.kind == "assessment_history"]
    assert latest == history and latest
    wire = AssessmentSerde().decode(latest[-1])
    assert wire.session_id == "s1" and wire.rendered.startswith("## Trajectory Assessment")
    _, again = run(events)
    assert [r.kind for r in again] == kinds  # deterministic, duplicates added nothing


def test_snapshot_event_publishes_restore_point() -> None:
    events = looping(3)
    snap = TraceEvent("snapshot", "s1", 6, T0 + 60_000, metadata={META_SNAPSHOT_ID: "before-fix"})
    _, recs = run([*events, snap])
    snaps = [r for r in recs if r.kind == "snapshots"]
    assert len(snaps) == 1
    assert snaps[0].key == b"s1/before-fix"
    assert dict(snaps[0].headers)["seq"] == b"6"
    assert decode_snapshot(snaps[0].value).last_seq == 6


def test_restore_republishes_the_restored_assessment_to_the_compacted_topic_only() -> None:
    events = looping(6)
    last = events[-1]
    snap = TraceEvent(
        "snapshot", "s1", last.seq + 1, last.timestamp_ms + 1, metadata={META_SNAPSHOT_ID: "p"}
    )
    more = [
        TraceEvent(
            e.type,
            "s1",
            e.seq + last.seq + 2,
            e.timestamp_ms + 60_000,
            call_id=e.call_id,
            tool_name=e.tool_name,
            input=e.input,
            is_error=e.is_error,
            error_message=e.error_message,
        )
        for e in looping(6)
    ]
    restore = TraceEvent(
        "restore",
        "s1",
        more[-1].seq + 1,
        more[-1].timestamp_ms + 1,
        metadata={META_SNAPSHOT_ID: "p"},
    )
    p, recs = run([*events, snap])
    point = p.engine_state("s1").current
    assert point is not None and point.assessments  # the restore point has an assessment
    _, recs = run([*events, snap, *more, restore])
    tail = [r for r in recs if r.kind.startswith("assessment")]
    last_rec = tail[-1]
    assert last_rec.kind == "assessments"  # the history is not re-sent
    restored = AssessmentSerde().decode(last_rec.value)
    assert restored.seq == point.seq and restored.rendered == point.render()


def test_timer_records_go_to_both_assessment_topics() -> None:
    from streams.core.events import Budget

    p = EventProcessor({}, {}, {}, {})
    enc = OutputEncoder(Settings(prefix="t"))
    p.apply(
        TraceEvent(
            "budget",
            "s1",
            0,
            T0,
            agent_id="a1",
            budget=Budget(deadline_ms=T0 + 1000, max_tokens=100),
        )
    )
    p.apply(TraceEvent("tool_call", "s1", 1, T0, call_id="c", tool_name="read"))
    (made,) = p.on_timer(T0 + 5_000)
    recs = enc.timer_records(made)
    assert [r.kind for r in recs] == ["assessments", "assessment_history"]
    wire = AssessmentSerde().decode(recs[0].value)
    assert wire.trigger == "timer" and wire.agent_id == "a1" and wire.seq == 1
