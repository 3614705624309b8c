"""How the router calls into librdkafka when the broker misbehaves (issue #15, defect 4).

``Router._broker_call`` is exercised with plain callables standing in for the
librdkafka calls (no broker, no client is created: ``Router()`` connects nothing
until ``start()``).  The broker-restart behaviour itself is covered on a real
broker by tests/integration/test_router_broker_restart.py.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.errors import DeliveryError
from streams.router import router as router_mod
from streams.router.router import Router, _Abandoned, _Wedged, _WedgedCommit
from streams.settings import Settings


def _router() -> Router:
    return Router(Settings(bootstrap="127.0.0.1:1", prefix="t"))


def _error(*, retriable: bool = False, abortable: bool = False, fatal: bool = False) -> KafkaError:
    return KafkaError(
        KafkaError._TIMED_OUT if retriable else KafkaError._STATE,
        "test",
        fatal=fatal,
        retriable=retriable,
        txn_requires_abort=abortable,
    )


def test_retriable_errors_are_retried_with_a_short_timeout_each() -> None:
    timeouts: list[float] = []

    def call(timeout: float) -> None:
        timeouts.append(timeout)
        if len(timeouts) < 3:
            raise KafkaException(_error(retriable=True))

    _router()._broker_call("send_offsets_to_transaction", call)
    assert timeouts == [router_mod.CALL_TIMEOUT_S] * 3


@pytest.mark.parametrize(
    "kerr",
    [_error(abortable=True), _error(fatal=True), _error()],
    ids=["abortable", "fatal", "not-retriable"],
)
def test_abortable_fatal_and_other_errors_propagate_at_once(kerr: KafkaError) -> None:
    calls = []

    def call(timeout: float) -> None:
        calls.append(timeout)
        raise KafkaException(kerr)

    with pytest.raises(KafkaException):
        _router()._broker_call("commit_transaction", call)
    assert len(calls) == 1


def test_a_stop_request_ends_retrying() -> None:
    router = _router()
    router.request_stop()

    def call(timeout: float) -> None:
        raise KafkaException(_error(retriable=True))

    with pytest.raises(_Abandoned, match="commit_transaction"):
        router._broker_call("commit_transaction", call)


def test_a_call_that_ignores_its_timeout_is_abandoned_on_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main loop is never stuck inside a blocked call: a stop is seen."""
    monkeypatch.setattr(router_mod, "CALL_TIMEOUT_S", 0.1)
    router = _router()
    release = threading.Event()
    threading.Timer(0.3, router.request_stop).start()
    t0 = time.monotonic()
    with pytest.raises(_Abandoned, match="has not returned"):
        router._broker_call("send_offsets_to_transaction", lambda t: release.wait(30))
    assert time.monotonic() - t0 < 10
    release.set()


def test_a_wedged_call_inside_a_transaction_is_reported_after_three_attempt_timeouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """send_offsets_to_transaction that ignores its timeout (after a broker restart:
    bench_router_restarts.py) is given up after TXN_CALL_WEDGED_S, not WEDGED_S:
    the router then replaces only its producer, and routes again seconds sooner."""
    assert router_mod.TXN_CALL_WEDGED_S == 3 * router_mod.CALL_TIMEOUT_S
    monkeypatch.setattr(router_mod, "WEDGED_S", 30.0)
    monkeypatch.setattr(router_mod, "TXN_CALL_WEDGED_S", 0.3)
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(_Wedged, match="send_offsets_to_transaction has not returned"):
        _router()._broker_call("send_offsets_to_transaction", lambda t: release.wait(30))
    assert time.monotonic() - t0 < 10
    release.set()


