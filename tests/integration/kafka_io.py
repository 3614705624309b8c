"""Reading and writing the test broker's topics: the helpers test modules share.

Produce Avro events straight into ``<prefix>.events`` (murmur2, like the router),
publish through the SDK, read a topic back (all of it, ``count`` records, or the
DLQ), and a publisher thread that keeps session topics flowing while a test kills
its router.  Test modules import these from here, never from one another.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Message

from streams.core.events import TraceEvent
from streams.sdk import Publisher
from streams.settings import Settings


class SessionStreamPublisher(threading.Thread):
    """Publishes ``rounds`` events per session to their session topics at ~1000
    events/s, and keeps going until :attr:`killed` is set (bounded: 120 s), so a
    stream is still flowing whenever a test kills its router.

    ``published`` lists ``(session_id, seq)`` in order, as handed to the producer;
    ``errors`` holds delivery errors; ``undelivered`` counts messages the final flush
    left unacknowledged (they are in ``published`` but may never reach the topics: a
    test must not blame the router for them); ``done`` is set after the final flush.
    """

    def __init__(
        self,
        settings: Settings,
        sessions: list[str],
        rounds: int,
        encode: Callable[[str, int], bytes],
    ) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.sessions = sessions
        self.rounds = rounds
        self.encode = encode
        self.published: list[tuple[str, int]] = []
        self.errors: list[str] = []
        self.undelivered = 0
        self.done = threading.Event()
        self.killed = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        settings = self.settings
        producer = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})

        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors.append(str(err))

        seq = 0
        give_up = time.monotonic() + 120
        while (seq < self.rounds or not self.killed.is_set()) and time.monotonic() < give_up:
            for sid in self.sessions:
                producer.produce(
                    settings.session_topic(sid), self.encode(sid, seq), sid.encode(), on_delivery=cb
                )
                self.published.append((sid, seq))
            seq += 1
            producer.poll(0)
            time.sleep(0.008)  # ~1000 events/s over 8 sessions
        self.undelivered = producer.flush(30)
        self.done.set()


class SteadyEventProducer(threading.Thread):
    """Produces ``events`` into ``<prefix>.events`` in chunks of ``chunk``, one chunk
    every ``pause_s``, through ONE idempotent producer (murmur2, like :func:`produce`),
    so a worker has input arriving all along while a test joins, stops or starves it.

    Why one producer: a new producer per chunk (:func:`produce`) spends ~0.5 s in its
    idempotence handshake, which set the pace and stretched 150 chunks over ~80 s.

    :meth:`hurry` sends whatever is left at once (the part of the test that needed a
    steady stream is over); :meth:`result` joins, raises what the thread raised, and
    checks every record was acknowledged.  ``chunks_sent`` counts chunks handed to
    the producer so far: a test can check the stream was still flowing at a moment.
    """

    def __init__(
        self, settings: Settings, events: list[TraceEvent], chunk: int, pause_s: float
    ) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.chunks = [events[i : i + chunk] for i in range(0, len(events), chunk)]
        self.pause_s = pause_s
        self.chunks_sent = 0
        self._hurry = threading.Event()
        self._error: BaseException | None = None
        self._undelivered = -1

    def hurry(self) -> None:
        self._hurry.set()

    def run(self) -> None:
        from confluent_kafka import Producer

        from streams.serde import EventSerde

        try:
            serde = EventSerde()
            producer = Producer(
                {
                    "bootstrap.servers": self.settings.bootstrap,
                    "enable.idempotence": True,
                    "partitioner": "murmur2_random",
                }
            )
            for part in self.chunks:
                for ev in part:
                    producer.produce(
                        self.settings.events_topic,
                        key=ev.session_id.encode(),
                        value=serde.encode(ev),
                    )
                self.chunks_sent += 1
                producer.poll(0)
                if not self._hurry.is_set():
                    producer.flush(30)  # delivered now, not in one burst at the end
                    self._hurry.wait(self.pause_s)
            self._undelivered = producer.flush(30)
        except BaseException as exc:  # re-raised by result(), in the test's thread
            self._error = exc

    def result(self, timeout_s: float = 300.0) -> None:
        self.join(timeout_s)
        assert not self.is_alive(), f"still producing after {timeout_s} s"
        if self._error is not None:
            raise self._error
        assert self._undelivered == 0, f"{self._undelivered} events not acknowledged"


def produce(
    settings: Settings, events: list[TraceEvent], extra: list[tuple[bytes, bytes]] = ()
) -> None:  # type: ignore[assignment]
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    # murmur2 like the router and Faust: the HTTP views route a session id to the
    # worker owning its murmur2 partition (confluent's default would be CRC32)
    p = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    for ev in events:
        p.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))
    for key, value in extra:
        p.produce(settings.events_topic, key=key, value=value)
    assert p.flush(30) == 0


def read_dlq(settings: Settings, want: int = 1, timeout_s: float = 20.0) -> list[Any]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"{settings.prefix}-dlqr",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([settings.dlq_topic])
    out = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(out) < want:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg)
    c.close()
    return out


def read_all(settings: Settings, topic: str, idle_s: float = 3.0) -> list[tuple[bytes, bytes]]:
    """Every record of ``topic`` (until ``idle_s`` without a new one after the first),
    read with ``settings.security`` (a group under ``<prefix>.``, which the analyst
    role may read)."""
    import time
    import uuid

    from confluent_kafka import Consumer

    from streams.security import client_config

    c = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            **client_config(settings.security),
            "group.id": f"{settings.prefix}.read-all-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[tuple[bytes, bytes]] = []
    last = time.monotonic() + 20  # allow up to ~20 s for the group join / first record
    while time.monotonic() - last < idle_s:
        msg = c.poll(0.3)
        if msg is not None and msg.error() is None:
            out.append((msg.key(), msg.value()))
            last = time.monotonic()
    c.close()
    return out


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Message]:
    """Read ``count`` messages of ``topic`` from the beginning (fails on timeout)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g" + uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    out: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                continue  # e.g. UNKNOWN_TOPIC_OR_PART before creation propagates
            out.append(msg)
    finally:
        consumer.close()
    assert len(out) == count, f"got {len(out)} of {count} messages from {topic}"
    return out


def publish(settings: Settings, events: list[TraceEvent]) -> None:
    with Publisher(settings) as pub:
        pub.ensure_session_topics(sorted({e.session_id for e in events}))
        for ev in events:
            pub.send(ev)
        pub.flush()


def live_history(settings: Settings) -> list[Any]:
    from streams.serde import AssessmentSerde

    serde = AssessmentSerde()
    return [serde.decode(v) for _, v in read_all(settings, settings.assessment_history_topic)]


def wait_group_shares(settings: Settings, group: str, members: int, timeout_s: float = 120) -> None:
    """Poll until consumer group ``group`` is stable with ``members`` members that each
    own a partition of ``<prefix>.events`` (what a fixed sleep before producing used to
    hope for); fail naming the last description seen."""
    from confluent_kafka import ConsumerGroupState, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    deadline = time.monotonic() + timeout_s
    seen: Any = None
    while time.monotonic() < deadline:
        try:
            seen = admin.describe_consumer_groups([group])[group].result(timeout=10)
        except KafkaException as exc:  # the coordinator does not know it yet: poll on
            seen = exc
        else:
            owners = [
                m
                for m in seen.members
                if m.assignment is not None
                and any(tp.topic == settings.events_topic for tp in m.assignment.topic_partitions)
            ]
            if seen.state == ConsumerGroupState.STABLE and len(owners) == members:
                return
        time.sleep(0.3)
    raise AssertionError(f"group {group} never had {members} members owning events: {seen}")
