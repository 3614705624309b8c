"""Changelog writes in aiokafka batches (``_ChangelogBatches``): order, offsets, failures.

Real Faust objects (app, tables, ``_DeliveringProducer``) and real aiokafka objects
(an unstarted ``AIOKafkaProducer`` making the ``BatchBuilder`` s); no broker: the
aiokafka ``send_batch`` is replaced by one that records each batch and hands back a
future that the test resolves, as aiokafka's sender does after Kafka answers
(``MessageBatch.done`` / ``failure``).  The records queued are read back from the
batches' wire bytes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from streams.core.events import TraceEvent
from streams.errors import DeliveryError
from streams.settings import Settings
from streams.worker.config import WorkerConfig

T0 = 1_767_225_600_000


def _app(tmp_path: Path) -> Any:
    from streams.worker.faust_app import create_app

    settings = Settings(bootstrap="127.0.0.1:1", prefix="tcb")
    config = WorkerConfig(
        store="memory://", data_dir=str(tmp_path), web_enabled=False, partitions=3
    )
    return create_app(settings, config)


class FakeSender:
    """Stands in for aiokafka's ``send_batch`` -> accumulator -> sender: records every
    batch queued (topic, partition, records) and its future, in queue order."""

    def __init__(self, fail_queue: BaseException | None = None, *, ack: bool = False) -> None:
        self.sent: list[tuple[str, int, list[tuple[bytes, bytes]], asyncio.Future[Any]]] = []
        self.fail_queue = fail_queue
        #: answer every batch on the next loop iteration, base offsets counted from
        #: ``base`` over all batches in queue order (else the test resolves them)
        self.ack = ack
        self.base = 100

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        from aiokafka.record.default_records import DefaultRecordBatch

        if self.fail_queue is not None:
            raise self.fail_queue
        records = [(r.key, r.value) for r in DefaultRecordBatch(bytes(batch._builder.build()))]
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.sent.append((topic, partition, records, fut))
        if self.ack:
            loop.call_soon(fut.set_result, _acked(topic, partition, self.base))
            self.base += len(records)
        return fut

    def engine_batches(self) -> list[int]:
        """Indexes in :attr:`sent` of the engines table's changelog batches."""
        return [i for i, (topic, *_) in enumerate(self.sent) if "engines" in topic]


def _install(wapp: Any, sender: FakeSender, max_batch_size: int = 16384) -> None:
    from aiokafka import AIOKafkaProducer

    # never started; 16384 is aiokafka's (and Faust's) default batch size
    aio = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", max_batch_size=max_batch_size)
    aio.send_batch = sender.send_batch  # type: ignore[method-assign]
    wapp.app.producer._producer = aio


def _barrier(wapp: Any) -> asyncio.Event:
    """Set when a flush reaches the wait before the engines' batches (its
    ``deliver_queued`` call): every other batch of it is queued by then."""
    producer = wapp.app.producer
    reached = asyncio.Event()
    original = producer.deliver_queued

    async def deliver_queued() -> None:
        reached.set()
        await original()

    producer.deliver_queued = deliver_queued
    return reached


def _events(sessions: int, per_session: int) -> list[TraceEvent]:
    out = []
    for i in range(per_session):
        for s in range(sessions):
            out.append(
                TraceEvent(
                    "tool_call",
                    f"s{s}",
                    i,
                    T0 + 1000 * i,
                    call_id=f"c{i}",
                    tool_name="read_file",
                    input={"path": f"f{i}.py", "pad": "x" * 300},
                )
            )
    return out


def _apply(wapp: Any, events: list[TraceEvent]) -> None:
    from streams.worker.web import key_partition

    for ev in events:
        wapp.processor.apply(ev, key_partition(ev.session_id, 3))


async def _no_flush() -> None:
    return None


def _acked(topic: str, partition: int, base_offset: int) -> Any:
    from aiokafka.structs import RecordMetadata, TopicPartition

    tp = TopicPartition(topic, partition)
    return RecordMetadata(topic, partition, tp, base_offset, -1, 0, 0)


