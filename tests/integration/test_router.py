"""The ingest router against a real Kafka broker.

* routing: 1,000 valid events over 20 session topics plus every kind of bad
  message -> each valid event exactly once in ``<prefix>.events`` (original bytes,
  key = session id, per-session order kept), each bad one in the DLQ with its reason;
* pickup: the first event of a brand-new session topic reaches ``<prefix>.events``
  well within the 5 s end-to-end budget, with and without announcements.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from router_io import headers_of, publish, read_topic

from streams.core.events import TraceEvent
from streams.router import Router, RouterConfig
from streams.router.shards import Shard
from streams.router.validate import (
    DLQ_ERROR_CLASS,
    DLQ_REASON,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
    DLQ_SOURCE_TOPIC,
    forwarded_from,
)
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SERDE = EventSerde()


def event(sid: str, seq: int, **kw: Any) -> TraceEvent:
    kind = "tool_call" if seq % 2 else "tool_result"
    return TraceEvent(
        type=kind,
        session_id=sid,
        seq=seq,
        timestamp_ms=1_700_000_000_000 + seq * 1000,
        tool_name="bash",
        call_id=f"c{seq // 2}",
        input={"cmd": f"ls {seq}"} if kind == "tool_call" else None,
        output="ok" if kind == "tool_result" else None,
        **kw,
    )


def test_routes_valid_events_exactly_once_and_dead_letters_bad_ones(
    settings: Settings, create_topics: Any
) -> None:
    settings = settings.with_(max_message_bytes=8192)
    sessions = [f"s{i:02d}" for i in range(20)]
    create_topics(*(settings.session_topic(s) for s in sessions))
    create_topics(settings.control_topic)

    items: list[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]] = []
    valid: dict[tuple[str, int], bytes] = {}
    for seq in range(50):
        for sid in sessions:
            data = SERDE.encode(event(sid, seq))
            valid[(sid, seq)] = data
            items.append((settings.session_topic(sid), sid.encode(), data, [("ct", b"avro")]))
    assert len(valid) == 1000

    good = SERDE.encode(event("s01", 999))
    unknown_fp = bytearray(SERDE.encode(event("s02", 999)))
    unknown_fp[2:10] = struct.pack("<Q", 0xDEAD_BEEF_DEAD_BEEF)
    bad = {
        "garbage": (settings.session_topic("s00"), b"\xff\x00 definitely not avro"),
        "truncated": (settings.session_topic("s01"), good[:-6]),
        "unknown_fp": (settings.session_topic("s02"), bytes(unknown_fp)),
        "wrong_session": (settings.session_topic("s03"), SERDE.encode(event("s04", 999))),
        "oversized": (
            settings.session_topic("s05"),
            SERDE.encode(event("s05", 999, text="x" * 20_000)),
        ),
        "negative_seq": (settings.session_topic("s06"), SERDE.encode(event("s06", -1))),
        "bad_announcement": (settings.control_topic, b"not-a-session-topic"),
    }
    # Interleave the bad ones with the good ones: processing must go on after each.
    bad_index: dict[str, int] = {}
    for n, (topic, value) in enumerate(bad.values()):
        pos = 100 + n * 120
        items.insert(pos, (topic, b"bad", value, None))
    for i, (topic, key, value, _h) in enumerate(items):
        for name, (btopic, bvalue) in bad.items():
            if key == b"bad" and topic == btopic and value == bvalue:
                bad_index[name] = i
    # Announcements for every session (as the SDK sends them).
    for sid in sessions:
        items.append(
            (settings.control_topic, sid.encode(), settings.session_topic(sid).encode(), None)
        )
    offsets = publish(settings.bootstrap, items)

    # "full": this router decodes every event itself (the default "framing" leaves a
    # truncated body and a bad seq to the worker: test_framing_validation_* below)
    config = RouterConfig(
        batch_max_messages=150, batch_max_ms=50, status_interval_s=0, validation="full"
    )
    with Router(settings, config) as router:
        stats = router.run(
            until=lambda s: s.routed >= 1000 and s.dead_lettered >= len(bad), max_seconds=60
        )
    assert stats.routed == 1000, stats
    assert stats.dead_lettered == len(bad), stats
    assert stats.announcements == len(sessions)
    assert stats.aborts == 0

    events = read_topic(settings.bootstrap, settings.events_topic, 1000)
    assert len(events) == 1000
    got = {(m.key().decode(), SERDE.decode(m.value()).seq): m.value() for m in events}
    assert got == valid  # every valid event, byte-identical, exactly once, keyed by session
    by_session: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for m in events:
        h = headers_of(m)
        assert h["ct"] == b"avro"  # publisher headers travel along
        # ... and where the event was published, for the worker's dead letters
        sid = m.key().decode()
        assert h["src.offset"].isdigit()
        assert "src.key" not in h  # published keyed by its session id
        # one header: the topic is the key's session topic, the partition 0
        assert set(h) == {"ct", "src.offset"}
        assert forwarded_from(settings.events_topic, m.key(), m.headers()) == (
            settings.session_topic(sid).encode(),
            b"0",
            h["src.offset"],
            sid.encode(),
        )
        by_session[m.key().decode()].append(
            (m.partition(), m.offset(), SERDE.decode(m.value()).seq)
        )
    for sid, rows in by_session.items():
        assert len({p for p, _, _ in rows}) == 1, f"{sid} split over partitions"
        assert [seq for _, _, seq in sorted(rows)] == list(range(50)), f"{sid} out of order"

    dlq = read_topic(settings.bootstrap, settings.dlq_topic, len(bad))
    assert len(dlq) == len(bad)
    by_source = {
        (headers_of(m)[DLQ_SOURCE_TOPIC].decode(), int(headers_of(m)[DLQ_SOURCE_OFFSET])): m
        for m in dlq
    }
    expected_class = {
        "garbage": ("MalformedMessageError", "neither the Avro single-object marker"),
        "truncated": ("MalformedMessageError", "invalid Avro body"),
        "unknown_fp": ("UnknownSchemaError", "0xdeadbeefdeadbeef"),
        "wrong_session": ("InvalidEventError", "session_id: event says 's04'"),
        "oversized": ("OversizedMessageError", "8192-byte cap"),
        "negative_seq": ("InvalidEventError", "seq: -1"),
        "bad_announcement": ("InvalidEventError", "control.value"),
    }
    for name, (topic, value) in bad.items():
        offset = offsets[(topic, bad_index[name])]
        m = by_source[(topic, offset)]
        h = headers_of(m)
        cls, text = expected_class[name]
        assert h[DLQ_ERROR_CLASS].decode() == cls, (name, h)
        assert text in h[DLQ_REASON].decode(), (name, h[DLQ_REASON])
        assert h[DLQ_SOURCE_PARTITION] == b"0"
        assert m.value() == value  # the original bytes, for inspection/replay
        assert m.key() == b"bad"


def test_framing_validation_refuses_what_it_can_see_and_forwards_the_rest_with_its_source(
    settings: Settings, create_topics: Any
) -> None:
    """Default ``validation="framing"`` (decode once): framing, schema, session and size
    are refused here; a truncated tail and a negative seq are forwarded, with the
    ``src.*`` headers the worker's dead letters carry (tests/unit/worker/test_batch.py)."""
    settings = settings.with_(max_message_bytes=8192)
    create_topics(*(settings.session_topic(s) for s in ("f0", "f1")))
    good = SERDE.encode(event("f0", 1))
    unknown_fp = bytearray(good)
    unknown_fp[2:10] = struct.pack("<Q", 0xDEAD_BEEF_DEAD_BEEF)
    t0 = settings.session_topic("f0")
    refused = {
        b"garbage": (b"\xff\x00 definitely not avro", "MalformedMessageError"),
        b"unknown_fp": (bytes(unknown_fp), "UnknownSchemaError"),
        b"wrong_session": (SERDE.encode(event("f1", 3)), "InvalidEventError"),
        b"oversized": (SERDE.encode(event("f0", 4, text="x" * 20_000)), "OversizedMessageError"),
    }
    forwarded = {b"truncated": good[:-6], b"negative_seq": SERDE.encode(event("f0", -1))}
    items: list[tuple[str, bytes | None, bytes, Any]] = [(t0, b"f0", good, None)]
    items += [(t0, k, v, None) for k, (v, _) in refused.items()]
    items += [(t0, k, v, None) for k, v in forwarded.items()]
    offsets = publish(settings.bootstrap, items)

    config = RouterConfig(batch_max_messages=150, batch_max_ms=50, status_interval_s=0)
    assert config.validation == "framing"
    with Router(settings, config) as router:
        stats = router.run(
            until=lambda s: s.routed >= 3 and s.dead_lettered >= len(refused), max_seconds=60
        )
    assert (stats.routed, stats.dead_lettered) == (3, len(refused)), stats
    dlq = {m.key(): m for m in read_topic(settings.bootstrap, settings.dlq_topic, 4)}
    assert set(dlq) == set(refused)
    for key, (value, cls) in refused.items():
        h = headers_of(dlq[key])
        assert h[DLQ_ERROR_CLASS].decode() == cls, (key, h)
        assert dlq[key].value() == value or cls == "OversizedMessageError"
        assert h[DLQ_SOURCE_TOPIC] == t0.encode()
    assert "session_id: event says 'f1'" in headers_of(dlq[b"wrong_session"])[DLQ_REASON].decode()
    events = read_topic(settings.bootstrap, settings.events_topic, 3)
    by_value = {m.value(): headers_of(m) for m in events}
    assert set(by_value) == {good, *forwarded.values()}
    for i, (_, key, value, _) in enumerate(items):
        if value in by_value:
            h = by_value[value]
            assert "src.topic" not in h  # implied by the key
            assert h["src.offset"] == str(offsets[(t0, i)]).encode()
            assert h.get("src.key") == (None if key == b"f0" else key)
    assert all(m.key() == b"f0" for m in events)


