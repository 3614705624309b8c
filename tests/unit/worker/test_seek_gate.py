"""The worker's fetch loop hands the handler no record of a partition before the
seek of its assignment (``_ReadCommittedConsumer.perform_seek``).

Seen on the real broker (test_worker_recovery's clean-rebalance test, 2 runs in
~45): after an assignment the fetcher returned a partition's records from the end
of the log, past its committed offset (120 with 111 committed).  Handled, they
made 120 committable; the seek then raised the read offset to it, so 111-119 were
dropped, and the commit went past them: every session of the partition lost those
events.  Here the consumer is the worker app's real one; only aiokafka's calls
(the committed offsets, the fetch) are stand-ins.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from app_events import offline_app
from faust.types import TP

from streams.core.events import TraceEvent
from streams.serde import EventSerde
from streams.worker.batch import BatchStats

SERDE = EventSerde()


def _consumer(tmp_path: Path, committed: dict[TP, int]) -> tuple[Any, Any, list[tuple[int, int]]]:
    app, _ = offline_app(tmp_path, "tsg")
    consumer = app.consumer
    handled: list[tuple[int, int]] = []

    async def handle(batch: list[Any], current: Any = None) -> BatchStats | None:
        # (what happens while the batch waits for the handler's lock)
        for hook in consumer.while_waiting:
            hook()
        consumer.while_waiting.clear()
        if current is not None and not current():
            return None
        handled.extend((r.partition, r.offset) for r in batch)
        app.batch_handler._committable[(batch[0].topic, batch[0].partition)] = batch[-1].offset + 1
        return BatchStats(len(batch), 0, 0)

    async def seek_to_committed() -> dict[TP, int]:
        return dict(committed)

    app.batch_handler.handle = handle
    consumer.seek_to_committed = seek_to_committed
    consumer.assignment = lambda: set(committed)
    consumer.highwater = lambda tp: None  # (the monitor's end offset: aiokafka's)
    # aiokafka's fetch position: one past the last record the loop was given, unless
    # a seek set it (recorded in ``consumer.seeks``)
    consumer.seeks = []
    consumer.while_waiting = []
    consumer.fetch_position = {}

    def put_back(tp: TP, first: int, after: int) -> None:
        # (the real one runs faust_app.put_back on aiokafka's consumer: tested below)
        if consumer.fetch_position.get(tp) == after:
            consumer.seeks.append((tp.partition, first))
            consumer.fetch_position[tp] = first

    consumer._put_back = put_back
    return consumer, app, handled


def _records(topic: str, partition: int, offsets: range) -> list[Any]:
    return [
        SimpleNamespace(
            topic=topic,
            partition=partition,
            offset=o,
            key=b"s",
            value=SERDE.encode(TraceEvent("message", "s", o, 1000 + o)),
            timestamp=1000 + o,
        )
        for o in offsets
    ]


async def _drain(
    consumer: Any, fetches: list[dict[TP, list[Any]]], active: set[TP] | None = None
) -> None:
    """Run the real fetch loop over ``fetches``, one per round, then stop it;
    ``active``: the partitions Faust's fetch call reports as not paused (None: all)."""
    fetcher = SimpleNamespace(_stopped=asyncio.Event())

    async def wait_next_records(timeout: float) -> tuple[Any, Any]:
        if not fetches:
            fetcher._stopped.set()
            return None, None
        got = fetches.pop(0)
        for tp, batch in got.items():
            consumer.fetch_position[tp] = batch[-1].offset + 1
        return got, active

    consumer._wait_next_records = wait_next_records
    consumer.flow_active = True
    await consumer._drain_messages(fetcher)


async def _drain_with(consumer: Any, wait_next_records: Any) -> Any:
    """Run the real fetch loop with ``wait_next_records`` as Faust's fetch call (it
    stops the loop by setting the returned fetcher's ``_stopped``)."""
    fetcher = SimpleNamespace(_stopped=asyncio.Event())
    consumer._wait_next_records = lambda timeout: wait_next_records(fetcher)
    consumer.flow_active = True
    await consumer._drain_messages(fetcher)
    return fetcher