def test_a_flush_queues_every_value_once_per_partition_in_order(tmp_path: Path) -> None:
    async def run() -> None:
        wapp = _app(tmp_path)
        sender = FakeSender()
        _install(wapp, sender)
        flusher = wapp.app.state_flusher
        flusher.WRITE_CHUNK = 5  # several chunks: batches stay open across them
        from streams.worker.metrics import WorkerMetrics

        flusher.metrics = metrics = WorkerMetrics()
        _apply(wapp, _events(sessions=40, per_session=3))
        pending = wapp.processor.take_dirty()
        expected = [p.encode() for p in pending]

        async def kafka_acks_all_but_the_engines() -> None:
            while True:
                await asyncio.sleep(0.01)
                for topic, partition, _, fut in sender.sent:
                    if "engines" not in topic and not fut.done():
                        fut.set_result(_acked(topic, partition, 0))

        acks = asyncio.ensure_future(kafka_acks_all_but_the_engines())
        try:
            await asyncio.wait_for(flusher.write_pending(pending, _no_flush), 5)
        finally:
            acks.cancel()
        # the encode's CPU time is counted, in /stats and /metrics alike
        assert flusher.encode_cpu_s > 0
        assert metrics.registry.get_sample_value(
            "trajectory_worker_state_encode_cpu_seconds_total"
        ) == pytest.approx(flusher.encode_cpu_s)

        # every value is in the stores and in exactly one queued batch of its partition
        queued: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        for topic, partition, records, _ in sender.sent:
            queued.setdefault((topic, partition), []).extend(records)
        for w in expected:
            table = flusher.tables[w.table]
            assert table.data.data[w.key] == w.value
        want: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        for w in expected:
            topic = flusher.tables[w.table].changelog_topic.get_topic_name()
            want.setdefault((topic, w.partition), []).append((w.key, w.value))
        assert queued == want  # same records, same order per partition, nothing else
        # batched: a batch per 16 KB of a partition, not a future per record
        assert len(want) <= len(sender.sent) < len(expected) // 4
        assert flusher.changelog_records == len(expected)
        # a batch counts as queued until Kafka acknowledged it
        engines = sender.engine_batches()
        assert engines and wapp.app.producer.queued == len(engines)
        for i in engines:
            topic, partition, _, fut = sender.sent[i]
            fut.set_result(_acked(topic, partition, 0))
        await asyncio.wait_for(wapp.app.producer.deliver_queued(), 5)
        assert wapp.app.producer.queued == 0

    asyncio.run(run())


def test_batches_fill_up_in_order_and_set_the_last_offset_as_persisted(tmp_path: Path) -> None:
    async def run() -> None:
        wapp = _app(tmp_path)
        sender = FakeSender(ack=True)  # base offsets as the broker would assign them
        _install(wapp, sender, max_batch_size=1024)
        flusher = wapp.app.state_flusher
        # one session, 60 minutes: 60 values of ~150 bytes for one partition of
        # `minutes`: several 1 KB batches
        events = [
            TraceEvent(
                "tool_call",
                "s0",
                i,
                T0 + 60_000 * i,
                call_id=f"c{i}",
                tool_name="read_file",
                input={"path": "f.py", "pad": "y" * 600},
            )
            for i in range(60)
        ]
        _apply(wapp, events)
        pending = wapp.processor.take_dirty()
        expected = [p.encode() for p in pending]
        persisted: dict[str, list[tuple[int, int]]] = {}
        for name, table in flusher.tables.items():
            table.data.set_persisted_offset = (  # record what the callback sets
                lambda tp, off, name=name: persisted.setdefault(name, []).append(
                    (tp.partition, off)
                )
            )
        await flusher.write_pending(pending, _no_flush)
        minutes_topic = flusher.tables["minutes"].changelog_topic.get_topic_name()
        minute_batches = [s for s in sender.sent if s[0] == minutes_topic]
        assert len(minute_batches) >= 2, "the test needs more than one batch per partition"
        got = [rec for _, _, records, _ in minute_batches for rec in records]
        want = [(w.key, w.value) for w in expected if w.table == "minutes"]
        assert got == want
        await wapp.app.producer.deliver_queued()  # all acknowledged: returns
        assert wapp.app.producer.queued == 0
        # each acknowledged batch set its last record's offset as persisted
        base = 100
        expected_persisted = []
        for topic, partition, records, _ in sender.sent:
            if topic == minutes_topic:
                expected_persisted.append((partition, base + len(records) - 1))
            base += len(records)
        assert persisted["minutes"] == expected_persisted
        assert set(persisted) == {"sessions", "minutes", "engines"}

    asyncio.run(run())