def test_init_transactions_keeps_the_longer_wedge_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wedged init_transactions stops the router (nothing left to replace), so it
    is not given up at the short in-transaction limit."""
    monkeypatch.setattr(router_mod, "WEDGED_S", 0.3)
    monkeypatch.setattr(router_mod, "TXN_CALL_WEDGED_S", 30.0)
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(_Wedged, match="init_transactions has not returned"):
        _router()._broker_call("init_transactions", lambda t: release.wait(30), txn=False)
    assert time.monotonic() - t0 < 10
    release.set()


@pytest.mark.parametrize(
    ("what", "kwargs"),
    [("commit_transaction", {}), ("init_transactions", {"txn": False, "direct": True})],
    ids=["commit", "init-direct"],
)
def test_giving_up_after_broker_wait_is_a_loud_delivery_error(
    monkeypatch: pytest.MonkeyPatch, what: str, kwargs: dict[str, bool]
) -> None:
    """Without ``stuck_s`` (every call but the two in a transaction) retriable errors
    wait out BROKER_WAIT_S, then stop the router loudly."""
    monkeypatch.setattr(router_mod, "BROKER_WAIT_S", 0.2)

    def call(timeout: float) -> None:
        time.sleep(0.05)
        raise KafkaException(_error(retriable=True))

    with pytest.raises(DeliveryError, match=r"is the broker at 127\.0\.0\.1:1 up"):
        _router()._broker_call(what, call, **kwargs)  # type: ignore[arg-type]


class _SeekRecorder:
    def __init__(self) -> None:
        self.seeks: list[tuple[str, int, int]] = []

        self.resumed: list[tuple[str, int]] = []

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def resume(self, tps: list[TopicPartition]) -> None:
        self.resumed.extend((tp.topic, tp.partition) for tp in tps)


class _Msg:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._t, self._p, self._o = topic, partition, offset

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> None:
        return None


def test_an_abort_seeks_back_to_the_first_uncommitted_message_without_a_lookup() -> None:
    """Exactly-once abort: every assigned partition that moved since its last
    committed transaction goes back to its first uncommitted message (no
    committed-offset lookup: it does not return during a rebalance); messages
    consumed and dropped after the abort are read again too; partitions no longer
    assigned are left alone; a paused one is resumed (its records are read again)."""
    router = _router()
    consumer = _SeekRecorder()
    router._consumer = consumer  # type: ignore[assignment]
    router._assigned = {TopicPartition("t.session.a", 0), TopicPartition("t.session.b", 0)}
    router._first = {("t.session.a", 0): 10}
    # paused when its session_end committed, while the aborted batch held later records
    router._paused = {("t.session.a", 0): 20}
    dropped = [
        _Msg("t.session.a", 0, 15),  # after the batch's first message: not the target
        _Msg("t.session.b", 0, 7),  # only consumed, never handled: read again
        _Msg("t.session.c", 0, 3),  # revoked meanwhile: not ours to seek
    ]
    router._seek_back(dropped)  # type: ignore[arg-type]
    assert sorted(consumer.seeks) == [("t.session.a", 0, 10), ("t.session.b", 0, 7)]
    assert router._first == {}
    assert consumer.resumed == [("t.session.a", 0)] and router._paused == {}


class _OutdatedOnce(_SeekRecorder):
    """librdkafka's answer when its own pause of the assignment (a rebalance
    beginning) is handled before the seek: the first ``refusals`` seeks of each
    partition are refused unapplied."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals
        self.refused: list[tuple[str, int, int]] = []

    def seek(self, tp: TopicPartition) -> None:
        if sum(1 for r in self.refused if r[:2] == (tp.topic, tp.partition)) < self.refusals:
            self.refused.append((tp.topic, tp.partition, tp.offset))
            raise KafkaException(
                KafkaError(KafkaError._OUTDATED, f"Failed to seek to offset {tp.offset}")
            )
        super().seek(tp)


def test_an_abort_seeks_again_when_librdkafka_refuses_the_seek_as_outdated() -> None:
    """A seek refused ``_OUTDATED`` was not applied: raised out of the loop it stopped
    the router (a chaos run, 2026-12-07); skipped, the partition would go on past
    the aborted batch.  It is made again, with a newer version."""
    router = _router()
    consumer = _OutdatedOnce(refusals=2)
    router._consumer = consumer  # type: ignore[assignment]
    router._assigned = {TopicPartition("t.session.a", 0), TopicPartition("t.session.b", 0)}
    router._first = {("t.session.a", 0): 173, ("t.session.b", 0): 4}
    router._seek_back()
    assert sorted(consumer.seeks) == [("t.session.a", 0, 173), ("t.session.b", 0, 4)]
    assert len(consumer.refused) == 4


