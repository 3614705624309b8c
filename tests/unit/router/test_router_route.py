"""``Router._route``: a consumed batch in one loop, what it uses bound once per batch.

Its invariant: routing a batch in one call or message by message has the same
effects: the same records produced (topic, value, key, timestamp, headers), the
same transaction counters and offsets, the same sessions marked as ending; and
those effects are the ones spelled out below.  Pure code:
``Message`` objects built in Python and a producer that records its calls
(``Router()`` connects nothing until ``start()``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from fake_producer import FakeProduce

from streams.core.events import EventType, TraceEvent
from streams.router.config import RouterConfig
from streams.router.metrics import RouterMetrics
from streams.router.router import Router
from streams.serde import EventSerde
from streams.settings import Settings

SETTINGS = Settings(bootstrap="127.0.0.1:1", prefix="t")
SERDE = EventSerde()


class RecordingProducer(FakeProduce):
    """What the router calls on its producer, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def begin_transaction(self) -> None:
        self.calls.append(("begin_transaction",))

    def produced(
        self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any
    ) -> None:
        self.calls.append(("produce", topic, value, key, timestamp, list(headers or [])))

    def poll(self, timeout: float) -> int:
        return 0


def event(sid: str, seq: int, etype: EventType = "tool_call") -> bytes:
    if etype == "session_end":
        return SERDE.encode(TraceEvent("session_end", sid, seq, 1_000 + seq))
    return SERDE.encode(
        TraceEvent(etype, sid, seq, 1_000 + seq, call_id=f"c{seq}", tool_name="bash", input={})
    )


def batch() -> list[Message]:
    """Every kind of message the loop meets (fresh objects: the router appends to
    a message's header list)."""
    s1, s2 = SETTINGS.session_topic("s1"), SETTINGS.session_topic("s2")
    announcement = json.dumps({"topic": SETTINGS.session_topic("s9"), "session_id": "s9"})

    def msg(
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        ts: int = 5_000,
        error: KafkaError | None = None,
    ) -> Message:
        return Message(topic=topic, partition=partition, offset=offset, key=key, value=value,
                       headers=headers, timestamp=(1, ts), error=error)  # fmt: skip

    return [
        msg(s1, 0, 10, b"s1", event("s1", 0)),  # opens the transaction
        msg(s1, 0, 11, b"s1", event("s1", 1)),  # the inlined path from here
        msg(s1, 0, 12, b"s1", event("s1", 2), headers=[("ct", b"1")]),  # kept, then src.*
        msg(s2, 3, 7, b"label", event("s2", 0), ts=-1),  # src.partition, src.key, no time
        msg(s2, 3, 8, None, event("s2", 1)),  # no key: an empty src.key
        msg(s1, 0, 13, b"s1", b"\x00garbage"),  # refused: a dead letter
        msg(s1, 0, 14, b"s1", event("s2", 3)),  # names another session: refused
        msg(SETTINGS.control_topic, 0, 2, b"s9", announcement.encode()),  # announcement
        msg(s1, 0, 0, None, None, error=KafkaError(KafkaError._PARTITION_EOF)),  # informational
        msg(s1, 0, 15, b"s1", event("s1", 3, "session_end")),  # marks s1 as ending
        msg(s2, 3, 9, b"s2", event("s2", 2)),
    ]


def router(guarantee: str, *, metrics: bool = False) -> Router:
    r = Router(
        SETTINGS,
        RouterConfig(guarantee=guarantee, status_interval_s=0),  # type: ignore[arg-type]
    )
    r._producer = RecordingProducer()  # type: ignore[assignment]
    if metrics:
        r.metrics = RouterMetrics()
    return r


def effects(r: Router) -> tuple[Any, ...]:
    producer = r._producer
    assert isinstance(producer, RecordingProducer)
    return (
        producer.calls,
        r._in_txn,
        r._txn_msgs,
        r._txn_routed,
        r._txn_dlq,
        r._txn_announce,
        dict(r._uncommitted),
        dict(r._first),
        set(r._ending),
        dict(r._keys),
    )


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_batch_routed_at_once_or_message_by_message_has_the_same_effects(guarantee: str) -> None:
    one_by_one = router(guarantee)
    for m in batch():
        one_by_one._route([m])
    looped = router(guarantee)
    looped._route(batch())
    assert effects(looped) == effects(one_by_one)
    # ... and they are the router's: every branch met, spelled out
    calls = effects(looped)[0]
    begun = [c for c in calls if c[0] == "begin_transaction"]
    assert len(begun) == (1 if guarantee == "exactly-once" else 0)
    produced = [c for c in calls if c[0] == "produce"]
    assert {c[1] for c in produced} == {SETTINGS.events_topic, SETTINGS.dlq_topic}
    assert looped._txn_msgs == 10  # all but the consumer error
    assert looped._txn_routed == 7 and looped._txn_dlq == 2 and looped._txn_announce == 1
    s1, s2 = SETTINGS.session_topic("s1"), SETTINGS.session_topic("s2")
    assert looped._uncommitted == {(s1, 0): 16, (s2, 3): 10, (SETTINGS.control_topic, 0): 3}
    expected_first = {(s1, 0): 10, (s2, 3): 7, (SETTINGS.control_topic, 0): 2}
    assert looped._first == (expected_first if guarantee == "exactly-once" else {})
    routed = [c for c in produced if c[1] == SETTINGS.events_topic]
    assert [c[3] for c in routed] == [b"s1"] * 3 + [b"s2"] * 2 + [b"s1", b"s2"]  # by session
    assert (SETTINGS.session_topic("s1"), 0) in looped._ending
    by_offset = {dict(c[5]).get("src.offset"): c for c in produced if c[1] == SETTINGS.events_topic}
    assert by_offset[b"11"][5] == [("src.offset", b"11")]  # one header, topic implied
    assert by_offset[b"12"][5] == [("ct", b"1"), ("src.offset", b"12")]
    assert by_offset[b"7"][5] == [
        ("src.partition", b"3"),
        ("src.offset", b"7"),
        ("src.key", b"label"),
    ]
    assert by_offset[b"7"][4] == 0  # no source timestamp: "now"
    assert by_offset[b"8"][5][-1] == ("src.key", b"")


def test_a_batch_counts_the_same_metrics_at_once_or_message_by_message() -> None:
    one_by_one = router("exactly-once", metrics=True)
    for m in batch():
        one_by_one._route([m])
    looped = router("exactly-once", metrics=True)
    looped._route(batch())
    a, b = one_by_one.metrics, looped.metrics
    assert a is not None and b is not None
    # counted at the commit from these tallies
    assert dict(b._pending_types) == dict(a._pending_types) == {"tool_call": 6, "session_end": 1}
    assert dict(b._pending_dlq) == dict(a._pending_dlq)
    assert sum(a._pending_dlq.values()) == 2