def test_records_fetched_before_the_assignments_seek_are_not_handled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 0)
        consumer, app, handled = _consumer(tmp_path, {tp: 111})
        # after the assignment, before the seek: records from past the committed 111
        await _drain(consumer, [{tp: _records(topic, 0, range(120, 123))}])
        assert handled == []  # (handled, they made 123 committable: 111-122 lost)
        assert consumer.seeks == [(0, 120)]  # put back: no seek has moved it since
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await consumer.perform_seek()
        assert consumer._read_offset[tp] == 111
        # the seek names what was fetched from past the committed offset
        assert [r.getMessage() for r in caplog.records] == [
            "tsg.events[0]: the fetcher returned records from offset 120, past the "
            "committed offset 111, before the assignment's seek; not handled, read again "
            "from 111 (docs/guarantees.md: no record is handled before its assignment's seek)"
        ]
        caplog.clear()
        # after the seek the fetcher starts at the committed offset
        await _drain(consumer, [{tp: _records(topic, 0, range(111, 125))}])
        assert handled == [(0, o) for o in range(111, 125)]
        # a later seek of the same assignment (the flow stopped) never goes back
        await consumer.perform_seek()
        assert consumer._read_offset[tp] == 125
        await _drain(consumer, [{tp: _records(topic, 0, range(111, 127))}])
        assert handled[-2:] == [(0, 125), (0, 126)] and len(handled) == 16

        # revoked: nothing handled until the next assignment's seek, whose committed
        # offset wins over what the last assignment had handled
        async def app_revoke(revoked: Any) -> None:  # (the app's part: commit, flush)
            pass

        consumer._on_partitions_revoked = app_revoke
        await consumer.on_partitions_revoked({tp})
        await _drain(consumer, [{tp: _records(topic, 0, range(130, 131))}])
        assert len(handled) == 16
        app.batch_handler._committable[(topic, 0)] = 999  # (a late batch's, stale)
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await consumer.perform_seek()
        assert consumer._read_offset[tp] == 111
        assert [
            "from offset 130, past the committed offset 111" in r.getMessage()
            for r in caplog.records
        ] == [True]

    asyncio.run(run())