def test_a_seek_still_refused_after_every_attempt_or_refused_otherwise_is_raised() -> None:
    router = _router()
    router._consumer = _OutdatedOnce(refusals=router_mod.SEEK_ATTEMPTS)  # type: ignore[assignment]
    router._assigned = {TopicPartition("t.session.a", 0)}
    router._first = {("t.session.a", 0): 173}
    with pytest.raises(KafkaException, match="offset 173"):
        router._seek_back()

    class _Refusing(_SeekRecorder):
        def seek(self, tp: TopicPartition) -> None:
            raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))

    router._consumer = _Refusing()  # type: ignore[assignment]
    router._first = {("t.session.a", 0): 173}
    with pytest.raises(KafkaException, match="Erroneous state"):
        router._seek_back()


class _AsyncCommitConsumer:
    """Stands in for the consumer: records every offset commit, the thread that made
    it and whether it was asynchronous; returns at once, as librdkafka's does."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[tuple[str, int, int]], bool, str]] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.asked.append(
            (
                [(tp.topic, tp.partition, tp.offset) for tp in offsets],
                asynchronous,
                threading.current_thread().name,
            )
        )


class _DeliveredProducer:
    def flush(self, timeout: float) -> int:
        return 0  # everything delivered


def _alos_router() -> tuple[Router, _AsyncCommitConsumer]:
    from streams.router import RouterConfig

    router = Router(
        Settings(bootstrap="127.0.0.1:1", prefix="t"),
        RouterConfig(guarantee="at-least-once", status_interval_s=0, max_consecutive_aborts=3),
    )
    consumer = _AsyncCommitConsumer()
    router._consumer = consumer  # type: ignore[assignment]
    router._producer = _DeliveredProducer()  # type: ignore[assignment]
    router._assigned = {TopicPartition("t.session.a", 0), TopicPartition("t.session.b", 0)}
    return router, consumer


def _tp(topic: str, offset: int) -> TopicPartition:
    return TopicPartition(topic, 0, offset)


def test_an_at_least_once_offset_commit_is_asynchronous_and_made_in_the_loops_thread() -> None:
    """Fails with the synchronous commit in a helper thread it replaces: since
    confluent-kafka 2.16 a Consumer serializes calls across threads, so a commit
    hanging in the helper (minutes, after a broker restart) held the loop's next
    consume() as long, and one made from inside a rebalance callback could not start
    before the callback returned (every revoke waited out the 10 s bound)."""
    router, consumer = _alos_router()
    router._in_txn = True
    router._uncommitted = {("t.session.a", 0): 5}
    router._commit_offsets()
    assert consumer.asked == [([("t.session.a", 0, 5)], True, threading.current_thread().name)]
    assert router._uncommitted == {} and router._sent == {("t.session.a", 0): 5}
    assert not router._in_txn  # the batch was delivered: it is done
    assert router.stats().offset_commits == 0  # not before its answer
    blocked = router.stats().commit_s
    time.sleep(0.01)
    router._on_offsets_answer(router._consumer_gen, None, [_tp("t.session.a", 5)])
    assert router.stats().offset_commits == 1 and router._sent == {}
    assert router.stats().commit_s == blocked  # the loop did not wait for the answer


def test_a_refused_offset_commit_goes_back_to_the_uncommitted_offsets() -> None:
    """Refused: the next commit covers the offsets, unless a newer offset of the
    partition is waiting or sent already, or the partition is no longer held."""
    router, _ = _alos_router()
    router._in_txn = True
    router._uncommitted = {("t.session.a", 0): 5, ("t.session.b", 0): 3, ("t.session.c", 0): 1}
    router._commit_offsets()
    router._uncommitted = {("t.session.b", 0): 4}  # b moved on meanwhile
    refused = KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rejoining")
    router._on_offsets_answer(
        router._consumer_gen,
        refused,
        [_tp("t.session.a", 5), _tp("t.session.b", 3), _tp("t.session.c", 1)],
    )
    # c is not held any more: its next owner re-reads from the last committed offset
    assert router._uncommitted == {("t.session.a", 0): 5, ("t.session.b", 0): 4}
    assert router.stats().failed_commits == 1 and router._sent == {}
    assert router._commit_failure is None and router._consumer_fenced is None


def test_one_periodic_offset_commit_in_flight_at_a_time() -> None:
    """Fails with a commit sent every batch: librdkafka holds a cooperative
    rebalance's rejoin while a commit of the consumer is in flight, and commits sent
    faster than they were answered kept it held (the group refused every commit with
    ILLEGAL_GENERATION until the router gave up).  A revoke's commit is not held."""
    router, consumer = _alos_router()
    router._in_txn = True
    router._uncommitted = {("t.session.a", 0): 5}
    router._commit_offsets()
    router._in_txn = True
    router._uncommitted = {("t.session.a", 0): 9, ("t.session.b", 0): 2}
    router._commit_offsets(periodic=True)  # held: 5 awaits its answer
    assert [offsets for offsets, _, _ in consumer.asked] == [[("t.session.a", 0, 5)]]
    assert router._uncommitted == {("t.session.a", 0): 9, ("t.session.b", 0): 2}
    assert not router._in_txn  # (delivered all the same)
    # refused: 9, waiting, covers 5
    router._on_offsets_answer(
        router._consumer_gen, KafkaError(KafkaError._TIMED_OUT), [_tp("t.session.a", 5)]
    )
    assert router._uncommitted == {("t.session.a", 0): 9, ("t.session.b", 0): 2}
    assert router._sent == {}
    router._commit_offsets(periodic=True)  # answered: the next commit goes
    assert consumer.asked[-1][0] == [("t.session.a", 0, 9), ("t.session.b", 0, 2)]
    router._uncommitted = {("t.session.b", 0): 3}
    router._commit_offsets()  # (on_revoke, a stop): sent although 9 awaits its answer
    assert consumer.asked[-1][0] == [("t.session.b", 0, 3)]
    assert router._sent == {("t.session.a", 0): 9, ("t.session.b", 0): 3}


