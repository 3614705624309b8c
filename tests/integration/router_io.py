"""Raw produce / read helpers of the router tests (shared by the test modules that
check what the router forwards and dead-letters; no test module imports another)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.core.events import TraceEvent
from streams.serde import EventSerde
from streams.settings import Settings

_SERDE = EventSerde()


def tool_event(sid: str, seq: int, etype: str = "tool_call") -> bytes:
    """A valid encoded event ``seq`` of session ``sid`` (a ``bash`` tool call unless
    ``etype`` says otherwise): what the router tests publish."""
    return _SERDE.encode(
        TraceEvent(
            type=etype,  # type: ignore[arg-type]
            session_id=sid,
            seq=seq,
            timestamp_ms=1_700_000_000_000 + seq,
            tool_name="bash",
            call_id=f"c{seq}",
            input={"cmd": f"ls {seq}"},
        )
    )


def encoded(sid: str, seq: int) -> bytes:
    """Message event ``seq`` of ``sid``: the stream the crash and shard tests publish."""
    return _SERDE.encode(TraceEvent(type="message", session_id=sid, seq=seq, timestamp_ms=seq))


class EventsReader:
    """Incrementally reads ``<prefix>.events`` with a given isolation level."""

    def __init__(self, settings: Settings, isolation: str) -> None:
        self.topic = settings.events_topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": "events-reader",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            }
        )
        self.keys: list[tuple[str, int]] = []
        self.assigned = False

    def poll(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        if not self.assigned:
            md = self.consumer.list_topics(self.topic, timeout=5)
            meta = md.topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                time.sleep(0.2)
                return
            self.consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions]
            )
            self.assigned = True
        while time.monotonic() < end:
            for m in self.consumer.consume(500, timeout=0.1):
                assert m.error() is None, m.error()
                ev = _SERDE.decode(m.value())
                assert m.key() == ev.session_id.encode()
                self.keys.append((ev.session_id, ev.seq))

    def close(self) -> None:
        self.consumer.close()


def wait_until(what: str, cond: Any, timeout_s: float = 30.0) -> float:
    """Seconds until ``cond()`` holds; fails the test naming ``what`` after ``timeout_s``."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.02)
    return time.monotonic() - start


def publish(
    bootstrap: str, items: list[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]]
) -> dict[tuple[str, int], int]:
    """Produce (topic, key, value, headers) in order; returns (topic, index)->offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    offsets: dict[tuple[str, int], int] = {}
    errors: list[str] = []

    def done(idx: int):  # type: ignore[no-untyped-def]
        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                offsets[(msg.topic(), idx)] = msg.offset()

        return cb

    for i, (topic, key, value, headers) in enumerate(items):
        producer.produce(topic, value, key, headers=headers, on_delivery=done(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def read_topic(
    bootstrap: str, topic: str, expect: int, *, idle_s: float = 2.0, timeout_s: float = 60.0
) -> list[Any]:
    """All committed messages of ``topic`` (read_committed); waits for ``expect``,
    then keeps reading for ``idle_s`` so duplicates would be seen too."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader-" + topic,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(500, timeout=0.2)
            for m in batch:
                assert m.error() is None, m.error()
                out.append(m)
            if batch:
                last = time.monotonic()
            elif len(out) >= expect and time.monotonic() - last >= idle_s:
                break
        return out
    finally:
        consumer.close()


def session_topics(settings: Any, create_topics: Any, sids: list[str]) -> dict[str, str]:
    """Create the session topics of ``sids`` and the control topic (the router's
    subscription); session id -> its topic."""
    topics = {sid: settings.session_topic(sid) for sid in sids}
    create_topics(*topics.values())
    create_topics(settings.control_topic)
    return topics


def headers_of(msg: Any) -> dict[str, bytes]:
    return dict(msg.headers() or [])


@contextmanager
def running(router: Any) -> Iterator[None]:
    """Run a started in-process router in a thread for the block; then stop it,
    close it, and fail the test if its loop did not end within 30 s."""
    thread = threading.Thread(target=router.run, name="router", daemon=True)
    thread.start()
    try:
        yield
    finally:
        router.request_stop()
        thread.join(30)
        router.close()
    assert not thread.is_alive(), "the router's loop did not stop within 30 s"