def test_the_engines_changelog_records_wait_until_every_other_record_is_acknowledged(
    tmp_path: Path,
) -> None:
    """Changelog batches of different partitions are not ordered against each other.
    A worker killed mid-flush that also lost its local store must never recover a
    session's engine ahead of its counters (the engine would skip the redelivered
    events and the counters would miss their pattern tallies for good): a flush
    queues the engines' batches only once Kafka acknowledged every other batch of
    it, here and in the revoke flush (``collect_now`` + ``send``)."""

    async def run() -> None:
        wapp = _app(tmp_path)
        sender = FakeSender()
        _install(wapp, sender)
        flusher = wapp.app.state_flusher
        flusher.WRITE_CHUNK = 5

        reached = _barrier(wapp)

        async def flushed(flush: asyncio.Future[None]) -> None:
            await asyncio.wait_for(reached.wait(), 5)
            reached.clear()
            await asyncio.sleep(0.05)
            assert not flush.done()
            others = list(sender.sent)
            assert others and sender.engine_batches() == []  # waiting for the acks
            for topic, partition, _, fut in others[:-1]:
                fut.set_result(_acked(topic, partition, 0))
            await asyncio.sleep(0.05)
            assert sender.engine_batches() == []  # one is still not acknowledged
            topic, partition, _, fut = others[-1]
            fut.set_result(_acked(topic, partition, 0))
            await asyncio.sleep(0.05)
            engines = sender.engine_batches()
            assert engines and min(engines) == len(others)  # queued after, all of them
            for i in engines:
                topic, partition, _, fut = sender.sent[i]
                fut.set_result(_acked(topic, partition, 0))
            await asyncio.wait_for(flush, 5)
            await asyncio.wait_for(wapp.app.producer.deliver_queued(), 5)

        events = _events(sessions=20, per_session=4)
        _apply(wapp, events[:40])
        pending = wapp.processor.take_dirty()
        assert {p.table for p in pending} >= {"sessions", "engines"}
        await flushed(asyncio.ensure_future(flusher.write_pending(pending, _no_flush)))
        # every value's record went out, the engines' included
        assert sum(len(r) for *_, r, _ in sender.sent) == len(pending)

        sender.sent.clear()
        _apply(wapp, events[40:])
        _, batches = flusher.collect_now()
        await flushed(asyncio.ensure_future(flusher.send(batches)))

    asyncio.run(run())


@pytest.mark.parametrize("how", ["not acknowledged", "not queued"])
def test_a_failed_batch_fails_every_later_flush(tmp_path: Path, how: str) -> None:
    """A changelog batch Kafka did not take must never be followed by an offset commit:
    the producer flush that precedes every commit (``_DeliveringProducer.flush``)
    raises, now and later."""

    async def run() -> None:
        wapp = _app(tmp_path)
        boom = RuntimeError("broker said no")
        sender = FakeSender(fail_queue=boom if how == "not queued" else None)
        _install(wapp, sender)
        flusher = wapp.app.state_flusher
        producer = wapp.app.producer
        _apply(wapp, _events(sessions=6, per_session=1))
        pending = wapp.processor.take_dirty()
        if how == "not queued":
            with pytest.raises(DeliveryError, match=r"changelog\[\d\].*broker said no"):
                await flusher.write_pending(pending, _no_flush)
        else:
            deliver_queued = producer.deliver_queued
            reached = _barrier(wapp)
            flush = asyncio.ensure_future(flusher.write_pending(pending, _no_flush))
            await asyncio.wait_for(reached.wait(), 5)  # every other batch queued
            waiter = asyncio.ensure_future(deliver_queued())
            await asyncio.sleep(0.05)
            assert not waiter.done() and not flush.done()  # waits for every batch
            assert sender.sent and sender.engine_batches() == []  # the engines' wait
            topic, partition, _, fut = sender.sent[1]
            for i, (t, p, _, f) in enumerate(sender.sent):
                if i != 1:
                    f.set_result(_acked(t, p, 0))
            fut.set_exception(boom)
            with pytest.raises(DeliveryError, match=rf"{topic}\[{partition}\].*broker said no"):
                await waiter
            with pytest.raises(DeliveryError, match="broker said no"):
                await flush
            # the counters' batch failed: the engines' records were never queued
            assert sender.engine_batches() == []
        with pytest.raises(DeliveryError, match="broker said no"):
            await producer.flush()  # sticky: what _commit_offsets awaits before committing

    asyncio.run(run())


