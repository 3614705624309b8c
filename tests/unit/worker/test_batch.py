"""The worker's batch handler (streams/worker/batch.py) with fake records and a fake send."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

import pytest
from app_events import looping

from streams.core.events import TraceEvent
from streams.serde import AssessmentSerde, EventSerde, PatternSerde
from streams.settings import Settings
from streams.worker.batch import EventBatchHandler
from streams.worker.outputs import OutputEncoder
from streams.worker.processor import EventProcessor

SETTINGS = Settings(prefix="t")
SERDE = EventSerde("single-object")
TOPICS = {
    "patterns": "t.patterns",
    "assessments": "t.assessments",
    "assessment_history": "t.assessment-history",
    "snapshots": "t.snapshots",
}


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    topic: str = "t.events"
    partition: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


def records(events: list[TraceEvent], start: int = 0) -> list[Rec]:
    return [Rec(start + i, e.session_id.encode(), SERDE.encode(e)) for i, e in enumerate(events)]


class Sent:
    def __init__(self) -> None:
        self.items: list[tuple[str, bytes | None, bytes, Any]] = []

    async def __call__(self, topic: str, key: bytes | None, value: bytes, headers: Any) -> None:
        self.items.append((topic, key, value, headers))

    def to(self, topic: str) -> list[tuple[str, bytes | None, bytes, Any]]:
        return [s for s in self.items if s[0] == topic]


def handler(sent: Sent, processor: EventProcessor | None = None) -> EventBatchHandler:
    return EventBatchHandler(
        topic="t.events",
        processor=processor or EventProcessor({}, {}, {}, {}),
        decoder=SERDE.decode,
        send=sent,
        output_topics=TOPICS,
        dlq_topic="t.dlq",
        encoder=OutputEncoder(SETTINGS),
    )


def test_a_looping_batch_sends_patterns_and_assessments_and_reports_the_next_offset() -> None:
    sent = Sent()
    h = handler(sent)
    stats = asyncio.run(h.handle(records(looping(8), start=100)))
    assert stats.events == 16 and stats.dead_lettered == 0
    assert h.committable("t.events", 0) == 116
    assert h.committable("t.events", 1) is None
    pats = [PatternSerde("single-object").decode(v) for _, _, v, _ in sent.to("t.patterns")]
    assert "doom_loop" in {str(p.pattern_type) for p in pats}
    assess = sent.to("t.assessments")
    assert assess and assess == [
        ("t.assessments", k, v, h_) for _, k, v, h_ in sent.to("t.assessment-history")
    ]
    assert AssessmentSerde("single-object").decode(assess[-1][2]).session_id == "s1"
    assert stats.outputs == len(sent.items)


def test_batches_equal_one_event_at_a_time() -> None:
    events = looping(10)
    one = Sent()
    h1 = handler(one)
    for r in records(events):
        asyncio.run(h1.handle([r]))
    many = Sent()
    h2 = handler(many)
    recs = records(events)
    asyncio.run(h2.handle(recs[:7]))
    asyncio.run(h2.handle(recs[7:]))
    assert one.items == many.items
    assert h1.committable("t.events", 0) == h2.committable("t.events", 0) == len(events)


def test_bad_records_are_dead_lettered_with_reasons_and_the_batch_goes_on() -> None:
    good = looping(2)
    recs = [
        Rec(0, b"s1", SERDE.encode(good[0])),
        Rec(1, b"s1", b"\x00garbage"),
        Rec(2, b"other", SERDE.encode(good[1])),  # key does not match the session id
        Rec(3, b"s1", None),  # tombstone
        Rec(4, b"s1", SERDE.encode(good[1])),
    ]
    sent = Sent()
    h = handler(sent)
    stats = asyncio.run(h.handle(recs))
    assert stats.events == 5 and stats.dead_lettered == 3
    dlq = sent.to("t.dlq")
    offsets = [dict(hd)["dlq.source.offset"] for _, _, _, hd in dlq]
    assert offsets == [b"1", b"2", b"3"]
    reasons = [dict(hd)["dlq.reason"].decode() for _, _, _, hd in dlq]
    assert "does not match the message key" in reasons[1]
    assert "tombstone" in reasons[2]
    assert h.committable("t.events", 0) == 5
    assert h.processor.applied == 2


def _src_headers(
    topic: str, partition: int, offset: int, key: bytes | None = None, *, legacy: bool = False
) -> Any:
    """The headers the router puts on a forwarded event (streams/router/router.py):
    the offset, the partition unless 0 (the topic is implied by the key), the
    original key if it differed; ``legacy``: as routers before the one-header
    change wrote them, the topic and partition always."""
    h = [("ct", b"avro")]
    if legacy:
        h += [("src.topic", topic.encode()), ("src.partition", b"%d" % partition)]
    elif partition:
        h.append(("src.partition", b"%d" % partition))
    h.append(("src.offset", b"%d" % offset))
    if key is not None:
        h.append(("src.key", key))
    return tuple(h)


@pytest.mark.parametrize("legacy", [False, True], ids=["one-header", "legacy-headers"])
def test_what_the_router_no_longer_checks_is_dead_lettered_with_the_source_coordinates(
    legacy: bool,
) -> None:
    """Decode once: the router forwards after a framing check; the worker refuses a
    truncated body and a bad seq/timestamp, naming the per-session topic record
    (derived from the key, or named by an older router's ``src.topic``)."""
    _src = functools.partial(_src_headers, legacy=legacy)
    good = looping(2)
    truncated = SERDE.encode(good[1])[:-4]
    negative = SERDE.encode(TraceEvent("message", "s1", -1, 5, text="x"))
    bad_ts = SERDE.encode(TraceEvent("message", "s1", 9, -5, text="x"))
    recs = [
        Rec(0, b"s1", SERDE.encode(good[0]), headers=_src("t.session.s1", 0, 40)),
        Rec(1, b"s1", truncated, headers=_src("t.session.s1", 0, 41, key=b"label-1")),
        Rec(2, b"s1", negative, headers=_src("t.session.s1", 0, 42)),
        Rec(3, b"s1", bad_ts, headers=_src("t.session.s1", 0, 43, key=b"")),
        Rec(4, b"s1", SERDE.encode(good[1]), headers=_src("t.session.s1", 0, 44)),
    ]
    sent = Sent()
    h = handler(sent)
    stats = asyncio.run(h.handle(recs))
    assert stats.events == 5 and stats.dead_lettered == 3
    dlq = sent.to("t.dlq")
    heads = [dict(hd) for _, _, _, hd in dlq]
    assert [(d["dlq.source.topic"], d["dlq.source.offset"]) for d in heads] == [
        (b"t.session.s1", b"41"),
        (b"t.session.s1", b"42"),
        (b"t.session.s1", b"43"),
    ]
    assert all(d["dlq.source.partition"] == b"0" for d in heads)
    assert "invalid Avro body" in heads[0]["dlq.reason"].decode()
    assert heads[1]["dlq.reason"].decode().startswith("seq: -1")
    assert heads[2]["dlq.reason"].decode().startswith("timestamp_ms: -5")
    assert [k for _, k, _, _ in dlq] == [b"label-1", b"s1", None]  # the original keys
    assert [v for _, _, v, _ in dlq] == [truncated, negative, bad_ts]  # the original bytes
    assert h.processor.applied == 2


def test_an_unexpected_error_sends_what_came_before_and_commits_only_that() -> None:
    events = looping(3)
    sent = Sent()
    boom = RuntimeError("disk on fire")

    class Exploding(EventProcessor):
        def apply(
            self, event: TraceEvent, partition: int | None = None, offset: int | None = None
        ) -> Any:
            if event.seq == 3:
                raise boom
            return super().apply(event, partition, offset)

    h = handler(sent, Exploding({}, {}, {}, {}))
    with pytest.raises(RuntimeError, match="disk on fire"):
        asyncio.run(h.handle(records(events, start=10)))
    # seq 0..2 handled (offsets 10..12), seq 3 (offset 13) not: commit from 13
    assert h.committable("t.events", 0) == 13
    assert h.processor.applied == 3


def test_a_decoder_failure_counts_at_its_record_not_before() -> None:
    """The batch is decoded before it is applied: a decode failure still dead-letters
    (a malformed record) or stops the worker (anything else) at its own record, after
    the records before it were applied."""
    events = looping(3)
    recs = records(events, start=10)
    bad = recs[3].value

    def decode(value: bytes) -> TraceEvent:
        if value == bad:
            raise RuntimeError("decoder bug")
        return SERDE.decode(value)

    sent = Sent()
    h = handler(sent)
    h.decoder = decode
    with pytest.raises(RuntimeError, match="decoder bug"):
        asyncio.run(h.handle(recs))
    assert h.committable("t.events", 0) == 13 and h.processor.applied == 3

    sent = Sent()
    h = handler(sent)
    junk = [*recs[:2], Rec(12, b"s1", b"\x00junk"), *records(events[2:], start=13)]
    asyncio.run(h.handle(junk))
    (dlq,) = sent.to("t.dlq")
    assert dlq[2] == b"\x00junk" and h.processor.applied == len(events)
    assert h.committable("t.events", 0) == 13 + len(events) - 2


def test_commit_waits_for_a_batch_to_be_fully_sent() -> None:
    """A commit takes the handler lock: it cannot see state whose outputs are unsent."""

    async def scenario() -> list[str]:
        order: list[str] = []
        gate = asyncio.Event()

        async def slow_send(topic: str, key: Any, value: bytes, headers: Any) -> None:
            order.append("send")
            await gate.wait()

        h = EventBatchHandler(
            topic="t.events",
            processor=EventProcessor({}, {}, {}, {}),
            decoder=SERDE.decode,
            send=slow_send,
            output_topics=TOPICS,
            dlq_topic="t.dlq",
            encoder=OutputEncoder(SETTINGS),
        )
        batch = asyncio.create_task(h.handle(records(looping(6))))
        await asyncio.sleep(0)
        assert order == ["send"]

        async def commit() -> None:
            async with h.lock:
                order.append(f"commit@{h.committable('t.events', 0)}")

        c = asyncio.create_task(commit())
        await asyncio.sleep(0.01)
        assert not c.done()
        gate.set()
        await asyncio.gather(batch, c)
        return order

    order = asyncio.run(scenario())
    assert order[-1] == "commit@12"
    assert all(o == "send" for o in order[:-1])


def test_a_batch_that_waited_for_the_lock_past_a_revoke_applies_nothing() -> None:
    """The fetch loop checked the flow before the batch queued on the lock; a revoke's
    commit held the lock meanwhile.  Applied then, its state would be written while its
    offsets stay uncommitted, and the next owner would handle it again (duplicates)."""

    async def scenario() -> tuple[Any, EventBatchHandler, Sent, EventProcessor]:
        sent = Sent()
        processor = EventProcessor({}, {}, {}, {})
        h = handler(sent, processor)
        flow = [True]
        async with h.lock:  # the revoke's commit
            batch = asyncio.create_task(h.handle(records(looping(6)), current=lambda: flow[0]))
            await asyncio.sleep(0)
            assert not batch.done()
            flow[0] = False  # Faust stops the flow before it commits
        return await batch, h, sent, processor

    stats, h, sent, processor = asyncio.run(scenario())
    assert stats is None
    assert h.committable("t.events", 0) is None
    assert sent.items == []
    assert processor.dirty == 0


def test_a_batch_still_current_after_the_lock_is_applied() -> None:
    async def scenario() -> Any:
        h = handler(Sent())
        async with h.lock:
            batch = asyncio.create_task(h.handle(recs, current=lambda: True))
            await asyncio.sleep(0)
        return await batch, h

    recs = records(looping(6))
    stats, h = asyncio.run(scenario())
    assert stats is not None and stats.events == len(recs)
    assert h.committable("t.events", 0) == len(recs)


def test_forget_drops_revoked_partitions() -> None:
    h = handler(Sent())
    asyncio.run(h.handle(records(looping(1))))
    asyncio.run(
        h.handle(
            [Rec(0, b"s2", SERDE.encode(TraceEvent("session_start", "s2", 0, 1)), partition=1)]
        )
    )
    h.forget([("t.events", 0)])
    assert h.committable("t.events", 0) is None
    assert h.committable("t.events", 1) == 1
    assert h.partitions() == [("t.events", 1)]


def test_assess_quiet_sends_timer_assessments_to_both_assessment_topics() -> None:
    from streams.core.events import Budget

    sent = Sent()
    h = handler(sent)
    t0 = 1_767_225_600_000
    quiet = [
        TraceEvent("session_start", "q1", 0, t0),
        TraceEvent("budget", "q1", 1, t0, budget=Budget(deadline_ms=t0 + 10_000, max_tokens=10**5)),
    ]
    asyncio.run(h.handle(records(quiet)))
    sent.items.clear()
    assert asyncio.run(h.assess_quiet(t0 + 5_000)) == 0  # before the deadline
    assert asyncio.run(h.assess_quiet(t0 + 11_000)) == 2
    assert [t for t, *_ in sent.items] == ["t.assessments", "t.assessment-history"]
    made = AssessmentSerde("single-object").decode(sent.items[0][2])
    assert made.session_id == "q1" and made.trigger == "timer"
    assert "deadline" in made.rendered
    assert asyncio.run(h.assess_quiet(t0 + 12_000)) == 0  # reported once


def test_metrics_count_every_handled_event_once_per_batch() -> None:
    """The handler records its batch's events in one ``on_events`` call: each applied
    or duplicate event counted once, dead letters not (they have their own counter),
    also when the batch stops at an event it cannot apply."""
    from prom_samples import samples

    from streams.worker.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    sent = Sent()
    h = handler(sent)
    h.metrics = metrics
    evs = looping(4)
    recs = records(evs)
    bad = Rec(len(recs), b"s1", b"\x00junk")
    asyncio.run(h.handle([*recs, bad]))
    asyncio.run(h.handle(records(evs[:3], start=len(recs) + 1)))  # duplicates
    s = samples(metrics)
    counted = sum(v for k, v in s.items() if k[0] == "trajectory_worker_events_total")
    assert counted == len(evs) + 3
    assert s[("trajectory_worker_event_processing_seconds_count", ())] == len(evs) + 3
    assert s[("trajectory_worker_event_time_lag_seconds_count", ())] == len(evs) + 3
    assert sum(v for k, v in s.items() if k[0] == "trajectory_worker_dlq_total") == 1

    metrics = WorkerMetrics()
    h = handler(Sent())
    h.metrics = metrics
    real = h.processor.apply
    calls: list[TraceEvent] = []

    def fail_third(event: TraceEvent, partition: int | None, offset: int | None) -> Any:
        calls.append(event)
        if len(calls) == 3:
            raise RuntimeError("engine bug")
        return real(event, partition, offset)

    h.processor.apply = fail_third  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="engine bug"):
        asyncio.run(h.handle(records(evs)))
    s = samples(metrics)
    assert s[("trajectory_worker_event_processing_seconds_count", ())] == 2
    assert h.committable("t.events", 0) == 2