def test_a_batch_fetched_from_the_committed_offset_before_the_seek_returned_is_fetched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The seek's own fetch can reach the loop before ``perform_seek`` has returned
    (seen: 3 events per session lost when such a batch was dropped).  Held back, the
    fetch position goes back to its first record; where a seek moved the position
    after the batch was taken, that position is kept."""

    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 0)
        consumer, _, handled = _consumer(tmp_path, {tp: 84})
        await _drain(consumer, [{tp: _records(topic, 0, range(84, 87))}])
        assert handled == [] and consumer.seeks == [(0, 84)]
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await consumer.perform_seek()
        assert caplog.records == []  # (fetched from the committed offset: not worth a word)
        await _drain(consumer, [{tp: _records(topic, 0, range(84, 90))}])
        assert handled == [(0, o) for o in range(84, 90)]

        # a stale batch (from the end of the log) whose partition a seek moved since
        other = TP(topic, 1)
        consumer2, _, handled2 = _consumer(tmp_path / "b", {other: 111})
        stale = _records(topic, 1, range(120, 123))

        async def wait_next_records(fetcher: Any) -> tuple[Any, Any]:
            if stale:
                batch = list(stale)
                stale.clear()
                consumer2.fetch_position[other] = 111  # the seek ran meanwhile
                return {other: batch}, None
            fetcher._stopped.set()
            return None, None

        await _drain_with(consumer2, wait_next_records)
        assert handled2 == [] and consumer2.seeks == []  # the seek's 111 holds

    asyncio.run(run())


def test_a_batch_held_back_past_a_transaction_marker_is_fetched_again(tmp_path: Path) -> None:
    """read_committed, aiokafka steps over the commit marker that ends a router
    transaction: after a batch ending one, the fetch position is past the batch's
    last record + 1.  The put-back compared the position with that +1, found it
    moved, and dropped the batch: a restarted worker lost the session_start of a
    brand-new session (test_ingest_acceptance, 11 of 13 runs on a long-running
    broker).  Now it compares with where the fetch left the position
    (``_ReadCommittedConsumerThread.take_fetched_to``); a seek since still wins."""

    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 0)
        consumer, _, handled = _consumer(tmp_path, {tp: 300})
        batch = _records(topic, 0, range(301, 302))  # 300: the last transaction's marker
        rounds = [batch]
        moved: list[int] = []

        async def wait_next_records(fetcher: Any) -> tuple[Any, Any]:
            if rounds:
                got = rounds.pop(0)
                consumer.fetch_position[tp] = got[-1].offset + 2  # the marker at 302
                consumer._take_fetched_to = lambda: {tp: got[-1].offset + 2}
                if moved:  # a seek after the fetch returned: its position holds
                    consumer.fetch_position[tp] = moved[0]
                return {tp: got}, None
            fetcher._stopped.set()
            return None, None

        await _drain_with(consumer, wait_next_records)  # before the seek: held back
        assert handled == [] and consumer.seeks == [(0, 301)]  # (before: [], 301 lost)

        consumer2, _, handled2 = _consumer(tmp_path / "b", {tp: 300})
        consumer = consumer2
        rounds.append(batch)
        moved.append(300)
        await _drain_with(consumer2, wait_next_records)
        assert handled2 == [] and consumer2.seeks == []  # the seek's 300 holds

    asyncio.run(run())


def test_a_batch_revoked_while_it_waited_for_the_lock_is_not_handled_nor_passed(
    tmp_path: Path,
) -> None:
    """A batch that passed the loop's flow check, then waited for the handler's lock
    behind a revoke's commit, must not be applied (its state would be written past
    the committed offsets: the next owner handles it again) nor move the read offset;
    the rest of that fetch is left too (the likely cause, read from the code, of 16
    duplicates in a run of the clean-rebalance test)."""

    async def run() -> None:
        topic = "tsg.events"
        tp0, tp1 = TP(topic, 0), TP(topic, 1)
        consumer, app, handled = _consumer(tmp_path, {tp0: 10, tp1: 20})
        await consumer.perform_seek()
        generation = app.consumer_generation_id

        def revoke() -> None:  # Faust stops the flow, then commits under the lock
            consumer.flow_active = False

        consumer.while_waiting.append(revoke)
        fetch = {tp0: _records(topic, 0, range(10, 13)), tp1: _records(topic, 1, range(20, 22))}
        await _drain(consumer, [fetch])
        assert handled == []
        assert consumer._read_offset[tp0] == 10 and consumer._read_offset[tp1] == 20
        assert app.consumer_generation_id == generation
        # the flow back on, same generation: the same records are handled
        await _drain(consumer, [fetch])
        assert handled == [(0, 10), (0, 11), (0, 12), (1, 20), (1, 21)]

    asyncio.run(run())


def test_records_of_a_paused_partition_are_not_handled_and_are_fetched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka can return a partition Faust has paused: Faust hands it its *live*
    set of active partitions, and recovery empties that set (``pause_partitions``)
    while a fetch waits, which aiokafka reads as "every partition"
    (``Fetcher.fetched_records``: ``if partitions and tp not in partitions``); taking
    the records moves its fetch position past them.  Faust's loop drops such a batch.
    Dropped without going back, the next fetch started past it: the likely cause of
    the events fetched "from the end of the log" before an assignment's seek
    (2026-12-02), and a loss wherever no seek followed.  The batch is left unhandled
    and the position goes back to its first record."""

    async def run() -> None:
        topic = "tsg.events"
        tp, other = TP(topic, 0), TP(topic, 1)
        consumer, _, handled = _consumer(tmp_path, {tp: 111, other: 50})
        await consumer.perform_seek()
        # tp paused, ``other`` active: the same fetch returns both
        fetch = {tp: _records(topic, 0, range(111, 120)), other: _records(topic, 1, range(50, 52))}
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await _drain(consumer, [fetch], active={other})
        assert handled == [(1, 50), (1, 51)]
        assert consumer.fetch_position[tp] == 111  # (120 before: 111-119 skipped)
        assert consumer.seeks == [(0, 111)]
        assert caplog.records == []  # (the INFO line below is not a warning)
        # resumed: fetched again from 111, all handled
        await _drain(consumer, [{tp: _records(topic, 0, range(111, 121))}])
        assert handled[2:] == [(0, o) for o in range(111, 121)]

        # paused before the assignment's seek (recovery): the position goes back to
        # the committed offset too, so the seek's WARNING of records fetched from past
        # it does not fire for this cause
        consumer2, _, handled2 = _consumer(tmp_path / "b", {tp: 111})
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="streams.worker.faust_app"):
            await _drain(consumer2, [{tp: _records(topic, 0, range(111, 120))}], active=set())
        assert handled2 == [] and consumer2.fetch_position[tp] == 111
        assert [r.getMessage() for r in caplog.records] == [
            "tsg.events[0]: records 111-119 fetched while the partition was paused; "
            "not handled, fetched again from 111"
        ]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await consumer2.perform_seek()
        assert caplog.records == []

    asyncio.run(run())