def test_the_revoke_flush_writes_the_stores_before_any_await(tmp_path: Path) -> None:
    """``collect_now`` (revoke) writes the stores with no await, so the caches can be
    dropped at once; the batches are queued after that."""

    async def run() -> None:
        wapp = _app(tmp_path)
        sender = FakeSender(ack=True)
        _install(wapp, sender)
        flusher = wapp.app.state_flusher
        _apply(wapp, _events(sessions=5, per_session=2))
        n, batches = flusher.collect_now()
        assert n > 0 and sender.sent == []
        wapp.processor.drop_caches()  # nothing dirty left: does not raise
        await flusher.send(batches)
        assert sum(len(r) for _, _, r, _ in sender.sent) == n
        assert flusher.changelog_records == n

    asyncio.run(run())


def test_later_flushes_queue_after_earlier_ones_and_the_last_value_wins(tmp_path: Path) -> None:
    """Three flushes of the same sessions (commit, commit, revoke), batches of 1 KB: per
    changelog partition every key's values are queued in flush order, so recovery,
    which keeps the last value of a key, gives what the stores hold."""

    async def run() -> None:
        wapp = _app(tmp_path)
        sender = FakeSender(ack=True)
        _install(wapp, sender, max_batch_size=1024)
        flusher = wapp.app.state_flusher
        flusher.WRITE_CHUNK = 7
        events = _events(sessions=12, per_session=3)
        for round_ in range(3):
            _apply(wapp, events[12 * round_ : 12 * (round_ + 1)])
            if round_ < 2:
                await flusher.write_pending(wapp.processor.take_dirty(), _no_flush)
            else:
                _, batches = flusher.collect_now()
                await flusher.send(batches)
        replayed: dict[tuple[str, bytes], bytes] = {}
        seen: dict[tuple[str, bytes], list[bytes]] = {}
        for topic, _, records, _ in sender.sent:
            for key, value in records:
                replayed[(topic, key)] = value  # what changelog recovery keeps
                seen.setdefault((topic, key), []).append(value)
        for table in flusher.tables.values():
            topic = table.changelog_topic.get_topic_name()
            stored = {(topic, k): v for k, v in table.data.data.items()}
            assert {k: v for k, v in replayed.items() if k[0] == topic} == stored
        sessions_topic = flusher.tables["sessions"].changelog_topic.get_topic_name()
        counts = [
            [json.loads(v)["events"] for v in vals]
            for (t, _), vals in seen.items()
            if t == sessions_topic
        ]
        assert counts and all(c == [1, 2, 3] for c in counts)  # one write per flush, in order

    asyncio.run(run())


def _committing(
    tmp_path: Path, *, offset: int | None
) -> tuple[Any, FakeSender, Any, list[dict[Any, int]]]:
    """An app whose real consumer's ``_commit_tps`` can run: batches go to a
    :class:`FakeSender`, the offset commits to the returned list; events partition 0
    has ``offset`` to commit (None: nothing new), and six sessions have one event
    applied each.  Returns (app, sender, events partition, commits)."""
    from faust.types import TP

    wapp = _app(tmp_path)
    sender = FakeSender()
    _install(wapp, sender)
    consumer = wapp.app.consumer
    events_tp = TP(wapp.settings.events_topic, 0)
    committed: list[dict[Any, int]] = []

    async def _commit(offsets: dict[Any, int]) -> bool:
        committed.append(dict(offsets))
        return True

    consumer._filter_committable_offsets = lambda tps: {} if offset is None else {events_tp: offset}
    consumer.assignment = lambda: {events_tp}
    consumer._commit = _commit
    wapp.app.tables.on_commit = lambda offsets: None
    _apply(wapp, _events(sessions=6, per_session=1))
    return wapp, sender, events_tp, committed


