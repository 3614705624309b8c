"""The worker's hot path: apply a fetched batch of event records, then send its outputs.

Why not a Faust agent: an agent pays Faust's per-message machinery (a
``ConsumerMessage``, a conductor dispatch, two tasks in ``wait_first``, a
channel queue, an ``Event``, an ack) and a ``Topic.send`` per output, which
cost more than the detectors themselves (docs/faust-notes.md, "Agents").  The worker's consumer
(``streams.worker.faust_app``) hands each fetched batch of ``<prefix>.events``
records straight to :meth:`EventBatchHandler.handle` instead, and commits the
offsets this handler reports.  Faust still owns the group, the tables, their
changelogs and recovery, the producer, the timers and the web server.

Nothing here imports Faust or Kafka: records only need ``key``, ``value``,
``topic``, ``partition`` and ``offset``, and sending is an injected coroutine,
so the logic is unit-tested with fakes.

Invariants (docs/guarantees.md):

* One batch at a time, under :attr:`EventBatchHandler.lock`: the events are
  applied (synchronously), their outputs and dead letters are handed to the
  producer, and only then is the batch's next offset reported committable.  The
  worker's commit takes the same lock around "committable offsets + collect the
  dirty state", so the state it writes never covers an event whose outputs are
  not yet in the producer, and the offsets it commits never run ahead of that
  state.
* An event that is invalid (bad bytes, wrong key, rejected by the engine) or
  whose outputs cannot be encoded goes to the dead-letter topic with a reason;
  the batch carries on.  Any other exception stops the batch: the events before
  it are sent and marked committable, the exception propagates (the worker
  crashes rather than skip the event; its offset is not committed).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from streams.core.events import TraceEvent
from streams.errors import (
    InvalidEventError,
    MalformedMessageError,
    OutputError,
    SerdeError,
)
from streams.router.validate import event_error, forwarded_from

if TYPE_CHECKING:
    from streams.worker.metrics import WorkerMetrics
    from streams.worker.outputs import OutputEncoder, OutputRecord
    from streams.worker.processor import EventProcessor

log = logging.getLogger(__name__)

Decoder = Callable[[bytes], TraceEvent]
Headers = list[tuple[str, bytes]]
#: ``send(topic, key, value, headers)``: hand one record to the producer (no delivery wait).
Send = Callable[[str, bytes | None, bytes, Headers | None], Awaitable[Any]]


class RecordLike(Protocol):
    """What the handler reads of a fetched record (aiokafka's ``ConsumerRecord`` has it)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def source_of(record: RecordLike) -> tuple[bytes, bytes, bytes, bytes | None]:
    """Where an event was first published: (topic, partition, offset, key).

    The router forwards each event with its source offset in ``src.*`` headers
    (``streams.router.validate.forwarded_from`` derives the rest), so a dead
    letter made here names the per-session topic record an operator can find,
    like the router's own (decode once: the router no longer fully decodes, the
    worker does).  A record without them (written to ``<prefix>.events`` by
    something else) names its own coordinates.
    """
    found = forwarded_from(record.topic, record.key, getattr(record, "headers", None))
    if found is None:
        return (
            str(record.topic).encode(),
            str(record.partition).encode(),
            str(record.offset).encode(),
            record.key,
        )
    return found


def dlq_headers(exc: BaseException, record: RecordLike) -> Headers:
    """The router's DLQ header names (``streams.router.validate``), plus ``dlq.stage``.

    ``dlq.source.*`` name where the event was published (:func:`source_of`).
    """
    stage = b"worker-output" if isinstance(exc, OutputError) else b"worker"
    if isinstance(exc, OutputError):
        exc = exc.cause
    topic, partition, offset, _key = source_of(record)
    return [
        ("dlq.reason", str(exc).encode("utf-8", "replace")[:1000]),
        ("dlq.error_class", type(exc).__name__.encode()),
        ("dlq.source.topic", topic),
        ("dlq.source.partition", partition),
        ("dlq.source.offset", offset),
        ("dlq.stage", stage),
    ]


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one :meth:`EventBatchHandler.handle` call did."""

    events: int
    dead_lettered: int
    outputs: int


class _Undecoded:
    """What decoding a record of a batch raised, kept to be raised at its place."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class EventBatchHandler:
    """Applies batches of ``<prefix>.events`` records and reports committable offsets."""

    def __init__(
        self,
        *,
        topic: str,
        processor: EventProcessor,
        decoder: Decoder,
        send: Send,
        output_topics: dict[str, str],
        dlq_topic: str,
        encoder: OutputEncoder | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        #: The source topic whose batches this handles (``<prefix>.events``).
        self.topic = topic
        self.processor = processor
        self.decoder = decoder
        self.send = send
        self.output_topics = output_topics
        self.dlq_topic = dlq_topic
        self.encoder = encoder
        self.metrics = metrics
        #: Held while a batch is applied and its outputs handed to the producer,
        #: and by the worker's commit while it takes offsets and collects state.
        self.lock = asyncio.Lock()
        #: (topic, partition) -> next offset to commit (last handled + 1)
        self._committable: dict[tuple[str, int], int] = {}
        self.batches = 0

    # ------------------------------------------------------------- offsets

    def committable(self, topic: str, partition: int) -> int | None:
        """The offset to commit for a partition: one past the last handled record."""
        return self._committable.get((topic, partition))

    def partitions(self) -> list[tuple[str, int]]:
        """The partitions with a committable offset."""
        return list(self._committable)

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Drop the committable offsets of revoked partitions."""
        for tp in partitions:
            self._committable.pop(tp, None)

    # --------------------------------------------------------------- batch

    async def handle(
        self, records: Sequence[RecordLike], *, current: Callable[[], bool] | None = None
    ) -> BatchStats | None:
        """Apply ``records`` (one partition, in offset order) and send what they produce.

        ``current``: checked once the lock is held; if it says False (the fetch loop's
        assignment is being revoked or stopped), nothing is applied and ``None`` is
        returned, so the caller does not move past these records: they are fetched
        again after the next seek.  Why: a batch that passed the fetch loop's checks
        and then waited for the lock behind a revoke's last commit could run between
        that commit's engine slices or before the revoke's flush, which wrote its
        state while its offsets stayed uncommitted: the next owner handled it again
        (the likely cause, read from the code, of 16 duplicates in a run of the
        clean-rebalance test, 2026-12-03).
        """
        if not records:
            return BatchStats(0, 0, 0)
        async with self.lock:
            if current is not None and not current():
                return None
            seen = self.processor.duplicates
            sends, handled, failure = self._apply(records)
            again = self.processor.duplicates - seen
            if again:  # expected after a crash (the restart re-reads past the commit)
                first, last = records[0], records[-1]
                log.info(
                    "%d of %d record(s) of %s[%s]@%s..%s were already applied "
                    "(ignored by seq): handled again after a restart or a rebalance",
                    again,
                    len(records),
                    first.topic,
                    first.partition,
                    first.offset,
                    last.offset,
                )
            for topic, key, value, headers in sends:
                await self.send(topic, key, value, headers)
            if handled:
                last = handled[-1]
                self._committable[(last.topic, last.partition)] = last.offset + 1
            self.batches += 1
        if failure is not None:
            raise failure
        dead = sum(1 for s in sends if s[0] == self.dlq_topic)
        return BatchStats(len(handled), dead, len(sends) - dead)

    def _apply(
        self, records: Sequence[RecordLike]
    ) -> tuple[
        list[tuple[str, bytes | None, bytes, Headers | None]], list[RecordLike], Exception | None
    ]:
        """Apply every record in memory (no ``await``): what to send, what was handled."""
        processor = self.processor
        decoder = self.decoder
        encoder = self.encoder
        metrics = self.metrics
        sends: list[tuple[str, bytes | None, bytes, Headers | None]] = []
        handled: list[RecordLike] = []
        # per-event figures, recorded once per batch (WorkerMetrics.on_events)
        types: dict[str, int] = {}
        seconds: list[float] = []
        timestamps: list[int] = []
        perf_ns = time.perf_counter_ns
        # Decode the batch first, then apply it: decoding each event just before the
        # engine runs cost ~5-7 us more per event (docs/replay.md "Decode ahead").  A
        # failure is kept and raised at its record's place below, so everything
        # else (dead letters, the stop on an unexpected error, offsets) is as it was.
        decoded: list[Any] = []
        put = decoded.append
        decode_ns: list[int] = []
        took = decode_ns.append
        before_ns = perf_ns()
        for record in records:
            value = record.value
            if value is None:
                put(None)  # a tombstone: refused below, where its record is
            else:
                try:
                    put(decoder(value))
                except Exception as exc:  # raised again at its place (see above)
                    put(_Undecoded(exc))
            after_ns = perf_ns()
            took(after_ns - before_ns)
            before_ns = after_ns
        for i, record in enumerate(records):
            started_ns = perf_ns() - decode_ns[i]
            value = record.value
            try:
                if value is None:
                    raise MalformedMessageError(
                        "empty message value (a tombstone); expected an Avro event"
                    )
                event = decoded[i]
                if type(event) is _Undecoded:
                    raise event.exc
                raw_key = record.key
                key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
                if key is not None and key != event.session_id:
                    raise InvalidEventError(
                        "session_id",
                        f"{event.session_id!r} does not match the message key {key!r} "
                        "(producers must key <prefix>.events by session id)",
                    )
                # seq/type/timestamp_ms: the router's checks, made where the event
                # is decoded (the router forwards after a framing check only)
                refused = event_error(event, event.session_id, record.topic)
                if refused is not None:
                    raise refused
                # InvalidEventError from the engine comes before any table changed
                result = processor.apply(event, record.partition, record.offset)
                outs = []
                if encoder is not None:
                    try:
                        outs = encoder.records(
                            event,
                            result.engine,
                            functools.partial(processor.engine_state, event.session_id),
                        )
                    except (SerdeError, InvalidEventError) as exc:
                        # the tables did apply it; only its outputs cannot be encoded
                        raise OutputError(exc) from exc
            except (SerdeError, InvalidEventError, OutputError) as exc:
                log.warning(
                    "dead-lettering %s[%s]@%s: %s: %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    type(exc).__name__,
                    exc,
                )
                if metrics is not None:
                    metrics.on_dlq(
                        type(exc.cause if isinstance(exc, OutputError) else exc).__name__
                    )
                sends.append(
                    (self.dlq_topic, source_of(record)[3], value or b"", dlq_headers(exc, record))
                )
                handled.append(record)
                continue
            except Exception as exc:
                # Never skip an event silently: stop here; the caller crashes the
                # worker and this record's offset is not committed.
                log.critical(
                    "cannot apply %s[%s]@%s: %r; stopping the worker",
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                )
                if metrics is not None:
                    metrics.on_events(types, seconds, timestamps)
                return sends, handled, exc
            if metrics is not None:
                etype = event.type
                types[etype] = types.get(etype, 0) + 1
                seconds.append(max(0, perf_ns() - started_ns) / 1e9)
                timestamps.append(event.timestamp_ms)
                metrics.on_outputs(result.engine)
            if outs:
                sends.extend(self._output_sends(outs))
            handled.append(record)
        if metrics is not None:
            metrics.on_events(types, seconds, timestamps)
        return sends, handled, None

    def _output_sends(
        self, records: Iterable[OutputRecord]
    ) -> list[tuple[str, bytes | None, bytes, Headers | None]]:
        topics = self.output_topics
        return [(topics[r.kind], r.key, r.value, list(r.headers) or None) for r in records]

    # --------------------------------------------------------------- timer

    async def assess_quiet(self, now_ms: int) -> int:
        """Timer assessments (deadline, every_n_seconds) of the sessions in memory.

        Under the batch lock, so a commit never collects a timer-made state change
        whose assessment is not yet handed to the producer.  Returns how many
        assessments were sent.
        """
        encoder = self.encoder
        if encoder is None:
            return 0
        sent = 0
        async with self.lock:
            for made in self.processor.on_timer(now_ms):
                if self.metrics is not None:
                    self.metrics.on_assessment(made.assessment)  # counted like event-made ones
                for topic, key, value, headers in self._output_sends(encoder.timer_records(made)):
                    await self.send(topic, key, value, headers)
                    sent += 1
        return sent


__all__ = [
    "BatchStats",
    "EventBatchHandler",
    "OutputError",
    "RecordLike",
    "dlq_headers",
    "source_of",
]