def _run_in_thread(router: Router) -> threading.Thread:
    t = threading.Thread(target=router.run, name="router", daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("shard", [None, Shard(0, 1)], ids=["group", "static-shard"])
@pytest.mark.parametrize("announce", [True, False], ids=["announced", "regex-only"])
def test_first_event_of_new_session_topic_is_routed_fast(
    settings: Settings, create_topics: Any, announce: bool, shard: Shard | None
) -> None:
    """The same bounds for a static shard, which adds a new topic itself at the
    metadata refresh the announcement (or the period) brings, with no rejoin."""
    create_topics(settings.control_topic)
    create_topics(settings.session_topic("warmup"))
    config = RouterConfig(
        batch_max_ms=20, use_announcements=announce, status_interval_s=0, shard=shard
    )
    router = Router(settings, config)
    router.start()
    thread = _run_in_thread(router)
    reader = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "pickup-reader",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 0})
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while settings.session_topic("warmup") not in router.assigned_topics:
            assert time.monotonic() < deadline, "router never got its initial assignment"
            time.sleep(0.05)
        md = reader.list_topics(settings.events_topic, timeout=10)
        reader.assign(
            [
                TopicPartition(settings.events_topic, p, OFFSET_BEGINNING)
                for p in md.topics[settings.events_topic].partitions
            ]
        )
        for i in range(3):
            sid = f"new-{i}"
            topic = settings.session_topic(sid)
            start = time.monotonic()
            create_topics(topic)  # the SDK creates the topic, then publishes
            producer.produce(topic, SERDE.encode(event(sid, 0)), sid.encode())
            if announce:
                producer.produce(settings.control_topic, topic.encode(), sid.encode())
            producer.flush(10)
            seen = None
            while seen is None and time.monotonic() - start < 10:
                for m in reader.consume(100, timeout=0.05):
                    if m.error() is None and m.key() == sid.encode():
                        seen = time.monotonic() - start
            assert seen is not None, f"{sid}: not routed within 10 s"
            latencies.append(seen)
    finally:
        router.request_stop()
        thread.join(30)
        router.close()
        reader.close()
    print(
        f"\nnew-topic pickup ({'announced' if announce else 'regex refresh only'}"
        f"{', static shard' if shard else ''}): "
        + ", ".join(f"{x * 1000:.0f} ms" for x in latencies)
    )
    assert not thread.is_alive()
    assert max(latencies) < 5.0, latencies
    if announce:
        # Announcements must beat the periodic refresh (3 s by default) by far.
        assert sorted(latencies)[1] < 1.0, latencies