@pytest.mark.parametrize("fail", [False, True])
def test_a_failed_batch_stops_the_commit_before_any_offset_is_committed(
    tmp_path: Path, fail: bool
) -> None:
    """The whole commit (``_ReadCommittedConsumer._commit_tps`` on the app's real
    consumer): flush the state in batches, then Faust's ``_commit_offsets``, whose
    producer flush waits for the batches.  One batch failing -> the worker crashes
    with :class:`DeliveryError` and the offsets are never committed; all
    acknowledged -> they are (the control that shows the spy sees commits)."""

    async def run() -> None:
        wapp, sender, events_tp, committed = _committing(tmp_path, offset=10)
        consumer = wapp.app.consumer
        crashed: list[BaseException] = []

        async def _crash(exc: BaseException) -> None:
            crashed.append(exc)

        consumer.crash = _crash

        async def kafka_answers() -> None:
            while not sender.sent:  # the flush queues them, then waits for them
                await asyncio.sleep(0.01)
            while True:  # the engines' batches come once the others are acknowledged
                await asyncio.sleep(0.02)
                for i, (topic, partition, _, fut) in enumerate(sender.sent):
                    if fut.done():
                        continue
                    if fail and i == 1:
                        fut.set_exception(RuntimeError("broker said no"))
                    else:
                        fut.set_result(_acked(topic, partition, 0))

        answers = asyncio.ensure_future(kafka_answers())
        try:
            did = await asyncio.wait_for(consumer._commit_tps([events_tp], False), 10)
        finally:
            answers.cancel()
        if fail:
            assert did is False and committed == []
            assert len(crashed) == 1 and isinstance(crashed[0], DeliveryError)
            assert "broker said no" in str(crashed[0])
        else:
            assert did is True and committed == [{events_tp: 10}] and crashed == []

    asyncio.run(run())


def test_a_flush_writes_every_value_to_the_rocksdb_stores_before_it_returns(
    tmp_path: Path,
) -> None:
    """The RocksDB path (the worker's default store): each chunk's values go in one
    ``WriteBatch`` per store partition (issue #12), all in the stores when
    ``StateFlusher.write`` returns, and readable through Faust's store API."""

    async def run() -> None:
        from streams.worker.faust_app import create_app

        settings = Settings(bootstrap="127.0.0.1:1", prefix="tcr")
        config = WorkerConfig(
            store="rocksdb://", data_dir=str(tmp_path), web_enabled=False, partitions=3
        )
        wapp = create_app(settings, config)
        sender = FakeSender(ack=True)
        _install(wapp, sender)
        flusher = wapp.app.state_flusher
        flusher.WRITE_CHUNK = 7  # several chunks, several partitions per chunk
        _apply(wapp, _events(sessions=25, per_session=2))
        pending = wapp.processor.take_dirty()
        expected = [p.encode() for p in pending]
        assert {w.partition for w in expected} == {0, 1, 2}
        await flusher.write_pending(pending, _no_flush)
        for w in expected:
            store = flusher.tables[w.table].data
            assert store._db_for_partition(w.partition)[w.key] == w.value
            assert store._key_index[w.key] == w.partition
            assert store[w.key] == w.value  # Faust's read path finds it
        assert flusher.changelog_records == len(expected)

    asyncio.run(run())