def test_answers_of_a_replaced_consumer_are_ignored() -> None:
    router, _ = _alos_router()
    router._on_offsets_answer(
        router._consumer_gen - 1, KafkaError(KafkaError._TIMED_OUT), [_tp("t.session.a", 5)]
    )
    assert router._uncommitted == {} and router.stats().failed_commits == 0


def test_a_fenced_or_repeatedly_refused_offset_commit_is_raised_by_the_loop_not_the_callback() -> (
    None
):
    router, _ = _alos_router()
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced (test)")
    router._on_offsets_answer(router._consumer_gen, fenced, [_tp("t.session.a", 5)])
    assert router._consumer_fenced is not None and "fenced" in router._consumer_fenced
    router._consumer_fenced = None
    refused = KafkaError(KafkaError.ILLEGAL_GENERATION, "fenced generation")
    for _ in range(2):
        router._on_offsets_answer(router._consumer_gen, refused, [_tp("t.session.a", 5)])
    assert router._commit_failure is not None
    assert "3 offset commits in a row were refused" in str(router._commit_failure)


def test_a_refusal_names_the_generation_and_member_its_offsets_were_sent_with() -> None:
    """librdkafka's serialized consumer_group_metadata() (what confluent-kafka hands
    over), read for the log line of a transaction refused with ILLEGAL_GENERATION."""
    from streams.router.router import describe_group_metadata

    gen = (7).to_bytes(4, sys.byteorder, signed=True)
    static = b"CGMDv2:" + gen + b"chaos.router\0chaos.router.0-abc\0\0chaos.router.0\0"
    assert describe_group_metadata(static) == (
        "generation 7, member chaos.router.0-abc, instance chaos.router.0"
    )
    unjoined = b"CGMDv2:" + (-1).to_bytes(4, sys.byteorder, signed=True) + b"g\0\0\x01"
    assert describe_group_metadata(unjoined) == "generation -1, member -, instance -"
    assert describe_group_metadata(None) == "group metadata None"  # never raises
    assert "generation 7" in describe_group_metadata(b"CGMDv2:" + gen + b"truncated")
    refusal = Router._refusal(KafkaError(KafkaError.ILLEGAL_GENERATION, "refused"), static)
    assert "(offsets sent with generation 7, member chaos.router.0-abc" in refusal
    other = KafkaError(KafkaError._TIMED_OUT, "slow")
    assert Router._refusal(other, static) == str(other)  # only group errors add it


