"""Router fault paths on a real broker: aborts, rewinds, giving up loudly, rebalances.

* A dead letter the broker refuses (DLQ topic limit too small) makes every
  transaction holding it abort: the router rewinds, retries, and after
  ``max_consecutive_aborts`` raises :class:`DeliveryError` naming the broker's
  reason.  Nothing of the failed batches is visible to ``read_committed``; once
  the operator fixes the topic, a restarted router routes everything exactly once.
* New session topics appearing while events flow (each one a rebalance, some
  commits then fail with ILLEGAL_GENERATION and are aborted + rewound): still
  exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from streams.core.events import TraceEvent
from streams.errors import DeliveryError
from streams.router import Router, RouterConfig
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SERDE = EventSerde()


def encoded(sid: str, seq: int) -> bytes:
    return SERDE.encode(TraceEvent(type="message", session_id=sid, seq=seq, timestamp_ms=seq))


def committed_events(settings: Settings, expect: int, idle_s: float = 2.0) -> list[tuple[str, int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": "faults-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        topic = settings.events_topic
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[tuple[str, int]] = []
        deadline = time.monotonic() + 60
        last = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(500, timeout=0.2)
            for m in batch:
                assert m.error() is None, m.error()
                ev = SERDE.decode(m.value())
                assert m.key() == ev.session_id.encode()
                out.append((ev.session_id, ev.seq))
            if batch:
                last = time.monotonic()
            elif len(out) >= expect and time.monotonic() - last >= idle_s:
                break
        return out
    finally:
        consumer.close()


def test_refused_dead_letter_aborts_then_gives_up_loudly_then_recovers(
    settings: Settings, create_topics: Any, admin: Any
) -> None:
    topic = settings.session_topic("s1")
    create_topics(topic)
    create_topics(settings.dlq_topic, config={"max.message.bytes": "300"})
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    for seq in range(100):
        if seq == 50:
            producer.produce(topic, b"\xff" * 2000, b"s1")  # garbage, too big for the DLQ
        producer.produce(topic, encoded("s1", seq), b"s1")
    assert producer.flush(10) == 0

    config = RouterConfig(
        batch_max_messages=10, batch_max_ms=1000, max_consecutive_aborts=3, status_interval_s=0
    )
    router = Router(settings, config)
    router.start()
    try:
        with pytest.raises(DeliveryError) as info:
            router.run(max_seconds=60)
    finally:
        router.close()
    message = str(info.value)
    assert "3 transactions in a row were aborted" in message
    assert "too large" in message.lower(), message  # the broker's reason is surfaced
    stats = router.stats()
    assert stats.aborts == 3
    # The batches before the bad one committed: five of 10 when every batch fills
    # up; fewer events when a slow machine cut a batch on batch_max_ms or a
    # rebalance cut one short.  Never the bad record's batch, never past it.
    routed = stats.routed
    assert 0 < routed <= 50, stats
    assert stats.aborted_messages >= 3, stats  # the bad record at least, each time

    before_fix = committed_events(settings, routed)
    assert sorted(before_fix) == [("s1", i) for i in range(routed)], stats

    # The operator raises the DLQ limit; a restart (same transactional id) finishes.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        settings.dlq_topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    rest = 100 - routed
    with Router(settings, config) as again:
        final = again.run(until=lambda s: s.routed >= rest and s.dead_lettered >= 1, max_seconds=60)
    assert (final.routed, final.dead_lettered) == (rest, 1)
    after = committed_events(settings, 100)
    assert sorted(after) == [("s1", i) for i in range(100)]  # each exactly once


def test_exactly_once_while_new_sessions_keep_appearing(
    settings: Settings, create_topics: Any
) -> None:
    create_topics(settings.control_topic)
    first = [f"old{i}" for i in range(5)]
    later = [f"new{i}" for i in range(8)]
    create_topics(*(settings.session_topic(s) for s in first))
    per_session = 300
    errors: list[str] = []
    published: list[tuple[str, int]] = []

    def publisher() -> None:
        producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 2})

        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))

        live = list(first)
        for seq in range(per_session):
            if seq % 30 == 10 and later:  # a new session every 30 rounds, announced
                sid = later.pop(0)
                create_topics(settings.session_topic(sid))
                producer.produce(
                    settings.control_topic, settings.session_topic(sid).encode(), sid.encode()
                )
                live.append(sid)
            for sid in live:
                producer.produce(
                    settings.session_topic(sid), encoded(sid, seq), sid.encode(), on_delivery=cb
                )
                published.append((sid, seq))
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0

    config = RouterConfig(batch_max_messages=100, batch_max_ms=50, status_interval_s=0)
    router = Router(settings, config)
    router.start()
    pub = threading.Thread(target=publisher, daemon=True)
    pub.start()
    try:
        router.run(
            until=lambda s: not pub.is_alive() and s.routed >= len(published), max_seconds=90
        )
    finally:
        router.close()
        pub.join(30)
    assert not errors, errors
    stats = router.stats()
    got = committed_events(settings, len(published))
    counts = Counter(got)
    assert not [k for k, c in counts.items() if c > 1], "duplicates"
    assert set(counts) == set(published), "lost events"
    print(
        f"\nnew sessions during flow: {len(published)} events, {stats.transactions} txns, "
        f"{stats.aborts} aborts ({stats.aborted_messages} messages re-read), "
        f"{stats.rebalances} rebalance callbacks"
    )


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_second_instance_joining_takes_partitions_without_loss_or_duplicates(
    settings: Settings, create_topics: Any, guarantee: str
) -> None:
    """Scale-out: router B joins A's group mid-stream; A commits in on_revoke, so B
    starts where A stopped: no duplicates, in either mode, without a crash.

    At-least-once, that needs A's commit in on_revoke to land before the partitions
    move.  It was made in a helper thread, which confluent-kafka 2.16 holds until
    the callback (inside consume()) returns: every revoke waited out its 10 s bound,
    counted a refused commit and sent it only after the revoke, and B re-read what
    A had routed since its last periodic commit."""
    sessions = [f"s{i}" for i in range(12)]
    create_topics(*(settings.session_topic(s) for s in sessions))
    create_topics(settings.control_topic)
    per_session = 600  # ~6 s of stream: B joins at 1.5 s
    published: list[tuple[str, int]] = []
    done = threading.Event()

    def publisher() -> None:
        producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 2})
        for seq in range(per_session):
            for sid in sessions:
                producer.produce(settings.session_topic(sid), encoded(sid, seq), sid.encode())
                published.append((sid, seq))
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0
        done.set()

    def make(n: int) -> Router:
        cfg = RouterConfig(
            transactional_id=f"{settings.prefix}.router.{n}",
            guarantee=guarantee,  # type: ignore[arg-type]
            batch_max_messages=100,
            batch_max_ms=50,
            status_interval_s=0,
        )
        return Router(settings, cfg)

    a, b = make(0), make(1)
    a.start()
    a_thread = threading.Thread(target=a.run, kwargs={"max_seconds": 120}, daemon=True)
    a_thread.start()
    pub = threading.Thread(target=publisher, daemon=True)
    pub.start()
    time.sleep(1.5)  # A owns everything and is mid-stream
    b.start()
    b_thread = threading.Thread(target=b.run, kwargs={"max_seconds": 120}, daemon=True)
    b_thread.start()
    try:
        deadline = time.monotonic() + 90
        while not done.is_set() or a.stats().routed + b.stats().routed < len(published):
            assert time.monotonic() < deadline, (a.stats(), b.stats())
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        a.request_stop()
        b.request_stop()
        a_thread.join(30)
        b_thread.join(30)
        a.close()
        b.close()
    sa, sb = a.stats(), b.stats()
    assert sb.routed > 0, "the second instance never got partitions"
    got = Counter(committed_events(settings, len(published)))
    doubled = [k for k, c in got.items() if c > 1]
    assert not doubled, (f"{len(doubled)} duplicates, e.g. {doubled[:3]}", sa, sb)
    assert set(got) == set(published), "lost events"
    print(
        f"\nscale-out ({guarantee}): A routed {sa.routed} ({sa.aborts} aborts, "
        f"{sa.failed_commits} refused offset commits), B routed {sb.routed} "
        f"({sb.aborts} aborts); aborted re-reads {sa.aborted_messages + sb.aborted_messages}, "
        f"{sum(c - 1 for c in got.values())} duplicates"
    )


def test_zombie_with_same_transactional_id_is_fenced_and_stops_loudly(
    settings: Settings, create_topics: Any
) -> None:
    """Two routers with the SAME id (a zombie after a failover, or a config slip):
    the newer one fences the older, which raises instead of committing anything."""
    sessions = [f"z{i}" for i in range(6)]
    create_topics(*(settings.session_topic(s) for s in sessions))
    create_topics(settings.control_topic)
    published: list[tuple[str, int]] = []
    done = threading.Event()

    def publisher() -> None:
        producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 2})
        for seq in range(400):
            for sid in sessions:
                producer.produce(settings.session_topic(sid), encoded(sid, seq), sid.encode())
                published.append((sid, seq))
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0
        done.set()

    config = RouterConfig(batch_max_messages=100, batch_max_ms=50, status_interval_s=0)
    old, new = Router(settings, config), Router(settings, config)
    failure: list[BaseException] = []

    def run_old() -> None:
        try:
            old.run(max_seconds=60)
        except BaseException as exc:
            failure.append(exc)
        finally:
            old.close()  # what the command does on the way out

    old.start()
    old_thread = threading.Thread(target=run_old, daemon=True)
    old_thread.start()
    pub = threading.Thread(target=publisher, daemon=True)
    pub.start()
    time.sleep(1.5)
    new.start()  # init_transactions with the same id bumps the epoch: old is fenced
    try:
        new.run(
            until=lambda s: (
                done.is_set() and bool(failure) and old.stats().routed + s.routed >= len(published)
            ),
            max_seconds=60,
        )
        old_thread.join(30)
    finally:
        new.close()
    assert failure, "the fenced router kept running"
    assert isinstance(failure[0], DeliveryError), repr(failure[0])
    text = str(failure[0])
    # librdkafka's words, not ours; it reports the fence either as "_FENCED" on a
    # produce request ("fenced by newer producer instance") or from the txn manager
    # ("fenced by a newer instance"), depending on which request hit it first.
    assert "_FENCED" in text or "fenced by a newer instance" in text, text
    got = Counter(committed_events(settings, len(published)))
    assert not [k for k, c in got.items() if c > 1], "duplicates"
    assert set(got) == set(published), "lost events"
    print(f"\nzombie fencing: old router stopped with: {str(failure[0])[:160]}")


def test_bug_in_decoder_stops_router_and_loses_nothing(
    settings: Settings, create_topics: Any
) -> None:
    """A non-input error (here: a decoder bug) must not commit the consumed position
    past the failing message; the open transaction is aborted, a restart re-reads."""
    topic = settings.session_topic("b1")
    create_topics(topic)
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    for seq in range(60):
        producer.produce(topic, encoded("b1", seq), b"b1")
    assert producer.flush(10) == 0

    class Buggy:
        def decode(self, data: bytes) -> TraceEvent:
            ev = SERDE.decode(data)
            if ev.seq == 30:
                raise RuntimeError("decoder bug on seq 30")
            return ev

    # one open transaction until the bug (batch_idle_ms=0: not closed early should the
    # 60 events arrive in two fetch responses)
    config = RouterConfig(
        batch_max_messages=1000, batch_max_ms=5000, batch_idle_ms=0, status_interval_s=0
    )
    router = Router(settings, config, decoder=Buggy())
    router.start()
    try:
        with pytest.raises(RuntimeError, match="seq 30"):
            router.run(max_seconds=30)
    finally:
        router.close()  # must abort, not commit, the open transaction
    assert router.stats().routed == 0
    assert committed_events(settings, 0, idle_s=1.0) == []

    with Router(settings, config) as fixed:
        final = fixed.run(until=lambda s: s.routed >= 60, max_seconds=30)
    assert final.routed == 60
    assert sorted(committed_events(settings, 60)) == [("b1", i) for i in range(60)]


class _LostCommitAnswer(Producer):  # type: ignore[misc]
    """A real transactional producer whose ``commit_transaction`` number
    ``LOSE_AT`` never returns: with ``LANDED`` its ``EndTxn`` commits on the broker
    first and only the answer is lost (the broker went away right after
    committing), else the request itself is lost (the transaction stays open until
    the next producer's ``init_transactions`` aborts it).  Only the first producer
    a router builds does this (the fault is injected once)."""

    LOSE_AT = 3
    LANDED = True
    made = 0
    lost = 0  # commits given no answer
    release = threading.Event()

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        type(self).made += 1
        self._faulty = type(self).made == 1
        self._commits = 0

    def commit_transaction(self, *args: Any) -> None:
        self._commits += 1
        if not (self._faulty and self._commits == self.LOSE_AT):
            super().commit_transaction(*args)
            return
        if self.LANDED:
            super().commit_transaction(*args)
        type(self).lost += 1
        self.release.wait(120)  # (released at the test's end)


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "lost"])
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_commit_given_up_with_its_outcome_unknown_routes_its_batch_once(
    settings: Settings,
    create_topics: Any,
    monkeypatch: pytest.MonkeyPatch,
    background: bool,
    landed: bool,
) -> None:
    """Exactly-once across a given-up ``commit_transaction``, whether it committed
    or not.

    The router cannot know whether a commit it gave up committed: the new
    producer's ``init_transactions`` completes a commit whose ``EndTxn`` reached
    the coordinator and aborts one whose did not.  Seeking back to the batch's
    first message, as after an abort, routed a committed batch twice (40 of 40
    here, both modes, on the code before); the router now replaces its consumer,
    which resumes from the committed offsets.  The fault is injected into a real
    producer on the real broker (``_LostCommitAnswer``).
    """
    from streams.router import router as router_mod

    monkeypatch.setattr(router_mod, "Producer", _LostCommitAnswer)
    monkeypatch.setattr(_LostCommitAnswer, "LANDED", landed)
    monkeypatch.setattr(_LostCommitAnswer, "made", 0)
    monkeypatch.setattr(_LostCommitAnswer, "lost", 0)
    monkeypatch.setattr(_LostCommitAnswer, "release", threading.Event())
    # give the commit up after 2 s, not 15 (background) or 6 (in the loop's helper)
    monkeypatch.setattr(router_mod, "WEDGED_S", 2.0)
    monkeypatch.setattr(router_mod, "TXN_CALL_WEDGED_S", 2.0)
    topic = settings.session_topic("s1")
    create_topics(topic)
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    n = 300
    for seq in range(n):
        producer.produce(topic, encoded("s1", seq), b"s1")
    assert producer.flush(30) == 0
    config = RouterConfig(
        batch_max_messages=40,
        batch_max_ms=50,
        status_interval_s=0,
        commit_in_background=background,
    )
    # (a batch whose commit landed is not counted as routed: its outcome is unknown)
    routed = n - 40 if landed else n
    router = Router(settings, config)
    router.start()
    try:
        router.run(until=lambda s: s.routed >= routed, max_seconds=90)
    finally:
        router.close()
        _LostCommitAnswer.release.set()
    assert _LostCommitAnswer.lost == 1, "the fault was not injected"
    assert router._replaced_producers == 1
    got = committed_events(settings, n)
    counts = Counter(got)
    twice = sorted(k[1] for k, c in counts.items() if c > 1)
    assert not twice, f"{len(twice)} events routed twice (seq {twice[0]}..{twice[-1]})"
    assert set(counts) == {("s1", seq) for seq in range(n)}, "lost events"
    stats = router.stats()
    assert (stats.unknown_commits, stats.unknown_messages) == (1, 40)
    assert stats.routed == routed