def test_a_flush_writes_the_engines_rocksdb_batches_last() -> None:
    """A worker killed between two of a chunk's store writes must not leave a
    session's engine ahead of its counters (the restarted engine would skip the
    redelivered events and the counters would miss their patterns).  A chunk's
    batches are keyed by their first value, which can be an engine whose counters
    went in the previous chunk: its batch is still written after the counters'."""
    from streams.worker.faust_app import StateFlusher
    from streams.worker.processor import TableWrite

    order: list[str] = []

    class Db:
        def __init__(self, name: str) -> None:
            self.name = name

        def write(self, batch: object) -> None:
            order.append(self.name)

    class Store:
        use_rocksdict = True

        def __init__(self, name: str) -> None:
            self.db = Db(name)
            self._key_index: dict[bytes, int] = {}

        def _db_for_partition(self, partition: int) -> Db:
            return self.db

    class Table:
        def __init__(self, name: str) -> None:
            self.data = Store(name)

    class Batches:
        def add(self, *args: object) -> None:
            pass

    tables = {name: Table(name) for name in ("sessions", "engines")}
    flusher = StateFlusher(None, tables, None)  # type: ignore[arg-type]
    writes = [
        TableWrite("engines", 0, b"s1", b"e1"),  # its counters were in the chunk before
        TableWrite("sessions", 0, b"s2", b"c2"),
        TableWrite("engines", 0, b"s2", b"e2"),
    ]
    flusher.write(writes, Batches())  # type: ignore[arg-type]
    assert order == ["sessions", "engines"]


def test_a_commit_with_no_offset_to_commit_still_waits_for_its_changelog_writes(
    tmp_path: Path,
) -> None:
    """A commit that wrote values but has no offset to commit (all committed before:
    a revoke right after a periodic commit, timer-made changes) returned with its
    engines' batches still in flight, and the revoke after it flushed nothing more:
    the next owner read the changelog's high watermark before they landed and
    resumed with older values (test_worker_recovery's clean-rebalance test,
    2026-12-02: a session's counters 4 events short).  Now it returns only once
    Kafka acknowledged every batch it queued."""

    async def run() -> None:
        wapp, sender, events_tp, committed = _committing(tmp_path, offset=None)
        consumer = wapp.app.consumer
        consumer._flush_all_engines = True  # as at a revoke or a stop (wait_empty)

        hold_engines = True

        async def kafka_answers() -> None:
            while True:  # every batch but the engines' ones, until released
                await asyncio.sleep(0.01)
                for topic, partition, _, fut in sender.sent:
                    if not fut.done() and (not hold_engines or "engines" not in topic):
                        fut.set_result(_acked(topic, partition, 0))

        answers = asyncio.ensure_future(kafka_answers())
        try:
            commit = asyncio.ensure_future(consumer._commit_tps([events_tp], False))
            for _ in range(500):
                if sender.engine_batches():
                    break
                await asyncio.sleep(0.01)
            assert sender.engine_batches(), "the flush queued no engines' batch"
            await asyncio.sleep(0.2)
            assert not commit.done(), "returned with changelog writes unacknowledged"
            hold_engines = False
            did = await asyncio.wait_for(commit, 10)
        finally:
            answers.cancel()
        assert did is False and committed == []
        assert all(fut.done() for *_, fut in sender.sent)

    asyncio.run(run())


def test_the_last_commit_of_a_revoke_waits_for_a_commit_under_way_then_commits(
    tmp_path: Path,
) -> None:
    """Faust's ``commit()`` skips a commit while another is under way.  The one a
    revoke or a stop makes (``commit_and_end_transactions``) must not be skipped:
    the periodic commit under way took its offsets before the batches applied
    meanwhile, whose state the revoke then writes (the next owner re-handled them:
    redeliveries in the clean-rebalance test).  It waits for that commit, then
    commits itself."""

    async def run() -> None:
        consumer = _app(tmp_path).app.consumer
        calls: list[bool] = []

        async def force_commit(topics: Any = None, start_new_transaction: bool = True) -> bool:
            calls.append(start_new_transaction)
            return True

        consumer.force_commit = force_commit
        under_way: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        consumer._commit_fut = under_way  # a periodic commit, still running
        last = asyncio.ensure_future(consumer.commit_and_end_transactions())
        await asyncio.sleep(0.05)
        assert calls == [] and not last.done()  # waits for it
        consumer._commit_fut = None  # it ends, as Faust's commit() ends one
        under_way.set_result(None)
        await asyncio.wait_for(last, 5)
        assert calls == [False]  # then commits, ending any transaction

    asyncio.run(run())
