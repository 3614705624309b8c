"""The Faust application: the one module of the project that imports Faust.

``create_app(settings)`` builds a fresh app (never at import time: settings,
store and ports differ per process and per test).  It declares

* the source topic ``<prefix>.events`` (key = session id, value = Avro bytes,
  both ``raw``: we decode ourselves, so a bad message goes to ``<prefix>.dlq``
  with a reason instead of crashing the agent);
* three changelog-backed tables with raw-bytes values (``streams.worker.state``
  encodes/decodes them canonically): ``sessions`` (per-session counters),
  ``budgets`` (latest budget + tokens since) and ``minutes`` (tool calls and
  errors per session per event-time minute, keyed ``<session_id>@<minute_start_ms>``;
  see docs/faust-notes.md for why this is not a Faust windowed table);
* one agent with ``concurrency=1`` (Faust may commit past unprocessed messages
  with more) that applies each event exactly once via
  :class:`~streams.worker.processor.EventProcessor`;
* read-only web views and ``/metrics`` (``streams.worker.web``, ``streams.worker.metrics``).

Co-partitioning invariant: the tables have exactly as many partitions as
``<prefix>.events`` and are keyed by session id, so a session's table rows live
in the partition its events arrive on.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import faust
from aiokafka.errors import IllegalStateError  # type: ignore[import-untyped]
from faust.exceptions import ProducerSendError
from faust.tables.manager import TableManager as _TableManager
from faust.tables.recovery import Recovery as _Recovery
from faust.tables.recovery import ServiceStopped as _ServiceStopped
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as _aiokafka_driver
from faust.types import TP

from streams.core.events import TraceEvent
from streams.errors import (
    BrokerError,
    ConfigError,
    DeliveryError,
    FlushError,
    InternalError,
    RecoveryTimeoutError,
    SeekTimeoutError,
)
from streams.settings import Settings
from streams.topics import changelog_topic as _changelog_topic
from streams.topics import uncovered_partitions, worker_app_id, worker_output_topics
from streams.worker.batch import EventBatchHandler
from streams.worker.config import (
    BROKER_REQUEST_TIMEOUT_S,
    DEFAULT_SEEK_TIMEOUT_S,
    STORES,
    WorkerConfig,
)
from streams.worker.metrics import WorkerMetrics
from streams.worker.outputs import OutputEncoder
from streams.worker.processor import EventProcessor, PendingWrite, TableWrite
from streams.worker.stall import FetchReport, PartitionFetch, StallWatch
from streams.worker.state import SessionCounters
from streams.worker.web import key_partition, key_str, register_views

log = logging.getLogger(__name__)
#: "no entry" in a snapshot of ``Consumer._committed_offset`` (a defaultdict: a
#: missing key and a None value differ there)
_ABSENT: Any = object()

SESSIONS_TABLE = "sessions"
BUDGETS_TABLE = "budgets"
MINUTES_TABLE = "minutes"
ENGINES_TABLE = "engines"

Decoder = Callable[[bytes], TraceEvent]

#: Names a file: the worker then writes its timing trace there (:class:`TailTrace`).
TRACE_ENV = "TRAJECTORY_WORKER_TRACE"


class TailTrace:
    """Where an event's milliseconds go inside the worker (issue #12), one JSON line
    per observation, to the file ``$TRAJECTORY_WORKER_TRACE`` names; off (``None``,
    one attribute test per fetch and per commit) unless that variable is set.

    Lines (``t``: wall ms when written, ``k``: kind):

    * ``fetch``: a fetch handed to the batch handler; ``n`` events, ``ts0``/``ts1``
      the oldest/newest record timestamp (the SDK's publish time), ``ms`` the
      handler's time; ``t - ts0`` is publish -> in the worker.
    * ``flush``: a commit: ``snap_ms`` (engine snapshots, sliced), ``write_ms``
      (encode + producer flush + store writes), ``commit_ms`` (offset commit),
      ``values``.
    * ``gc``: a collection of at least 1 ms: ``gen``, ``ms``, ``cpu`` (the thread's
      CPU ms meanwhile: ``ms`` much above ``cpu`` is time the OS gave other processes).
    * ``slow``: an event loop callback that held its thread at least 5 ms: ``ms``,
      ``cpu`` (as for ``gc``), ``cb`` (the task's await chain or the callback),
      ``th`` (thread name; Faust's consumer runs aiokafka on a thread of its own).
    * ``lag``: a 10 ms sleep on the main loop that woke at least 2 ms late (``ms``):
      whatever held the loop (ours, GC, or the CPU given to other processes).

    Writing costs a few microseconds per line; lines are few (slow things only).
    """

    SLOW_S = 0.005
    LAG_S = 0.002
    GC_S = 0.001

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1 << 16)  # noqa: SIM115 (process lifetime)
        self._lock = threading.Lock()
        self._gc_t0 = self._gc_c0 = 0.0

    @classmethod
    def from_env(cls) -> TailTrace | None:
        path = os.environ.get(TRACE_ENV)
        return cls(path) if path else None

    def emit(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"k": kind, "t": round(time.time() * 1000, 1), **fields})
        with self._lock:
            self._file.write(line + "\n")

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def install(self) -> None:
        """Hook GC and every event loop callback of the process (all threads)."""
        gc.callbacks.append(self._on_gc)
        handle_run = asyncio.events.Handle._run
        trace = self

        def _run(handle: asyncio.events.Handle) -> None:
            t0, c0 = time.perf_counter(), time.thread_time()
            handle_run(handle)
            held = time.perf_counter() - t0
            if held >= trace.SLOW_S:
                cpu = time.thread_time() - c0
                cb = getattr(handle, "_callback", None)
                task = getattr(cb, "__self__", None)
                if isinstance(task, asyncio.Task):
                    # the await chain where the task stopped: names the wrapped
                    # coroutine of mode's Service._execute_task and the like
                    names: list[str] = []
                    coro: Any = task.get_coro()
                    while coro is not None and len(names) < 6:
                        names.append(getattr(coro, "__qualname__", type(coro).__name__))
                        coro = getattr(coro, "cr_await", None)
                    name = ">".join(names)
                else:
                    name = getattr(cb, "__qualname__", repr(cb))
                trace.emit(
                    "slow",
                    ms=round(held * 1000, 2),
                    cpu=round(cpu * 1000, 2),
                    cb=name,
                    th=threading.current_thread().name,
                )

        asyncio.events.Handle._run = _run  # type: ignore[method-assign,assignment]

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0, self._gc_c0 = time.perf_counter(), time.thread_time()
            return
        took = time.perf_counter() - self._gc_t0
        if took >= self.GC_S:
            self.emit(
                "gc",
                gen=info["generation"],
                ms=round(took * 1000, 2),
                cpu=round((time.thread_time() - self._gc_c0) * 1000, 2),
                th=threading.current_thread().name,
            )

    async def loop_lag(self) -> None:
        """Sleep 10 ms forever; note how late each wake-up is (main loop)."""
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            late = time.perf_counter() - t0 - 0.01
            if late >= self.LAG_S:
                self.emit("lag", ms=round(late * 1000, 2))


_TRACE: TailTrace | None = None


def app_id(settings: Settings) -> str:
    """Faust app id; it prefixes the changelog topics (``<app_id>-<table>-changelog``).
    The names are owned by :mod:`streams.topics`, which creates those topics."""
    return worker_app_id(settings)


def changelog_topic(settings: Settings, table: str) -> str:
    return _changelog_topic(settings, table)


def broker_urls(bootstrap: str) -> str:
    """``host:port,host:port`` -> Faust's ``kafka://host:port;kafka://host:port``."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("bootstrap", "empty; give host:port[,host:port...]")
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


def _default_decoder(settings: Settings) -> Decoder:
    """The serde the SDK publishes with: Confluent framing when a registry is set."""
    from streams.serde import EventSerde

    framing = "confluent" if settings.schema_registry_url else "single-object"
    serde = EventSerde(
        framing, registry=settings.schema_registry_url, max_bytes=settings.max_message_bytes
    )
    decode: Decoder = serde.decode
    return decode


class _ReadCommittedConsumerThread(_aiokafka_driver.AIOKafkaConsumerThread):
    """Faust reads ``read_uncommitted`` unless it runs its own transactions
    (``processing_guarantee="exactly_once"``); the router writes <prefix>.events
    in transactions, so without this the worker would also see aborted batches.
    aiokafka reads ``_isolation_level`` when the consumer starts (its Fetcher).

    Faust also hard-codes ``fetch_max_wait_ms=1500`` for the worker consumer: at a
    low event rate every fetch then waits up to 1.5 s for more data before
    returning, which is latency an agent waiting for its assessment pays.  50 ms
    keeps fetches cheap and the pipeline responsive (measured: docs/faust-notes.md
    "Measured costs behind the worker's code").
    """

    FETCH_MAX_WAIT_MS = 50

    #: where the last fetch left each partition it returned records of (aiokafka's
    #: fetch position, read in this thread as the fetch returns): see take_fetched_to
    _fetched_to: dict[Any, int | None] | None = None

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        consumer._fetch_max_wait_ms = self.FETCH_MAX_WAIT_MS
        return consumer

    async def _fetch_records(
        self,
        consumer: Any,
        active_partitions: Any,
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Any:
        """Faust's fetch, and the fetch position of each partition it returned.

        Why: a batch the fetch loop does not handle is put back to its first record
        only if the position is still where the fetch left it (``put_back``: else a
        seek moved it since).  That is one past the batch's last record only when no
        transaction marker follows it; read_committed, aiokafka steps over the
        router's commit markers, so after a batch that ends a transaction the
        position is further on.  Assuming "one past the last record" there, the
        batch was dropped instead of fetched again: a restarted worker lost the
        first event a brand-new session sent just after it started
        (``tests/integration/test_ingest_acceptance.py``, 11 of 13 runs against a
        long-running broker; docs/guarantees.md "A batch held back is put back even
        when a transaction marker follows it").
        """
        records = await super()._fetch_records(
            consumer, active_partitions, timeout=timeout, max_records=max_records
        )
        self._fetched_to = {tp: fetch_position(consumer, tp) for tp in records}
        return records

    def take_fetched_to(self) -> dict[Any, int | None]:
        """The positions :meth:`_fetch_records` saw at its last return (then none)."""
        got, self._fetched_to = self._fetched_to, None
        return got or {}


class _Seeks(Protocol):
    async def perform_seek(self) -> None: ...


def _partition_state(kafka: Any, tp: Any) -> Any:
    """aiokafka's ``TopicPartitionState`` of ``tp`` in consumer ``kafka``, or None: no
    subscription or assignment yet, or ``tp`` not assigned.  Nothing is caught:
    another shape of aiokafka's internals (an upgrade) raises here
    (``tests/unit/worker/test_seek_gate.py`` reads the real structures)."""
    subscription = kafka._subscription.subscription
    if subscription is None or subscription.assignment is None:
        return None
    return subscription.assignment.state_value(tp)


def fetch_position(kafka: Any, tp: Any) -> int | None:
    """aiokafka's fetch position of ``tp`` in consumer ``kafka``, or None: not
    assigned (:func:`_partition_state`), or no position (a reset pending, e.g.
    right after a reassignment).

    aiokafka's ``TopicPartitionState.position`` *asserts* that there is one: read
    without ``has_valid_position`` first, a batch held back just as its partition
    was reassigned would raise AssertionError out of the fetch loop, rather than
    put it back."""
    state = _partition_state(kafka, tp)
    if state is None or not state.has_valid_position:
        return None
    position: int = state.position
    return position


def partition_flags(kafka: Any, tp: Any) -> tuple[int | None, bool]:
    """``(high watermark, paused)`` of ``tp`` in aiokafka consumer ``kafka`` (None,
    False when it is not assigned there: :func:`_partition_state`)."""
    state = _partition_state(kafka, tp)
    if state is None:
        return None, False
    highwater: int | None = state.highwater
    return highwater, bool(state.paused)


def put_back(kafka: Any, tp: Any, first: int, after: int) -> bool:
    """Seek ``tp`` to ``first`` if its fetch position in ``kafka`` is ``after`` (one
    past a batch taken and not handled); True if it did.

    Called from the worker's thread, as Faust's own ``seek`` is.  A revoke in the
    consumer thread between the check and the seek makes aiokafka's seek raise
    ``IllegalStateError`` (no current assignment): the partition is no longer this
    worker's and the next assignment seeks it, so that is logged and not a failure.
    (Running this in the consumer thread through ``call_thread`` instead, as on
    2026-12-03 for a few hours, was followed by a chaos run whose restarted worker
    applied nothing more: a wait on that thread's method queue from the fetch loop
    can join a cycle with a rebalance; not proven, and undone.)"""
    if fetch_position(kafka, tp) != after:
        return False
    try:
        kafka.seek(tp, first)
    except IllegalStateError as exc:
        log.info("%s[%d]: not put back to %d: %s", tp.topic, tp.partition, first, exc)
        return False
    return True


async def seek_back_mid_rebalance(consumer: _Seeks) -> bool:
    """The fetch loop's seek back to the committed offsets while the flow is stopped
    (a rebalance is under way); False when the rebalance revoked a partition under it.

    Why: aiokafka's ``seek_to_committed`` lists the assigned partitions, then awaits
    each one's committed offset; a revocation in between makes its ``seek_to`` raise
    ``IllegalStateError("No current assignment for partition ...")``.  That crashed the
    worker (a CI run, 2026-11-24: the second worker of a group stopped while the
    first was seeking).  Faust's own ``getmany`` logs and carries on here; so does
    this, for that error only: nothing was handled from the revoked partition, and
    the assignment that follows seeks every partition it gives to its committed
    offset again (``Recovery``: "Seek stream partitions to committed offsets").  Any
    other error still stops the worker.
    """
    try:
        await consumer.perform_seek()
    except IllegalStateError as exc:
        log.warning(
            "seek back to the committed offsets during a rebalance: %s; the next "
            "assignment seeks its partitions again",
            exc,
        )
        return False
    return True


class _ReadCommittedConsumer(_aiokafka_driver.Consumer):
    """The worker's consumer: read_committed, batches of events to the batch handler,
    and the write-behind state flushed before every offset commit."""

    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: ``<prefix>.events`` partitions whose fetch position a seek to the committed
        #: offsets set in their current assignment (:meth:`perform_seek`), each with
        #: the number of the seek that did (``_seek_round``): the fetch loop hands the
        #: handler no record fetched before that seek ended.  Emptied at a revoke.
        self._seeked: dict[Any, int] = {}
        self._seek_round = 0
        #: ``<prefix>.events`` partition -> first offset of the records held back
        #: before its assignment's first seek (:meth:`_hold_back`), to name at that
        #: seek the ones fetched from past the committed offset (the 2026-12-02 loss)
        self._held_from: dict[Any, int] = {}
        #: ``<prefix>.events`` partition -> when a batch of it was first held back
        #: waiting for its assignment's first seek (:meth:`_hold_back`; reported by
        #: :meth:`fetch_report`, named by the stall watch when it lasts)
        self._held_since: dict[Any, float] = {}
        #: monotonic start of the batch in the handler / of the seek under way (None:
        #: none), for :meth:`fetch_report`
        self._batch_since: float | None = None
        self._seek_since: float | None = None

    async def perform_seek(self) -> None:
        """Faust's seek to the committed offsets, never behind what this worker handled.

        Two ways events were handled twice or lost around a rebalance:

        * (issue #15: 203 and 2,250 duplicates after rebalances) after an
          assignment Faust resumes the partitions and the flow *before* it awaits
          this seek (``Recovery.on_recovery_completed``, ``_resume_streams``), and
          the fetch loop also seeks back whenever it finds the flow stopped.
          Records handled meanwhile were handled again after the seek.
        * (2026-12-02, 2 runs in ~45 of the clean-rebalance test) what the fetcher
          returned before that first seek did not start at the committed offset:
          newly assigned partitions were fetched from the end of the log (records
          produced ~0 s before), e.g. from offset 120 with 111 committed.  Handled,
          they made 120 committable; the seek then moved the read offset up to it,
          so 111-119 were dropped, and the commit (held back to the first event a
          waiting session had not written: 120) went past them.  Every session of
          the partition lost those events.

        Invariants, for ``<prefix>.events``: the fetch loop hands the handler no
        record fetched before a seek of the partition's current assignment ended
        (``_seeked``, ``_seek_round``), so the first record handled in an
        assignment is the committed one, and a batch it holds back is fetched again
        (:meth:`_hold_back`); ``_read_offset[tp]`` is the next offset to handle and never
        goes below one past the last record handled since that seek (a later seek,
        within the same assignment, raises it to ``EventBatchHandler.committable``,
        also one that began before the first had ended; the committable offsets of
        an earlier assignment are never used): the fetch
        loop drops any record below it, so none is handled twice and none skipped.
        """
        handler = self._handler
        if handler is None:
            await self._bounded_seek()
            return
        generation = self.app.consumer_generation_id
        await self._bounded_seek()
        self._seek_round += 1
        read_offset = self._read_offset
        log.info(
            "seek of generation %s to the committed offsets: %s",
            generation,
            {tp.partition: read_offset.get(tp) for tp in read_offset if tp.topic == handler.topic},
        )
        # Every partition a seek of its current assignment has opened *by now*, not
        # only those opened before this seek began: two seeks can overlap (the fetch
        # loop's seek back, begun while a rebalance had the flow stopped, and the
        # recovery's), and a batch handled after the first one ended was handled
        # again after the second (12 duplicates in a run of the clean-rebalance test,
        # 2026-12-07).  A revoke empties ``_seeked`` and the handler's committable
        # offsets alike, so none of an earlier assignment is used.
        for tp in list(self._seeked):
            nxt = handler.committable(tp.topic, tp.partition)
            current = read_offset[tp]
            if nxt is not None and (current is None or current < nxt):
                read_offset[tp] = nxt
        if self.app.consumer_generation_id == generation:
            # (a rebalance under the seek: the next assignment's seek positions them)
            for tp in self.assignment():
                if tp.topic == handler.topic and tp not in self._seeked:
                    self._seeked[tp] = self._seek_round
                    self._report_held(tp, read_offset.get(tp))

    async def _bounded_seek(self) -> None:
        """Faust's seek to the committed offsets, given up after ``app.seek_timeout_s``:
        then CRITICAL, the app crashes and :class:`SeekTimeoutError` is raised.

        Why: Faust's recovery awaits this seek for ``broker_request_timeout`` and,
        when that runs out, ends recovery *silently and for good* (``Recovery._wait``
        raises ``ServiceStopped``, its loop ``break``s): the worker stayed up, with
        flow, timers and HTTP never resumed, and applied nothing (reproduced by
        holding the offset fetch 130 s; tests/integration/test_worker_stall.py).  A
        crash is safe there: nothing of the assignment is handled before its seek,
        and a restart (static membership: the same partitions) seeks again.  Not
        retried in-process: the stuck offset fetch keeps one of the consumer
        thread's two method-queue workers, and a second would take the other, which
        every commit needs.
        """
        timeout_s = float(getattr(self.app, "seek_timeout_s", DEFAULT_SEEK_TIMEOUT_S))
        started = self._seek_since = time.monotonic()
        try:
            # ``asyncio.timeout``, not ``wait_for``: the seek must run in this task.
            # ``wait_for`` runs it in a task of its own, and the loop then takes a
            # turn between Faust setting ``_read_offset`` to the committed offsets and
            # :meth:`perform_seek` raising it back to what was handled: the fetch
            # loop handled records again in that gap (63 duplicates in a fresh-clone
            # CI run of the clean-rebalance test, 2026-12-03; test_seek_gate.py).
            async with asyncio.timeout(timeout_s):
                await super().perform_seek()
        except TimeoutError:
            events = self._handler.topic if self._handler is not None else None
            exc = SeekTimeoutError(
                sorted(
                    ((tp.topic, tp.partition) for tp in self.assignment()),
                    key=lambda tp: (tp[0] != events, tp),
                ),
                time.monotonic() - started,
                "--seek-timeout",
            )
            log.critical("%s", exc)
            await self.app.crash(exc)
            raise exc from None
        finally:
            self._seek_since = None

    def _report_held(self, tp: Any, committed: int | None) -> None:
        """At the first seek of ``tp``'s assignment: say so if records fetched before
        it started past the committed offset (they were held back, not handled).
        The likely cause, a paused partition's batch dropped without going back, is
        fixed (docs/guarantees.md "A paused partition's records are fetched
        again"); an occurrence now would mean another one."""
        held = self._held_from.pop(tp, None)
        self._held_since.pop(tp, None)
        if held is not None and committed is not None and held > committed:
            log.warning(
                "%s[%d]: the fetcher returned records from offset %d, past the committed "
                "offset %d, before the assignment's seek; not handled, read again from "
                "%d (docs/guarantees.md: no record is handled before its assignment's seek)",
                tp.topic,
                tp.partition,
                held,
                committed,
                committed,
            )

    def _hold_back(self, tp: Any, batch: Sequence[Any], fetched_to: int | None = None) -> None:
        """A batch of ``tp`` the loop does not handle (fetched before its assignment's
        seek, or while ``tp`` was paused): put the fetch position back to its first
        record unless a seek moved it since the batch was taken (then that seek's
        position holds).  Its records are then fetched again, never skipped: in a run
        of the clean-rebalance test a batch fetched *after* the seek, from the
        committed offset, arrived before the seek had returned here, and dropping it
        lost 3 events per session.

        ``fetched_to``: where the fetch left the position (``take_fetched_to``); one
        past the last record when unknown, which is wrong after a transaction marker
        (see ``_ReadCommittedConsumerThread._fetch_records``)."""
        if tp not in self._seeked:
            self._held_from.setdefault(tp, batch[0].offset)
            # (the stall watch names a partition held back too long, with the
            # worker's whole fetch state: fetch_report's held_s)
            self._held_since.setdefault(tp, time.monotonic())
        after = batch[-1].offset + 1 if fetched_to is None else fetched_to
        self._put_back(tp, batch[0].offset, after)

    def _take_fetched_to(self) -> dict[Any, int | None]:
        """Where the last fetch left each partition it returned (the consumer thread's
        :meth:`_ReadCommittedConsumerThread.take_fetched_to`; empty if unknown)."""
        take = getattr(self._thread, "take_fetched_to", None)
        return {} if take is None else take()

    def _put_back(self, tp: Any, first: int, after: int) -> None:
        """Seek ``tp`` to ``first`` if its fetch position is still ``after``
        (:func:`put_back` on this worker's aiokafka consumer)."""
        put_back(self._thread._ensure_consumer(), tp, first, after)

    @property
    def _handler(self) -> EventBatchHandler | None:
        handler: EventBatchHandler | None = getattr(self.app, "batch_handler", None)
        return handler

    # ---------------------------------------------------------------- fetching

    def _still_current(self, generation: int) -> bool:
        """Whether records fetched in consumer generation ``generation`` may still be
        handled: the flow is on and no rebalance began since."""
        return bool(self.flow_active) and self.app.consumer_generation_id == generation

    async def _drain_messages(self, fetcher: Any) -> None:
        """Faust's fetch loop, with ``<prefix>.events`` batches going to the handler.

        A record of the events topic below ``_read_offset`` (the next offset to
        handle) is dropped: a seek back to the committed offset re-fetches records
        this worker already handled (:meth:`perform_seek`).

        Faust's own loop turns every record into a ``ConsumerMessage`` and runs the
        conductor callback in ``wait_first`` (two tasks per message), then a channel
        queue, an agent stream and an ack per event (docs/faust-notes.md, "Agents").
        Here each fetched
        partition batch of the events topic goes to
        :meth:`EventBatchHandler.handle` in one call; the handler reports the
        committable offset.  Records of any other topic (the table changelogs
        during recovery) still take Faust's per-message path.
        """
        handler = self._handler
        if handler is None:
            await super()._drain_messages(fetcher)
            return
        handler_topic = handler.topic
        callback = self.callback
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        read_offset = self._read_offset
        seeked = self._seeked
        monitor = self.app.monitor
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                fetched_at = self._seek_round  # (the seeks ended before this fetch)
                records, active = await self._wait_next_records(1.0)
                fetched_to = self._take_fetched_to()
                await self.sleep(0)
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:
                    # Faust's getmany: flow stopped mid-rebalance -> seek back to committed
                    await seek_back_mid_rebalance(self)
                    continue
                generation = self.app.consumer_generation_id
                still_current = partial(self._still_current, generation)
                trace = _TRACE
                if trace is not None:
                    t_fetch = time.perf_counter()
                    n_ev, ts0, ts1 = 0, 0, 0
                for tp, batch in records.items():
                    if not still_current():
                        break  # rebalancing: the rest is fetched again after the seek
                    if (
                        active is not None
                        and tp not in active
                        and tp not in self._buffered_partitions
                    ):
                        # paused (Faust pauses every partition at an assignment and
                        # resumes the events ones after recovery): aiokafka returned
                        # it anyway (seen just after a recovery began), and
                        # its fetch position is past the batch; dropped without going
                        # back, the batch is skipped (docs/guarantees.md "A paused
                        # partition's records are fetched again")
                        if tp.topic == handler_topic:
                            log.info(
                                "%s[%d]: records %d-%d fetched while the partition was "
                                "paused; not handled, fetched again from %d",
                                tp.topic,
                                tp.partition,
                                batch[0].offset,
                                batch[-1].offset,
                                batch[0].offset,
                            )
                            self._hold_back(tp, batch, fetched_to.get(tp))
                        continue
                    if tp.topic == handler_topic and seeked.get(tp, fetched_at + 1) > fetched_at:
                        # fetched before this assignment's seek (perform_seek) ended:
                        # maybe not from the committed offset (seen: from the end of
                        # the log); fetched again from where it starts or the seek set
                        self._hold_back(tp, batch, fetched_to.get(tp))
                        continue
                    r_offset = read_offset[tp]
                    if r_offset is not None:
                        batch = [r for r in batch if r.offset >= r_offset]
                    if not batch:
                        continue
                    if tp.topic == handler_topic:
                        monitor.track_tp_end_offset(tp, self.highwater(tp))
                        monitor.stream_inbound_time[tp] = time.monotonic()
                        self._batch_since = time.monotonic()
                        try:
                            stats = await handler.handle(batch, current=still_current)
                        finally:
                            self._batch_since = None
                        if stats is None:
                            break  # revoked while it waited for the lock: fetched again
                        if trace is not None:
                            n_ev += len(batch)
                            first, last = batch[0].timestamp, batch[-1].timestamp
                            ts0 = min(ts0, first) if ts0 else first
                            ts1 = max(ts1, last)
                        # the next offset to handle (Faust keeps the last one here:
                        # with a seek in between, the last one came back again)
                        read_offset[tp] = max(read_offset[tp] or 0, batch[-1].offset + 1)
                        continue
                    for record in batch:  # Faust's per-message path (changelog recovery)
                        message = self._to_message(tp, record)
                        await self.wait_first(callback(message), self.suspend_flow.wait())
                        read_offset[tp] = record.offset
                if trace is not None and n_ev:
                    handled = time.perf_counter() - t_fetch
                    trace.emit("fetch", n=n_ev, ts0=ts0, ts1=ts1, ms=round(handled * 1000, 2))
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except SeekTimeoutError:
            raise  # logged, and the app crashed, where the seek gave up
        except Exception as exc:
            log.critical("the worker's fetch loop failed: %r; stopping the worker", exc)
            await self.app.crash(exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    @_aiokafka_driver.Consumer.task
    async def _watch_for_stalls(self) -> None:
        """Every few seconds, from the consumer's start (before recovery, which
        Faust's timers wait for): name an events partition that stopped moving
        (streams/worker/stall.py)."""
        watch: StallWatch | None = getattr(self.app, "stall_watch", None)
        if watch is None:
            return
        interval = min(5.0, watch.stall_s / 2)
        while not self.should_stop:
            await self.sleep(interval)
            report = self.fetch_report()
            if report is None:
                continue
            for level, text in watch.observe(time.monotonic(), report):
                if level == "warning":
                    log.warning("%s", text)
                else:
                    log.info("%s", text)

    def fetch_report(self) -> FetchReport | None:
        """How each assigned events partition is being fetched (for
        :class:`~streams.worker.stall.StallWatch` and SIGUSR1); None before the
        consumer exists.  Reads the consumer thread's structures from this thread,
        as Faust's own ``highwater`` does: a snapshot, not a transaction."""
        handler = self._handler
        if handler is None or self._thread._consumer is None:
            return None
        kafka = self._thread._consumer
        now = time.monotonic()
        active = self._active_partitions
        parts = []
        for tp in sorted(self.assignment()):
            if tp.topic != handler.topic:
                continue
            highwater, paused = partition_flags(kafka, tp)
            since = self._held_since.get(tp)
            parts.append(
                PartitionFetch(
                    partition=tp.partition,
                    next_offset=self._read_offset.get(tp),
                    position=fetch_position(kafka, tp),
                    highwater=highwater,
                    active=active is None or tp in active,
                    paused=paused,
                    seeked=tp in self._seeked,
                    held_s=now - since if since is not None else None,
                )
            )
        queue = getattr(self._thread._method_queue, "_queue", None)
        return FetchReport(
            topic=handler.topic,
            generation=self.app.consumer_generation_id,
            flow_active=bool(self.flow_active),
            rebalancing=bool(self.app.rebalancing),
            seek_round=self._seek_round,
            commit_under_way=self._commit_fut is not None,
            handler_locked=handler.lock.locked(),
            thread_calls=queue.qsize() if queue is not None else None,
            partitions=tuple(parts),
            batch_s=now - self._batch_since if self._batch_since is not None else None,
            seek_s=now - self._seek_since if self._seek_since is not None else None,
        )

    def _new_offset(self, tp: Any) -> int | None:
        handler = self._handler
        if handler is not None and tp.topic == handler.topic:
            return handler.committable(tp.topic, tp.partition)
        offset: int | None = super()._new_offset(tp)
        return offset

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Any:
        """Faust commits only partitions with acked messages; ours are never acked
        (the handler reports offsets instead), so add the handler's partitions."""
        tps = set(super()._filter_tps_with_pending_acks(topics))
        handler = self._handler
        if handler is not None:
            for topic, partition in handler.partitions():
                tp = TP(topic, partition)
                if topics is None or tp in topics or topic in topics:
                    tps.add(tp)
        return iter(tps)

    #: True while a revoke or a stop commits (``wait_empty``): every dirty engine is
    #: flushed, not only the due ones, so the commit covers all handled events
    _flush_all_engines = False

    async def wait_empty(self) -> None:
        """Faust's wait before a revoke's or a stop's last commit, with every engine
        flushed at that commit: the next owner of a partition then starts from the
        last handled event, not from the first one a waiting engine had not written."""
        self._flush_all_engines = True
        try:
            await super().wait_empty()
        finally:
            self._flush_all_engines = False

    async def commit_and_end_transactions(self) -> None:
        """The last commit of a revoke or a stop (``wait_empty``), never skipped.

        Faust's ``commit()`` returns without committing when a commit is under way
        (``maybe_wait_for_commit_to_finish``).  A periodic commit took its offsets
        before the batches applied while it encoded and wrote, and held them back
        for its waiting engines; the revoke's state flush (``_on_revoked``) then
        wrote those batches' state, and the next owner re-read events it already
        had (95 and 116 redeliveries in ``test_worker_recovery``'s clean-rebalance
        test, deduped by seq: no loss, but "no event handled twice" broken).  So
        wait for the commit under way, then commit.  No ``await`` lies between the
        wait's end and ``commit()`` claiming the next commit, so none can slip in.
        """
        if self._commit_fut is not None:
            log.info("last commit of a revoke or a stop: waiting for the commit under way")
            while self._commit_fut is not None:
                await self.maybe_wait_for_commit_to_finish()
        await super().commit_and_end_transactions()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        handler = self._handler
        for tp in revoked:
            self._seeked.pop(tp, None)  # (positioned again by the next seek)
            self._held_from.pop(tp, None)
            self._held_since.pop(tp, None)
        await super().on_partitions_revoked(revoked)
        if handler is not None:
            handler.forget((tp.topic, tp.partition) for tp in revoked)

    async def _commit_offsets(
        self, offsets: Mapping[Any, int], start_new_transaction: bool = True
    ) -> bool:
        """Faust's ``_commit_offsets``, recording offsets as committed only if they were.

        Why: faust-streaming 0.15.3 (``transport/consumer.py`` ``_commit_offsets``)
        updates ``_committed_offset`` whether or not the commit succeeded, and the
        aiokafka driver's ``_commit`` returns False, silently, for a commit refused
        because the group is rebalancing ("already rebalanced").  ``_should_commit``
        then skips those offsets at every later commit, the revoke's last commit
        included, so the broker keeps the older offset and the next owner of the
        partition handles the events in between again (upstream faust-streaming
        #316, fixed by PR #692, not in a release).

        Invariant: after a commit that did not happen, ``_committed_offset`` of each
        of its partitions is what it was when the commit began (Faust's update runs
        after the commit's ``await``, so it also overwrote anything set meanwhile).
        """
        committed = self._committed_offset
        before = {tp: committed.get(tp, _ABSENT) for tp in offsets}
        did: bool = await super()._commit_offsets(
            offsets, start_new_transaction=start_new_transaction
        )
        if not did:
            for tp, old in before.items():
                if committed.get(tp, _ABSENT) == offsets[tp] != old:
                    if old is _ABSENT:
                        del committed[tp]
                    else:
                        committed[tp] = old
        return did

    # ---------------------------------------------------------------- committing

    async def _commit_tps(self, tps: Any, start_new_transaction: bool) -> bool:
        """Faust's ``_commit_tps`` with the write-behind state flushed first.

        Order (docs/guarantees.md): (1) under the batch handler's lock (no batch is
        half applied or half sent), the plan says which changed sessions are due
        (``EventProcessor.plan_engines``; the others wait, and each partition's
        offset is held back to the first event a waiting session has not written),
        the committable offsets are taken and the dirty values of the sessions that
        do not wait are taken (immutable snapshots, not yet encoded) with no
        ``await`` in between, so the tables cover at least the events up to those
        offsets (plus timer-made changes); the due engine snapshots are taken in 2 ms
        slices under the
        same lock with batches running in between (snapshotting them all at once
        held every batch too long), so an engine may cover later events too,
        whose outputs step (3) flushes before the state is written; (2) the values
        are encoded in chunks, letting batches run in between (done in one go, a
        flush of many sessions would hold every event arriving meanwhile; figures:
        docs/faust-notes.md "Measured costs"); (3) the producer is flushed,
        so the outputs of those events are in Kafka before the state that says
        "done"; (4) the state goes to the local stores and is queued to the
        changelogs, in chunks too; (5) ``_commit_offsets`` flushes the producer
        again (changelogs delivered: every queued write acknowledged,
        ``_DeliveringProducer``; Faust's own buffer flush may return early) and
        only then commits the offsets.  Faust runs
        one commit at a time; ``StateFlusher.lock`` also keeps the revoke flush out.
        Until step (4) wrote a value it is in flight (``EventProcessor.written``), and
        sessions are evicted only after step (4): an event meanwhile never reads
        an older table value (issue #15).  A value that cannot be encoded stops the
        worker after every other value is written, with no offset committed
        (``StateFlusher.write_pending``).
        """
        flusher: StateFlusher | None = getattr(self.app, "state_flusher", None)
        handler = self._handler
        if flusher is None or handler is None:  # not our worker app: Faust's commit
            done: bool = await super()._commit_tps(tps, start_new_transaction)
            return done
        processor = flusher.processor
        async with flusher.lock:
            started = time.perf_counter()
            async with handler.lock:
                # engines not due wait for a later commit, and hold their partitions'
                # offsets back (EventProcessor.plan_engines); a revoke or a stop
                # (wait_empty) flushes every one
                plan = processor.plan_engines(
                    time.monotonic(), 0.0 if self._flush_all_engines else flusher.engine_wait_s
                )
                commit_offsets = self._filter_committable_offsets(tps)
                held = 0
                if plan.hold:
                    for tp in list(commit_offsets):
                        limit = plan.hold.get(tp.partition) if tp.topic == handler.topic else None
                        if limit is not None and commit_offsets[tp] > limit:
                            held += 1
                            if self._should_commit(tp, limit):
                                commit_offsets[tp] = limit
                            else:
                                del commit_offsets[tp]
                pending = processor.take_dirty(
                    engines=False, later=plan.due, waiting=plan.waiting_ids
                )
                engine_ids = list(plan.due)
                flusher.note_plan(len(engine_ids), plan.waiting, held)
            # Engine snapshots a slice at a time, between batches.
            i = 0
            while i < len(engine_ids):
                async with handler.lock:
                    slice_end = time.perf_counter() + flusher.SLICE_S
                    while i < len(engine_ids) and time.perf_counter() < slice_end:
                        pending += processor.take_engines(engine_ids[i : i + 16])
                        i += 16
                await asyncio.sleep(0)
            snapped = time.perf_counter()
            if pending:
                try:
                    await flusher.write_pending(pending, self.app.producer.flush)
                except (FlushError, DeliveryError) as exc:
                    # a bug, not bad input (that is dead-lettered when applied), or
                    # outputs/changelog writes Kafka did not take: stop without
                    # committing; every other value is written (or dirty) already
                    log.critical("%s; stopping the worker", exc)
                    await self.crash(exc)
                    return False
                flusher.note_flush(len(pending), time.perf_counter() - started)
            async with handler.lock:
                # Bounded caches: only clean sessions with nothing in flight go, and
                # only now that the taken values are in the stores (an evicted
                # session's next event reads them there; issue #15).
                processor.evict()
        written = time.perf_counter()
        if not commit_offsets:
            if pending:
                # Nothing to commit, but values were queued to the changelogs in (4):
                # they must be acknowledged before this returns all the same.  At a
                # revoke or a stop another worker recovers these partitions next, and
                # reads their changelogs up to the high watermark it finds: a write
                # still in flight then lands after that read, and that worker resumes
                # from the committed offsets with the older value (seq gaps: seen in
                # test_worker_recovery's clean-rebalance test, 2026-12-02).
                try:
                    await self.app.producer.flush()
                except (ProducerSendError, DeliveryError) as exc:
                    log.critical("%s; stopping the worker", exc)
                    await self.crash(exc)
            return False
        try:
            await self._handle_attached(commit_offsets)
            # (5) Faust flushes the producer first: ``_DeliveringProducer.flush``
            # waits until every changelog write queued in (4) is acknowledged
            did: bool = await self._commit_offsets(
                commit_offsets, start_new_transaction=start_new_transaction
            )
        except (ProducerSendError, DeliveryError) as exc:
            log.critical("%s; stopping the worker without committing offsets", exc)
            await self.crash(exc)
            return False
        if self._flush_all_engines or not did:
            log.info(
                "%s commit of %s offsets %s: %s",
                "last (revoke or stop)" if self._flush_all_engines else "periodic",
                handler.topic,
                {tp.partition: o for tp, o in commit_offsets.items() if tp.topic == handler.topic},
                "done" if did else "NOT made (refused mid-rebalance, or its partitions revoked)",
            )
        if _TRACE is not None:
            _TRACE.emit(
                "flush",
                values=len(pending),
                snap_ms=round((snapped - started) * 1000, 2),
                write_ms=round((written - snapped) * 1000, 2),
                commit_ms=round((time.perf_counter() - written) * 1000, 2),
            )
        return did


class _DeliveringProducer(_aiokafka_driver.Producer):
    """Faust's aiokafka producer whose ``flush`` really waits for the changelog writes.

    Why: table changelog writes (``Table.send_changelog`` -> ``Topic.send_soon`` ->
    ``Producer.send_soon``) go through Faust's ``ProducerBuffer``, a queue drained by
    its ``_handle_pending`` task.  ``ProducerBuffer.flush`` (faust 0.15.3,
    faust/transport/producer.py:78-94) returns as soon as one 0.1 s wait passes
    with no message sent (a send waiting for batch space, a loaded CPU), and when
    the queue is empty while ``_handle_pending`` still holds the last message it
    took; the aiokafka flush that follows (drivers/aiokafka.py:1487-1493) cannot
    see messages not yet handed to aiokafka.  ``Consumer._commit_offsets``
    (transport/consumer.py:1073-1074) then committed offsets whose changelog
    writes were still queued: a crash, or the stop closing the aiokafka producer
    before the buffer (``Producer.on_stop`` runs before its child buffer stops:
    mode/services.py:939-940; "ProducerBuffer: Crashed ... ProducerClosed"), lost
    them, and a worker recovering those partitions from the changelog read state
    older than the committed offsets (docs/faust-notes.md "Shutdown").

    The worker's own changelog writes now go in batches (:meth:`send_changelog_batch`,
    :class:`_ChangelogBatches`), tracked the same way; ``send_soon`` stays covered
    for any Faust-internal write.

    Invariant: when :meth:`flush` returns, every message given to ``send_soon`` and
    every batch given to :meth:`send_changelog_batch` before the call was
    acknowledged by Kafka; otherwise it raises
    :class:`DeliveryError` (and keeps raising: a failed changelog write must never
    be followed by an offset commit).  :meth:`on_stop` does the same before the
    aiokafka producer closes, so nothing is left in the buffer to fail.
    """

    #: How often :meth:`deliver_queued` looks at the buffer while it waits.
    POLL_S = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        #: changelog writes not yet acknowledged: ``send_soon`` messages (FutureMessage,
        #: an asyncio.Future) and :meth:`send_changelog_batch` batch futures
        self._queued: set[asyncio.Future[Any]] = set()
        #: the first changelog write that failed: (topic, partition, why) (sticky)
        self._failed: tuple[str | None, int | None, BaseException] | None = None
        #: where each batch future of :meth:`send_changelog_batch` goes
        self._batch_tp: dict[asyncio.Future[Any], tuple[str, int]] = {}

    def send_soon(self, fut: Any) -> None:
        self._queued.add(fut)
        fut.add_done_callback(self._on_queued_done)
        super().send_soon(fut)

    def _on_queued_done(self, fut: Any) -> None:
        if fut not in self._queued:
            return  # settled already (deliver_queued settles done futures itself)
        self._queued.discard(fut)
        where: tuple[str | None, int | None] | None = self._batch_tp.pop(fut, None)
        if self._failed is None:
            exc: BaseException | None
            if fut.cancelled():
                exc = asyncio.CancelledError("the send was cancelled")
            else:
                exc = fut.exception()
            if exc is not None:
                if where is None:  # a send_soon FutureMessage
                    msg = fut.message
                    topic = msg.channel.get_topic_name() if msg.channel is not None else None
                    where = (topic, msg.partition)
                self._failed = (where[0], where[1], exc)

    def fail(self, topic: str, partition: int, exc: BaseException) -> None:
        """Record a changelog write that could not even be queued (sticky, like a
        failed acknowledgement): no flush, hence no offset commit, passes after it."""
        if self._failed is None:
            self._failed = (topic, partition, exc)

    async def send_changelog_batch(
        self, batch: Any, topic: str, partition: int, on_sent: Callable[[Any], None]
    ) -> None:
        """Queue ``batch`` (an aiokafka ``BatchBuilder`` from :meth:`create_batch`) to
        ``topic[partition]``: one future for the whole batch instead of one per record.

        ``on_sent(metadata)`` runs when Kafka acknowledged it (``metadata.offset`` is
        the offset of its first record).  The batch counts as queued until then:
        :meth:`flush` waits for it and raises :class:`DeliveryError` if it failed.
        Raises :class:`DeliveryError` (sticky too) if aiokafka refuses the batch.
        """
        try:
            fut = await self._ensure_producer().send_batch(batch, topic, partition=partition)
        except Exception as exc:
            self.fail(topic, partition, exc)
            self._raise_failed()
            raise  # unreachable: _raise_failed raised
        self._queued.add(fut)
        self._batch_tp[fut] = (topic, partition)

        def _done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                on_sent(f.result())
            self._on_queued_done(f)

        fut.add_done_callback(_done)

    def create_batch(self) -> Any:
        """An empty aiokafka ``BatchBuilder`` (the producer's batch size and compression)."""
        return self._ensure_producer().create_batch()

    @property
    def queued(self) -> int:
        """``send_soon`` messages not yet acknowledged (tests, diagnostics)."""
        return len(self._queued)

    def _raise_failed(self) -> None:
        if self._failed is None:
            return
        topic, partition, exc = self._failed
        raise DeliveryError(
            f"a changelog write to {topic}[{partition}] was not delivered: {exc!r}; "
            "no offset is committed after it (the events are re-applied after a restart)",
            topic=topic,
            partition=partition,
        ) from exc

    async def deliver_queued(self) -> None:
        """Wait until every ``send_soon`` message queued so far is acknowledged.

        Raises :class:`DeliveryError` if one failed, or if the buffer that sends them
        crashed or stopped with messages left (they would never be sent).
        """
        while True:
            # a future may be done before its done-callback ran (callbacks are
            # scheduled): settle those here, or a failed write would pass as sent
            for fut in [f for f in self._queued if f.done()]:
                self._on_queued_done(fut)
            self._raise_failed()
            pending = list(self._queued)
            if not pending:
                return
            buffer = self.buffer
            # batches (send_changelog_batch) are in aiokafka already; only send_soon
            # messages wait for Faust's buffer
            in_buffer = [f for f in pending if f not in self._batch_tp]
            if in_buffer and buffer.state != "running":
                reason = buffer.crash_reason if buffer.crashed else None
                raise DeliveryError(
                    f"{len(in_buffer)} changelog write(s) still queued in Faust's producer "
                    f"buffer, which is {buffer.state}"
                    + (f" ({reason!r})" if reason is not None else "")
                    + ": they will not be sent; no offset is committed after them "
                    "(the events are re-applied after a restart)"
                ) from reason
            await asyncio.wait(pending, timeout=self.POLL_S)

    async def flush(self) -> None:
        await self.deliver_queued()
        await super().flush()

    async def on_stop(self) -> None:
        try:
            await self.deliver_queued()  # before the aiokafka producer closes
        except DeliveryError as exc:
            # mode only logs an error raised by a child's stop: crash so the exit
            # code says the stop lost queued writes (not covered by any commit)
            log.critical("%s", exc)
            await self.crash(exc)
        await super().on_stop()


class _ReadCommittedTransport(_aiokafka_driver.Transport):
    Consumer = _ReadCommittedConsumer
    Producer = _DeliveringProducer


class _ChangelogBatches:
    """The changelog records of one flush, in aiokafka batches per changelog partition.

    Why: Faust's per-record path (``Table.send_changelog`` -> ``Topic.send_soon`` ->
    ``ProducerBuffer`` -> aiokafka ``send``) makes a ``FutureMessage``, a buffer queue
    entry, an aiokafka future and three callbacks per record, and a RocksDB put of the
    persisted offset per record; a flush of N sessions wrote 2-4 N records.  Here the
    records go into aiokafka ``BatchBuilder`` s (the producer's batch size and
    compression: the same produce requests aiokafka's own accumulator would make), one
    future per batch (:meth:`_DeliveringProducer.send_changelog_batch`), and the
    table's persisted offset is set once per batch, to its last record's offset (what
    Faust's ``Collection._on_changelog_sent`` sets per record).

    Invariants: records of one changelog partition are queued in the order they were
    added (a full batch is queued before the one that follows it; aiokafka keeps one
    batch per partition in flight); every changelog write of the worker goes through
    here (nothing else writes these partitions, so nothing interleaves); a batch that
    cannot be queued or is not acknowledged makes every later flush raise
    :class:`DeliveryError` (no offset commit).  The worker does not use Faust
    transactions, so the persisted offset is set on acknowledgement, as Faust does
    outside transactions.
    """

    def __init__(self, producer: _DeliveringProducer, *, last: Any = None) -> None:
        self._producer = producer
        #: open batches: (topic, partition) -> (table, builder, records in it)
        self._open: dict[tuple[str, int], tuple[Any, Any, int]] = {}
        #: full batches waiting to be queued, in the order they filled
        self._full: list[tuple[str, int, Any, Any, int]] = []
        #: the table whose records wait for every other record of the flush to be
        #: acknowledged (the engines: :meth:`send_all`), and where they wait
        self._last_table = last
        self._last: _ChangelogBatches | None = None if last is None else _ChangelogBatches(producer)
        self._records = 0
        self._batches = 0

    @property
    def records(self) -> int:
        """Records added so far (the held-back table's included)."""
        return self._records + (0 if self._last is None else self._last.records)

    @property
    def batches(self) -> int:
        """Batches queued so far (the held-back table's included)."""
        return self._batches + (0 if self._last is None else self._last.batches)

    def add(self, table: Any, partition: int, key: bytes, value: bytes) -> None:
        if self._last is not None and table is self._last_table:
            self._last.add(table, partition, key, value)
            return
        topic: str = table.changelog_topic.get_topic_name()
        tp = (topic, partition)
        entry = self._open.get(tp)
        if entry is None:
            entry = (table, self._producer.create_batch(), 0)
        if entry[1].append(key=key, value=value, timestamp=None) is None:  # full
            if entry[2]:
                self._full.append((topic, partition, *entry))
            entry = (table, self._producer.create_batch(), 0)
            # the first record of a batch always fits (aiokafka: an oversized one alone)
            if entry[1].append(key=key, value=value, timestamp=None) is None:
                raise RuntimeError(f"{topic}[{partition}]: an empty aiokafka batch refused")
        self._open[tp] = (entry[0], entry[1], entry[2] + 1)
        self._records += 1

    async def send_full(self) -> None:
        """Queue the batches that filled up (the open ones take more records)."""
        full, self._full = self._full, []
        for i, (topic, partition, table, batch, n) in enumerate(full):
            try:
                await self._send(topic, partition, table, batch, n)
            except BaseException:
                self._full = full[i + 1 :] + self._full  # not queued; dropped with this flush
                raise

    async def send_all(self) -> None:
        """Queue every batch, full ones first (they precede the open ones); then, once
        Kafka acknowledged all of them, the held-back table's (the engines').

        Why the wait: batches of different changelog partitions are not ordered
        against each other, and a session's counters carry the tallies of the
        patterns its engine fired.  A worker killed mid-flush that also lost its
        local store would otherwise recover an engine whose changelog record arrived
        while its counters' did not: the engine skips the redelivered events and
        fires nothing, the counters count them without their patterns, and the
        tallies are lost for good (docs/guarantees.md "Crash analysis").  With the
        counters acknowledged first, a kill leaves them ahead instead, which is safe.
        Costs one acknowledgement round trip per flush that has engines.
        """
        await self.send_full()
        opened, self._open = self._open, {}
        for (topic, partition), (table, batch, n) in opened.items():
            await self._send(topic, partition, table, batch, n)
        last = self._last
        if last is not None and (last._open or last._full):
            # every write queued so far acknowledged (raises DeliveryError otherwise:
            # then the engines' records are not queued, and no offset is committed)
            await self._producer.deliver_queued()
            await last.send_all()

    async def _send(self, topic: str, partition: int, table: Any, batch: Any, n: int) -> None:
        batch.close()
        store = table.data

        def on_sent(md: Any) -> None:
            store.set_persisted_offset(md.topic_partition, md.offset + n - 1)

        await self._producer.send_changelog_batch(batch, topic, partition, on_sent)
        self._batches += 1


def _rocksdb_write_batch(store: Any) -> Any:
    """An empty write batch for a Faust RocksDB ``store``, of the library it uses
    (rocksdict in raw mode, else python-rocksdb), as Faust's changelog recovery makes it."""
    import faust.stores.rocksdb

    lib: Any = faust.stores.rocksdb  # its optional imports (rocksdict, rocksdb) are untyped
    if getattr(store, "use_rocksdict", False):
        return lib.rocksdict.WriteBatch(raw_mode=True)
    return lib.rocksdb.WriteBatch()


class StateFlusher:
    """Writes the processor's collected values partition-explicitly: local store + changelog.

    Why not ``table[key] = value``: Faust takes the partition of a table write
    (store and changelog) from the *current stream event*, and a flush runs
    outside any event (commit, revoke, shutdown).  So we call the store's
    per-partition DB (RocksDB) or dict (memory) ourselves and queue the changelog
    records in batches per partition (:class:`_ChangelogBatches`), which also record
    the persisted offsets.
    """

    #: A flush (encode + producer flush + store writes) slower than this is logged.
    SLOW_FLUSH_S = 5.0
    #: A commit-time flush yields to the event loop after this much encoding...
    SLICE_S = 0.002
    #: ...and after this many store + changelog writes.
    WRITE_CHUNK = 32

    def __init__(
        self,
        processor: EventProcessor,
        tables: dict[str, Any],
        producer: Any,
        *,
        engine_wait_s: float = 0.0,
    ) -> None:
        self.processor = processor
        #: ``--engine-flush-interval``: how long a dirty engine may wait for its flush
        #: (:meth:`EventProcessor.plan_engines`); 0 flushes every one at every commit
        self.engine_wait_s = engine_wait_s
        #: engines flushed, engines left waiting, and commits whose offset a waiting
        #: engine held back (a partition each), over this worker's life (``/stats``)
        self.engines_flushed = 0
        self.engines_waiting = 0
        self.offsets_held = 0
        #: the worker's metrics (``/metrics``), if any
        self.metrics: WorkerMetrics | None = None
        self.tables = tables
        #: the app's producer (a :class:`_DeliveringProducer`): changelog batches
        self.producer = producer
        self.flushes = 0
        #: One flush at a time (a commit's chunked flush, the revoke flush).
        self.lock = asyncio.Lock()
        self.last_flush_s = 0.0
        self.max_flush_s = 0.0
        #: values a flush could not encode (each one stops the worker: FlushError)
        self.unencodable = 0
        #: CPU seconds this worker's thread spent encoding values at flushes (``/stats``)
        self.encode_cpu_s = 0.0
        #: changelog records and batches queued so far (``/stats``)
        self.changelog_records = 0
        self.changelog_batches = 0

    def note_plan(self, due: int, waiting: int, held: int) -> None:
        """Record one commit's engine plan: ``due`` engines taken, ``waiting`` left
        dirty, ``held`` partitions whose offset commit a waiting engine held back."""
        self.engines_flushed += due
        self.engines_waiting = waiting
        self.offsets_held += held
        if self.metrics is not None:
            self.metrics.on_engine_plan(due, waiting, held)

    def note_encode(self, cpu_s: float) -> None:
        """Record the CPU time of encoding one taken value (canonical state + deflate)."""
        self.encode_cpu_s += cpu_s
        if self.metrics is not None:
            self.metrics.state_encode.inc(cpu_s)

    def note_flush(self, values: int, seconds: float) -> None:
        """Record how long one commit-time flush took (``/stats``; slow ones are logged)."""
        self.last_flush_s = seconds
        self.max_flush_s = max(self.max_flush_s, seconds)
        if seconds >= self.SLOW_FLUSH_S:
            log.warning("state flush of %d value(s) took %.1f s", values, seconds)
        else:
            log.debug("state flush of %d value(s) took %.3f s", values, seconds)

    def _batches(self) -> _ChangelogBatches:
        producer = self.producer
        if not isinstance(producer, _DeliveringProducer):
            raise InternalError(
                f"the worker app's producer is {type(producer).__name__}, not "
                "_DeliveringProducer: changelog batches need it (create_app sets it up)"
            )
        # the engines' records wait for the counters' acknowledgement (send_all)
        return _ChangelogBatches(producer, last=self.tables.get("engines"))

    def write(self, writes: list[TableWrite], batches: _ChangelogBatches) -> None:
        """Write ``writes`` to the local stores and add them to ``batches`` (no await:
        the stores hold them when this returns; the caller queues the batches).

        RocksDB writes go in one ``WriteBatch`` per store partition, written before
        this returns, as Faust's own changelog recovery writes them
        (``faust.stores.rocksdb.Store.apply_changelog_batch``): one put per value
        cost ~4.9 µs against ~3.2 in batches of 32, and at 1,000 events/s over
        1,000 sessions every event writes ~2 values (docs/faust-notes.md
        "Measured costs").
        """
        rocks: dict[tuple[int, int], tuple[Any, Any]] = {}  # (store, partition) -> (db, batch)
        for w in writes:
            table = self.tables[w.table]
            if w.partition is None:
                raise RuntimeError(f"{w.table}[{w.key!r}]: no partition known for a flush")
            store = table.data
            dbs = getattr(store, "_db_for_partition", None)
            if dbs is not None:  # RocksDB: one DB per partition
                at = (id(store), w.partition)
                pending = rocks.get(at)
                if pending is None:
                    pending = rocks[at] = (dbs(w.partition), _rocksdb_write_batch(store))
                pending[1].put(w.key, w.value)
                store._key_index[w.key] = w.partition
            else:  # memory store: a dict of raw keys (what changelog recovery writes)
                store.data[w.key] = w.value
            batches.add(table, w.partition, w.key, w.value)
        # The engines' batches last: a worker killed between two of these writes must
        # not leave a session's engine ahead of its counters (see
        # EventProcessor.take_engines, which puts the counters first for the same
        # reason); a batch is keyed by its first value, which can be an engine.
        engines = self.tables.get("engines")
        engines_store = None if engines is None else id(engines.data)
        for _, (db, batch) in sorted(rocks.items(), key=lambda item: item[0][0] == engines_store):
            db.write(batch)

    def _count(self, batches: _ChangelogBatches) -> None:
        self.flushes += 1
        self.changelog_records += batches.records
        self.changelog_batches += batches.batches

    def collect_now(self) -> tuple[int, _ChangelogBatches]:
        """Collect and write everything dirty to the stores, with no await (so nothing
        loads meanwhile); the caller queues the returned batches (:meth:`send`)."""
        batches = self._batches()
        writes = self.processor.collect()  # no await: written before anything else loads
        self.write(writes, batches)
        return len(writes), batches

    async def send(self, batches: _ChangelogBatches) -> None:
        """Queue the changelog batches of :meth:`collect_now` (no producer flush: the
        caller awaits it)."""
        try:
            await batches.send_all()
        finally:
            self._count(batches)

    async def write_pending(
        self, pending: list[PendingWrite], producer_flush: Callable[[], Awaitable[Any]]
    ) -> None:
        """Encode ``pending`` (taken from the processor), await ``producer_flush``, then
        write the values to the stores and changelogs, in slices so batches keep running.

        Until a value is written it is *in flight* (``EventProcessor.written``): an
        event for its session meanwhile reads the taken value, not the older table
        value.  A value that cannot be encoded does not stop the others: every other
        value is written, then :class:`FlushError` names the failures (the caller
        must not commit offsets: the events that made that value are redelivered).
        If anything fails before a value is written (producer flush, store), the
        unwritten values are handed back dirty (``EventProcessor.untake``), so a
        later flush writes them: a failed flush never loses another session's state.
        A changelog batch that cannot be queued raises :class:`DeliveryError`
        (sticky: no later flush passes either, so no offset is committed).
        """
        processor = self.processor
        writes: list[TableWrite] = []
        good: list[PendingWrite] = []
        failed: list[tuple[PendingWrite, Exception]] = []
        done = 0
        batches = self._batches()
        try:
            slice_end = time.perf_counter() + self.SLICE_S
            cpu = time.thread_time
            for p in pending:
                started = cpu()
                try:
                    writes.append(p.encode())
                    good.append(p)
                except Exception as exc:  # named below; the others are still written
                    failed.append((p, exc))
                self.note_encode(cpu() - started)
                if time.perf_counter() >= slice_end:
                    await asyncio.sleep(0)  # let fetched batches run
                    slice_end = time.perf_counter() + self.SLICE_S
            await producer_flush()
            for i in range(0, len(writes), self.WRITE_CHUNK):
                self.write(writes[i : i + self.WRITE_CHUNK], batches)
                processor.written(good[i : i + self.WRITE_CHUNK])
                done = i + self.WRITE_CHUNK
                await batches.send_full()
            await batches.send_all()
        except BaseException:
            processor.untake(good[done:])
            processor.untake(p for p, _ in failed)
            raise
        finally:
            self._count(batches)
        if failed:
            processor.untake(p for p, _ in failed)
            self.unencodable += len(failed)
            raise FlushError(failed)


class _LoudRecovery(_Recovery):
    """Faust's table recovery, where a step that outlasts its timeout stops the worker
    (CRITICAL, :class:`RecoveryTimeoutError`, exit 4) instead of ending recovery.

    Faust runs each recovery step (producer flush, changelog high watermarks and
    offsets, seeks) in ``_wait`` with ``broker_request_timeout``; mode's
    ``wait_first`` reports a timeout exactly as it reports the service stopping, so
    ``_wait`` raises ``ServiceStopped`` and the recovery loop ``break``s: recovery
    ends for good, with a ``log.dev`` line, and the worker stays up applying nothing
    (reproduced with the seek; docs/faust-notes.md).  Here a ``ServiceStopped``
    while the service is neither stopped nor crashed is that timeout.
    """

    async def _wait(self, coro: Any, timeout: Any = None) -> None:
        started = time.monotonic()
        try:
            await super()._wait(coro, timeout)
        except _ServiceStopped:
            if self._stopped.is_set() or self._crashed.is_set() or timeout is None:
                raise  # a real stop
            step = getattr(coro, "__qualname__", None) or repr(coro)
            exc = RecoveryTimeoutError(step, time.monotonic() - started)
            log.critical("%s", exc)
            await self.app.crash(exc)
            raise exc from None


class _LoudTableManager(_TableManager):
    """Faust's table manager with :class:`_LoudRecovery`."""

    @property
    def recovery(self) -> _Recovery:
        if self._recovery is None:
            self._recovery = _LoudRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class ObserverApp(faust.App):
    """``faust.App`` whose worker consumer reads only committed messages and flushes
    the write-behind state before every offset commit (``state_flusher``)."""

    state_flusher: StateFlusher | None = None
    #: The hot path for ``batch_handler.topic`` (``_ReadCommittedConsumer._drain_messages``).
    batch_handler: EventBatchHandler | None = None
    #: Names a stalled events partition (streams/worker/stall.py); set by create_app.
    stall_watch: StallWatch | None = None
    #: ``_ReadCommittedConsumer.perform_seek`` gives up a seek after this long
    seek_timeout_s: float = DEFAULT_SEEK_TIMEOUT_S

    def _new_transport(self) -> Any:
        return _ReadCommittedTransport(self.conf.broker_consumer, self)


@dataclass(frozen=True)
class WorkerApp:
    """The app plus the handles a command or test needs."""

    app: faust.App
    settings: Settings
    processor: EventProcessor
    sessions: Any
    budgets: Any
    minutes: Any
    engines: Any
    events_topic: Any
    metrics: WorkerMetrics | None = None

    @property
    def table_names(self) -> tuple[str, ...]:
        """The tables this app has (``engines`` only with the engine): their changelog
        topics are created before Faust starts (``streams.topics.ensure_changelog_topics``)."""
        names = (SESSIONS_TABLE, BUDGETS_TABLE, MINUTES_TABLE)
        return names if self.engines is None else (*names, ENGINES_TABLE)


async def _flush_trace() -> None:
    if _TRACE is not None:
        _TRACE.flush()


def create_app(settings: Settings, config: WorkerConfig | None = None) -> WorkerApp:
    """Build a worker app from ``settings`` (where Kafka is, topic names) and ``config``
    (how this worker runs: :class:`~streams.worker.config.WorkerConfig`, already
    validated; default ``WorkerConfig()``).

    The data dir is created if missing.
    """
    config = config if config is not None else WorkerConfig()
    global _TRACE
    if _TRACE is None:
        _TRACE = TailTrace.from_env()
        if _TRACE is not None:
            _TRACE.install()
    # the body reads plain locals: one place maps the config onto them
    store = config.store
    data_dir = config.data_dir
    web_port = config.web_port
    web_enabled = config.web_enabled
    worker_id = config.worker_id
    partitions = config.partitions
    decode = config.decode
    commit_interval_s = config.commit_interval_s
    engine_flush_interval_s = config.engine_flush_interval_s
    with_engine = config.with_engine
    engine_config = config.engine_config
    producer_linger_s = config.producer_linger_s
    commit_every = config.commit_every
    timer_interval_s = config.timer_interval_s
    metrics = config.metrics
    max_sessions_in_memory = config.max_sessions_in_memory
    view_auth = config.view_auth
    web_ssl_context = config.web_ssl_context
    group_instance_id = config.group_instance_id
    session_timeout_s = config.session_timeout_s
    metrics = metrics if metrics is not None else WorkerMetrics()
    n_partitions = partitions or settings.events_partitions
    decoder = decode or _default_decoder(settings)
    datadir = Path(data_dir) if data_dir is not None else Path(f"{app_id(settings)}-data")
    if worker_id:
        datadir = datadir / worker_id
    # Faust opens (does not create) the data dir: a new --data-dir failed with
    # FileNotFoundError (issue #15).
    datadir.mkdir(parents=True, exist_ok=True)

    app = ObserverApp(
        app_id(settings),
        broker=broker_urls(settings.bootstrap),
        broker_credentials=settings.security.faust_credentials(),  # TLS/SASL (streams.security)
        store=store,
        datadir=str(datadir),
        autodiscover=False,
        topic_partitions=n_partitions,
        topic_replication_factor=1,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=commit_interval_s,
        broker_commit_every=commit_every,
        broker_client_id=worker_id or app_id(settings),
        consumer_group_instance_id=group_instance_id,
        broker_session_timeout=session_timeout_s,
        # (Faust's default, set here because --seek-timeout must stay below it)
        broker_request_timeout=BROKER_REQUEST_TIMEOUT_S,
        # a recovery step past that timeout stops the worker, not recovery (silently)
        TableManager=_LoudTableManager,
        # the usual third of the session timeout (Faust's 3 s default was for 60 s)
        broker_heartbeat_interval=min(3.0, session_timeout_s / 3),
        web_enabled=web_enabled,
        web_port=web_port,
        web_bind="127.0.0.1",
        web_host="127.0.0.1",
        web_ssl_context=web_ssl_context,  # HTTPS view (streams.worker.auth.tls_context)
        canonical_url=f"https://127.0.0.1:{web_port}" if web_ssl_context else None,
        producer_acks=-1,
        # batch changelog writes: 3-4 table writes per event would otherwise each be a request
        producer_linger=producer_linger_s,
    )

    events = app.topic(
        settings.events_topic,
        key_serializer="raw",
        value_serializer="raw",
        partitions=n_partitions,
    )
    # outputs and dead letters are produced by name (streams/worker/batch.py)
    output_topics = worker_output_topics(settings)
    encoder = OutputEncoder(settings, engine_config) if with_engine else None
    # 'driver' is popped from (and aliased with) this dict by the Store: pass fresh dicts.
    table_kw: dict[str, Any] = {
        "default": None,
        "partitions": n_partitions,
        # Table serializers come from key_type/value_type only (bytes -> "raw",
        # anything else -> "json"); a schema= with serializers is ignored by the store.
        "key_type": bytes,
        "value_type": bytes,
    }

    def _opts() -> dict[str, Any] | None:
        return {"driver": "rocksdict"} if store == "rocksdb://" else None

    sessions = app.Table(SESSIONS_TABLE, help="per-session counters", options=_opts(), **table_kw)
    budgets = app.Table(
        BUDGETS_TABLE, help="latest budget per session", options=_opts(), **table_kw
    )
    minutes = app.Table(
        MINUTES_TABLE, help="tool calls/errors per session per minute", options=_opts(), **table_kw
    )
    engines = (
        app.Table(
            ENGINES_TABLE, help="core SessionEngine state per session", options=_opts(), **table_kw
        )
        if with_engine
        else None
    )
    processor = EventProcessor(
        sessions, budgets, minutes, engines, engine_config, max_sessions=max_sessions_in_memory
    )
    flusher = StateFlusher(
        processor,
        {
            SESSIONS_TABLE: sessions,
            BUDGETS_TABLE: budgets,
            MINUTES_TABLE: minutes,
            **({ENGINES_TABLE: engines} if engines is not None else {}),
        },
        app.producer,
        engine_wait_s=engine_flush_interval_s if with_engine else 0.0,
    )
    flusher.metrics = metrics
    app.state_flusher = flusher

    producer_send = app.producer.send

    async def _send(topic: str, key: bytes | None, value: bytes, headers: Any) -> None:
        # the same producer as the changelogs: flushed before the offset commit
        await producer_send(topic, key, value, None, None, headers)

    handler = EventBatchHandler(
        topic=settings.events_topic,
        processor=processor,
        decoder=decoder,
        send=_send,
        output_topics=output_topics,
        dlq_topic=settings.dlq_topic,
        encoder=encoder,
        metrics=metrics,
    )
    # No agent: the consumer hands each fetched batch of <prefix>.events to the
    # handler (streams/worker/batch.py); the conductor only needs to subscribe it.
    app.topics.add(events)
    app.batch_handler = handler

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode's stub wants signal=
    async def _on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        # Faust has already stopped the fetch flow and committed (our commit hook
        # waited for the batch in progress and flushed; a batch still waiting for the
        # handler's lock sees the flow stopped and applies nothing, so no state is
        # written past the committed offsets); flush whatever is still
        # dirty (e.g. timer-made state) and drop the caches with no await in between,
        # then make the changelog writes durable before another worker can recover
        # these partitions.
        async with flusher.lock:
            _, batches = flusher.collect_now()
            processor.drop_caches()
            await flusher.send(batches)
        # Always, not only when this flush wrote something: every changelog write
        # queued before (the revoke's commit, a timer's) must be acknowledged before
        # the next owner reads these changelogs' high watermarks (_commit_tps).
        await app.producer.flush()

    changelogs = [changelog_topic(settings, name) for name in flusher.tables]

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        processor.drop_caches()  # raises if anything is unflushed (cannot happen after revoke)
        # Faust's assignor leaves out a topic missing from the metadata ("Ignoring
        # missing topic"): events partitions without their table partitions would
        # idle until the next metadata refresh.  Fail loudly instead (Faust crashes the
        # app on an exception here: exit code 1, a restart rejoins with fresh metadata).
        missing = uncovered_partitions(
            ((tp.topic, tp.partition) for tp in assigned), settings.events_topic, changelogs
        )
        if missing:
            exc = BrokerError(
                f"assigned {settings.events_topic!r} partitions without their table "
                "changelog partitions "
                + "; ".join(f"{t!r}: {p}" for t, p in sorted(missing.items()))
                + " (the changelog topics were not in the cluster metadata when the group "
                "assigned: check they exist with as many partitions as the events topic, "
                "then restart the worker)"
            )
            log.critical("%s; stopping the worker", exc)
            raise exc

    if encoder is not None and timer_interval_s:

        @sessions.on_recover
        async def _adopt_open_sessions() -> None:
            """After table recovery: load this worker's open sessions for the timer,
            most recently active first, at most ``max_sessions_in_memory``."""
            assigned = {
                tp.partition
                for tp in app.consumer.assignment()
                if tp.topic == settings.events_topic
            }
            found: list[tuple[int, str, int]] = []
            for n, (key, raw) in enumerate(sessions.items()):
                sid = key_str(key)
                part = key_partition(sid, n_partitions)
                if part in assigned:
                    counters = SessionCounters.decode(raw)
                    if not counters.ended:
                        found.append((counters.last_event_ms or 0, sid, part))
                if n % 500 == 499:
                    await asyncio.sleep(0)  # keep the web server and heartbeats going
            found.sort(reverse=True)
            adopted = 0
            for i, (_, sid, part) in enumerate(found[: processor.max_sessions]):
                async with handler.lock:
                    adopted += processor.adopt(sid, part)
                if i % 100 == 99:
                    await asyncio.sleep(0)
            if adopted:
                log.info("adopted %d open session(s) for the timer after recovery", adopted)

        async def _assess_quiet_sessions() -> None:
            """every_n_seconds and deadline assessments of sessions gone quiet.

            The one place wall time enters: ``now`` is the clock, and the engine
            marks what it makes ``trigger="timer"``; the changed engine state is
            dirty and reaches the table with the next commit.
            """
            if app.rebalancing:
                return
            await handler.assess_quiet(int(time.time() * 1000))

        # registered by call, not as a decorator: Faust's timer() returns a bare Callable
        app.timer(timer_interval_s)(_assess_quiet_sessions)

    # (watched from the consumer service, not a Faust timer: Faust starts its timers
    # only after table recovery has completed, and a recovery that never completes
    # is a stall to name)
    stall_watch = StallWatch(config.stall_warn_s)
    app.stall_watch = stall_watch
    app.seek_timeout_s = config.seek_timeout_s

    if _TRACE is not None:
        app.task(_TRACE.loop_lag)
        app.timer(1.0)(_flush_trace)

    # HTTP views (streams/worker/web.py): /sessions, /sessions/{id}/..., /stats, /metrics
    register_views(
        app,
        sessions=sessions,
        budgets=budgets,
        minutes=minutes,
        engines=engines,
        stats=lambda: {
            "applied": processor.applied,
            "duplicates": processor.duplicates,
            "dirty": processor.dirty,
            "flushed_values": processor.flushed_values,
            "flushes": flusher.flushes,
            "state_encode_cpu_s": round(flusher.encode_cpu_s, 3),
            "changelog_records": flusher.changelog_records,
            "changelog_batches": flusher.changelog_batches,
            "sessions_in_memory": len(processor.sessions_in_memory()),
            "evicted": processor.evicted,
            "in_flight": processor.in_flight,
            "unencodable_values": flusher.unencodable,
            "last_flush_s": round(flusher.last_flush_s, 4),
            "max_flush_s": round(flusher.max_flush_s, 4),
            "engines_flushed": flusher.engines_flushed,
            "engines_waiting": flusher.engines_waiting,
            "offsets_held": flusher.offsets_held,
            "batches": handler.batches,
            "stalls": stall_watch.stalls,
            "stalled_partitions": stall_watch.stalled(),
        },
        metrics=metrics,
        events_topic=settings.events_topic,
        auth=view_auth,
        held=processor,
    )

    return WorkerApp(
        app=app,
        settings=settings,
        processor=processor,
        sessions=sessions,
        budgets=budgets,
        minutes=minutes,
        engines=engines,
        events_topic=events,
        metrics=metrics,
    )


__all__ = [
    "BUDGETS_TABLE",
    "ENGINES_TABLE",
    "MINUTES_TABLE",
    "SESSIONS_TABLE",
    "STORES",
    "StateFlusher",
    "WorkerApp",
    "app_id",
    "broker_urls",
    "changelog_topic",
    "create_app",
]