def test_the_fetch_position_is_read_from_aiokafkas_real_structures(tmp_path: Path) -> None:
    """``fetch_position`` and ``put_back`` (what ``_hold_back`` runs) on aiokafka's
    real subscription state: no position while there is no
    assignment, no position yet (a reset pending: aiokafka's ``position`` would
    assert) or the partition is not assigned, and then no seek; a seek only where
    the position is still one past the batch.  The other tests stand in for them,
    so an aiokafka upgrade that moves these structures fails here."""
    from aiokafka.consumer.subscription_state import SubscriptionState
    from aiokafka.structs import TopicPartition

    from streams.worker.faust_app import fetch_position, partition_flags, put_back

    async def run() -> None:
        # the worker's own aiokafka consumer, as its thread creates it (not started)
        app, _ = offline_app(tmp_path, "tsg")
        thread = app.consumer._thread
        kafka = thread._create_consumer(loop=asyncio.get_running_loop())
        tp = TP("tsg.events", 0)
        assert fetch_position(kafka, tp) is None  # no subscription yet
        assert partition_flags(kafka, tp) == (None, False)
        kafka._subscription.assign_from_user({TopicPartition("tsg.events", 0)})
        assert fetch_position(kafka, tp) is None  # assigned, no position yet
        assert fetch_position(kafka, TP("tsg.events", 1)) is None  # not assigned
        assert partition_flags(kafka, TP("tsg.events", 1)) == (None, False)
        state = kafka._subscription.subscription.assignment.state_value(tp)
        state.seek(111)
        assert fetch_position(kafka, tp) == 111
        # the stall watch's high watermark and pause flag (streams/worker/stall.py)
        assert partition_flags(kafka, tp) == (None, False)
        state.highwater = 130
        kafka._subscription.pause(TopicPartition("tsg.events", 0))
        assert partition_flags(kafka, tp) == (130, True)
        kafka._subscription.resume(TopicPartition("tsg.events", 0))
        assert partition_flags(kafka, tp) == (130, False)

        await kafka.stop()  # (never started: only closes its client)

        # put_back on a real subscription state (the seek itself recorded: a
        # consumer that is not started has no fetcher to seek with)
        subscription = SubscriptionState()
        seeks: list[tuple[Any, int]] = []
        stub = SimpleNamespace(
            _subscription=subscription, seek=lambda tp, offset: seeks.append((tp, offset))
        )
        assert not put_back(stub, tp, 111, 120)  # no assignment
        subscription.assign_from_user({TopicPartition("tsg.events", 0)})
        assert not put_back(stub, tp, 111, 120)  # no position yet
        subscription.subscription.assignment.state_value(tp).seek(120)
        assert not put_back(stub, tp, 111, 125)  # moved since (a seek): left
        assert seeks == []
        assert put_back(stub, tp, 111, 120)
        assert seeks == [(tp, 111)]

        # revoked by the consumer thread between the check and the seek: not ours
        # any more, left to the next assignment's seek (aiokafka's own error)
        from aiokafka.errors import IllegalStateError

        def revoked(tp: Any, offset: int) -> None:
            raise IllegalStateError(f"No current assignment for partition {tp}")

        stub.seek = revoked
        assert not put_back(stub, tp, 111, 120)

    asyncio.run(run())