def test_sdk_session_start_reaches_events_fast(settings: Settings) -> None:
    """End to end through the publisher SDK: topic creation + JSON announcement +
    ``session_start``; the router must route it well within the 5 s budget."""
    from streams.sdk import Publisher

    config = RouterConfig(batch_max_ms=20, status_interval_s=0)
    router = Router(settings, config)
    router.start()
    thread = _run_in_thread(router)
    reader = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "sdk-pickup-reader",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while not router.assigned_topics:  # the control topic at least
            assert time.monotonic() < deadline, "router never got its initial assignment"
            time.sleep(0.05)
        md = reader.list_topics(settings.events_topic, timeout=10)
        reader.assign(
            [
                TopicPartition(settings.events_topic, p, OFFSET_BEGINNING)
                for p in md.topics[settings.events_topic].partitions
            ]
        )
        with Publisher(settings) as pub:
            for i in range(3):
                sid = f"sdk-{i}"
                start = time.monotonic()
                session = pub.session(sid, agent_id="test")
                session.start()
                pub.flush(10)
                seen = None
                while seen is None and time.monotonic() - start < 10:
                    for m in reader.consume(100, timeout=0.05):
                        if m.error() is None and m.key() == sid.encode():
                            assert SERDE.decode(m.value()).type == "session_start"
                            seen = time.monotonic() - start
                assert seen is not None, f"{sid}: not routed within 10 s"
                latencies.append(seen)
                session.end()
    finally:
        router.request_stop()
        thread.join(30)
        router.close()
        reader.close()
    print("\nSDK session_start -> events: " + ", ".join(f"{x * 1000:.0f} ms" for x in latencies))
    assert router.stats().announcements >= 3
    assert max(latencies) < 5.0, latencies


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_router_dropped_without_close_leaves_no_client_to_the_collector(
    settings: Settings, create_topics: Any, guarantee: str
) -> None:
    """A started router's producer, consumer and admin client are freed by reference
    counting when the router is dropped: none waits for the cyclic garbage collector,
    which may run in librdkafka's own thread where destroying a client aborts the
    process (streams.security.weak_method; docs/kafka-notes.md)."""
    import gc

    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    create_topics(settings.session_topic("gc-1"))
    config = RouterConfig(
        guarantee=guarantee, batch_max_ms=20, status_interval_s=0, paused_check_s=0
    )
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        router = Router(settings, config)
        router.start()
        router.run(max_seconds=1.0)
        del router
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (Producer, Consumer, AdminClient))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == [], f"{[type(o).__name__ for o in left]} only reachable by the collector"