def test_a_stall_is_partitions_behind_at_two_checks_in_a_row() -> None:
    from streams.router.router import plan_stall

    a, b, c, d = ("t.a", 0), ("t.b", 0), ("t.c", 0), ("t.d", 0)
    committed = {a: 5, b: 7, d: 3}  # c: nothing committed yet (earliest: 0)
    positions = {a: -1001, b: 7, c: -1001, d: 9}
    ends = {a: 9, b: 7, c: 4, d: 9}
    first = plan_stall(committed, positions, ends, frozenset())
    # a: records past committed, not read; c: never committed, records there;
    # b: caught up; d: committed behind (a refused commit) but read to the end
    assert set(first.behind) == {a, c}
    assert first.behind[a] == (5, -1001, 9) and first.behind[c] == (-1, -1001, 4)
    assert not first.restart  # one check may fall between an assignment and its fetch
    second = plan_stall(committed, positions, ends, first.suspects)
    assert second.restart and second.stale == {a, c}
    # caught up meanwhile: nothing to do, and nothing remembered
    done = plan_stall({a: 9, c: 4}, positions, {a: 9, c: 4}, first.suspects)
    assert not done.restart and done.suspects == frozenset()
    # an empty partition with no committed offset is not behind
    assert plan_stall({}, {}, {c: 0}, frozenset({c})).behind == {}


def test_a_transaction_call_that_keeps_timing_out_is_wedged_after_txn_stuck_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """commit_transaction answering ``_TIMED_OUT`` attempt after attempt (its EndTxn
    stuck in librdkafka's out-queue after a broker restart) is given up after
    TXN_STUCK_S as wedged, so the producer is replaced, long before BROKER_WAIT_S."""
    monkeypatch.setattr(router_mod, "CALL_TIMEOUT_S", 0.01)
    monkeypatch.setattr(router_mod, "BROKER_WAIT_S", 30.0)
    calls: list[float] = []

    def call(timeout: float) -> None:
        calls.append(timeout)
        time.sleep(0.02)
        raise KafkaException(_error(retriable=True))

    t0 = time.monotonic()
    with pytest.raises(_Wedged, match=r"commit_transaction kept failing for \d+ s"):
        _router()._broker_call("commit_transaction", call, direct=True, stuck_s=0.3)
    assert 0.3 <= time.monotonic() - t0 < 10
    assert len(calls) > 1  # retried until then


class _StuckTxnProducer:
    """``send_offsets_to_transaction`` or ``commit_transaction`` answering
    ``_TIMED_OUT`` at every attempt (the other call succeeds)."""

    def __init__(self, stuck: str) -> None:
        self.stuck = stuck

    def _attempt(self, name: str) -> None:
        time.sleep(0.02)
        if name == self.stuck:
            raise KafkaException(_error(retriable=True))

    def send_offsets_to_transaction(self, positions: object, metadata: object, t: float) -> None:
        self._attempt("send_offsets_to_transaction")

    def commit_transaction(self, t: float) -> None:
        self._attempt("commit_transaction")


@pytest.mark.parametrize(
    ("stuck", "unknown"),
    [("send_offsets_to_transaction", False), ("commit_transaction", True)],
)
def test_only_a_given_up_commit_transaction_has_an_unknown_outcome(
    monkeypatch: pytest.MonkeyPatch, stuck: str, unknown: bool
) -> None:
    """A given-up commit_transaction may have committed (_WedgedCommit: the router
    then resumes from the committed offsets); a given-up send_offsets_to_transaction
    never reached the commit, so its batch is certainly aborted (plain _Wedged: the
    router rewinds to the batch's first message, with no broker call)."""
    monkeypatch.setattr(router_mod, "CALL_TIMEOUT_S", 0.01)
    monkeypatch.setattr(router_mod, "TXN_STUCK_S", 0.2)
    router = _router()
    router._producer = _StuckTxnProducer(stuck)  # type: ignore[assignment]
    with pytest.raises(_Wedged, match=stuck) as info:
        router._transaction_calls([TopicPartition("t.session.a", 0, 5)], object(), direct=True)
    assert isinstance(info.value, _WedgedCommit) is unknown