def test_a_partition_held_back_for_its_seek_reports_how_long(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Records held back for an assignment's first seek are handled only once a seek
    comes; the fetch state says since when (``held_s``: the stall watch names the
    partition when it lasts, streams/worker/stall.py), and the seek ends it."""

    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 0)
        consumer, _, handled = _consumer(tmp_path, {tp: 111})
        with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
            await _drain(
                consumer,
                [
                    {tp: _records(topic, 0, range(111, 113))},
                    {tp: _records(topic, 0, range(111, 113))},
                ],
            )
        assert handled == []
        assert [r.getMessage() for r in caplog.records] == []  # (the stall watch's job)
        first = consumer._held_since[tp]
        await asyncio.sleep(0.05)
        await _drain(consumer, [{tp: _records(topic, 0, range(111, 113))}])
        assert consumer._held_since[tp] == first  # since the first batch held back
        await consumer.perform_seek()
        assert consumer._held_since == {}

    asyncio.run(run())


def test_a_later_seek_gives_the_fetch_loop_no_turn_below_what_was_handled(tmp_path: Path) -> None:
    """Between Faust setting the read offset to the committed one and ``perform_seek``
    raising it back to what this assignment handled, nothing else may run: a fetch
    batch handled in that gap is handled twice.  Bounding the seek with ``wait_for``
    (its own task, so one loop turn more) did exactly that: 63 duplicates in a CI run
    of the clean-rebalance test (2026-12-03)."""

    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 0)
        consumer, _app, handled = _consumer(tmp_path, {tp: 111})
        await consumer.perform_seek()
        await _drain(consumer, [{tp: _records(topic, 0, range(111, 130))}])
        assert consumer._read_offset[tp] == 130 and len(handled) == 19
        seen: list[int | None] = []
        seek = consumer.seek_to_committed

        async def seek_then_look() -> dict[TP, int]:
            # the next loop turn: where a fetch batch would be handled
            asyncio.get_running_loop().call_soon(lambda: seen.append(consumer._read_offset[tp]))
            committed: dict[TP, int] = await seek()
            return committed

        consumer.seek_to_committed = seek_then_look
        await consumer.perform_seek()  # a later seek, same assignment (the flow stopped)
        await asyncio.sleep(0)
        assert seen == [130], seen  # (111 with wait_for: 111-129 handled again)
        assert consumer._read_offset[tp] == 130

    asyncio.run(run())


def test_a_seek_that_overlapped_the_assignments_first_one_keeps_what_was_handled(
    tmp_path: Path,
) -> None:
    """Two seeks of one assignment can overlap: the fetch loop's seek back (begun while
    the rebalance had the flow stopped) and the recovery's.  The first to end opens
    the partition, the loop handles a batch, and the second then set the read offset
    back to the committed one: it raised it only for partitions seeked *before it
    began*, none here, so the batch was handled again (12 duplicates in 1 of 45 runs
    of the clean-rebalance test, 2026-12-07: two "seek of generation 2" lines 9 ms
    apart, then the batch from the committed offset a second time)."""

    async def run() -> None:
        topic = "tsg.events"
        tp = TP(topic, 1)
        consumer, _app, handled = _consumer(tmp_path, {tp: 96})
        seek = consumer.seek_to_committed
        gates = [asyncio.Event(), asyncio.Event()]
        calls = 0

        async def held_seek() -> dict[TP, int]:
            nonlocal calls
            gate = gates[calls]
            calls += 1
            await gate.wait()
            committed: dict[TP, int] = await seek()
            return committed

        consumer.seek_to_committed = held_seek
        first = asyncio.ensure_future(consumer.perform_seek())
        await asyncio.sleep(0)
        second = asyncio.ensure_future(consumer.perform_seek())
        await asyncio.sleep(0)
        assert calls == 2  # both under way
        gates[0].set()
        await first
        await _drain(consumer, [{tp: _records(topic, 1, range(96, 108))}])
        assert consumer._read_offset[tp] == 108 and len(handled) == 12
        gates[1].set()
        await second
        assert consumer._read_offset[tp] == 108  # (96 before: 96-107 handled again)
        await _drain(consumer, [{tp: _records(topic, 1, range(96, 110))}])
        assert [o for _, o in handled] == list(range(96, 110))

    asyncio.run(run())