class _Replacement:
    """The producer ``_replace_producer`` builds (its init_transactions succeeds)."""

    def __init__(self, conf: object) -> None:
        pass

    def init_transactions(self, t: float) -> None:
        pass


class _QueueConsumer(_SeekRecorder):
    def __init__(self) -> None:
        super().__init__()
        self.queued: list[_Msg] = []

    def consume(self, num_messages: int, timeout: float) -> list[_Msg]:
        out, self.queued = self.queued, []
        return out

    def poll(self, timeout: float) -> None:
        return None


def test_after_a_commit_with_an_unknown_outcome_the_loop_replaces_the_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No seek back to the batch's first message (that batch may have committed:
    it would be routed twice), no look-up in the loop either: the step drops what
    it consumed and ends by replacing the consumer, uncounted (no sign of a
    duplicate instance id), which resumes from the committed offsets.  A batch
    aborted for sure (no unknown outcome) is still rewound at once."""
    monkeypatch.setattr(router_mod, "Producer", _Replacement)
    router = _router()
    consumer = _QueueConsumer()
    router._consumer = consumer  # type: ignore[assignment]
    router._assigned = {TopicPartition("t.session.a", 0)}
    router._next_stall_check = float("inf")  # (no stall check: it asks the broker)
    router._first = {("t.session.a", 0): 10}
    router._txn_msgs = 40
    router._replace_producer("commit_transaction has not returned", unknown=40)
    assert consumer.seeks == []
    assert router._commit_unknown == "commit_transaction has not returned"
    stats = router.stats()
    assert (stats.unknown_commits, stats.unknown_messages, stats.aborts) == (1, 40, 0)

    restarts: list[tuple[str, str, bool]] = []
    monkeypatch.setattr(
        router,
        "_restart_consumer",
        lambda why, reason, counted=True: restarts.append((why, reason, counted)),
    )
    routed: list[list[object]] = []
    monkeypatch.setattr(router, "_route", lambda msgs: routed.append(list(msgs)))
    consumer.queued = [_Msg("t.session.a", 0, 50)]  # consumed past the batch
    assert router._step(None, router.config)
    assert routed == [[]]  # dropped: the new consumer reads it again
    assert restarts == [("commit_transaction has not returned", "commit_unknown", False)]

    router._first = {("t.session.a", 0): 10}
    router._txn_msgs = 40
    router._replace_producer("send_offsets_to_transaction has not returned")
    assert consumer.seeks == [("t.session.a", 0, 10)]


def test_a_produce_refused_for_a_transaction_that_failed_meanwhile_is_abortable() -> None:
    """An earlier record's ProduceRequest refused (a dead letter too large for the
    DLQ) fails the open transaction, and librdkafka refuses every later produce of
    it with ``_STATE``.  When that answer came back before the batch's last
    produce() call, the router stopped on a "fatal" produce error (a fresh-clone CI
    run, test_refused_dead_letter_aborts_then_gives_up_loudly_then_recovers); it is
    an abort like the refusal itself.  Outside an open transaction, or fatal, it
    still stops the router."""
    from streams.router.router import _AbortableProduce

    state = KafkaException(
        KafkaError(KafkaError._STATE, "Unable to produce message: Local: Erroneous state")
    )
    router = _router()
    router._txn_open = True
    assert isinstance(router._produce_error("t.events", state), _AbortableProduce)
    fatal = KafkaException(KafkaError(KafkaError._STATE, "fenced", fatal=True))
    assert isinstance(router._produce_error("t.events", fatal), DeliveryError)
    router = _router()
    router._txn_open = False
    assert isinstance(router._produce_error("t.events", state), DeliveryError)
