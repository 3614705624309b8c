"""Read a bounded slice of session topics (or ``<prefix>.events``) as decoded events.

Why a reader of its own instead of a consumer group: replay, export and reports
read history, they must not move anybody's committed offsets and they must
*stop*.  So the reader assigns partitions by hand (no group membership, no
commits), captures each partition's high watermark when it starts and reads up
to it, never waiting for data that arrives later.

Bounds (``--from`` / ``--to``, both inclusive):

* a plain integer is an offset, applied to every partition read;
* anything else is an ISO-8601 time, resolved per partition with
  ``offsets_for_times``.  This is the Kafka *record timestamp* (the time the
  record was produced: the SDK leaves CreateTime to the producer), not the
  event's ``timestamp_ms``.

Invariants:

* ``isolation.level = read_committed``: aborted transactional writes are never
  returned; an open transaction ends the read at the last stable offset (the
  partition's EOF) instead of hanging.
* Every record between the bounds is either yielded as an event or recorded as
  a :class:`DecodeFailure` (topic, partition, offset, reason); with
  ``strict=True`` the first failure raises instead.  Nothing is skipped silently.
* Within a partition, records come in offset order; partitions are read one
  after another in (topic, partition) order, so per-session order is kept.
* When a read ends, ``stats.failures`` is in (topic, partition, offset) order.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from streams.core.events import TraceEvent
from streams.core.jsonl import iso_to_ms
from streams.errors import (
    ConfigError,
    ReplayReadError,
    SerdeError,
    TrajectoryError,
    UndecodableRecordError,
)
from streams.security import SecurityConfig, client_config

T = TypeVar("T")

#: Consumer settings for bulk reads: big fetches, a deep local queue.
FAST_READ_CONFIG: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "isolation.level": "read_committed",
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.wait.max.ms": 10,
    "queued.min.messages": 200_000,
    "queued.max.messages.kbytes": 512 * 1024,
    "auto.offset.reset": "earliest",
}


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a read range: an offset, or a record time in epoch ms."""

    kind: Literal["offset", "time"]
    value: int


def parse_bound(text: str | None, name: str) -> Bound | None:
    """``"123"`` -> offset 123; ``"2025-01-15T14:32:00Z"`` -> time; None -> None."""
    if text is None or text == "":
        return None
    raw = text.strip()
    if re.fullmatch(r"\d+", raw):
        return Bound("offset", int(raw))
    try:
        return Bound("time", iso_to_ms(raw, field=name))
    except TrajectoryError as exc:
        raise ConfigError(
            name,
            f"{text!r} is neither an offset (a non-negative integer) nor an ISO-8601 time "
            "(e.g. 2025-01-15T14:32:00Z)",
        ) from exc


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    """A record in range that did not decode: where it is and why."""

    topic: str
    partition: int
    offset: int
    reason: str

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}: {self.reason}"


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start, stop)`` of one partition, resolved when the read began."""

    topic: str
    partition: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return max(0, self.stop - self.start)


@dataclass
class ReadStats:
    """Counters of one read (mutable: filled in while reading)."""

    records: int = 0
    decoded: int = 0
    bytes: int = 0
    failures: list[DecodeFailure] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0


def cluster_topics(
    bootstrap: str, *, security: SecurityConfig | None = None, timeout_s: float = 30.0
) -> set[str]:
    """The names of every topic on the cluster, or :class:`ReplayReadError` (I/O: CLI
    exit 4, not 2) when the broker cannot be reached or refuses.

    ``security``: as for :func:`session_topics` (None: the process-wide setting)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_config(security)})
    try:
        return set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise ReplayReadError.from_kafka(
            f"cannot list topics on {bootstrap} (--bootstrap / KAFKA_BOOTSTRAP; is the "
            f"broker up?): {exc}",
            exc,
            retriable=True,
        ) from exc


def session_topics(
    bootstrap: str,
    prefix: str,
    *,
    session: str | None = None,
    pattern: str | None = None,
    timeout_s: float = 30.0,
    security: SecurityConfig | None = None,
) -> list[str]:
    """The ``<prefix>.session.<id>`` topics for one id or an fnmatch glob over ids.

    ``security``: the credential to list topics with (e.g. ``Settings().security``);
    None keeps the process-wide one (:func:`streams.security.current`).

    A glob is matched against the cluster's topic list (the id part of the name);
    an exact ``session`` must exist.  Raises :class:`ConfigError` naming the flag
    when nothing matches, since an empty replay is almost always a typo.
    """

    from streams.settings import check_session_id

    if (session is None) == (pattern is None):
        raise ConfigError(
            "--session/--sessions", "give exactly one of --session ID or --sessions GLOB"
        )
    base = f"{prefix}.session."
    topics = cluster_topics(bootstrap, security=security, timeout_s=timeout_s)
    if session is not None:
        name = base + check_session_id(session)
        if name not in topics:
            raise ConfigError("--session", f"topic {name!r} does not exist on {bootstrap}")
        return [name]
    assert pattern is not None
    found = sorted(
        t for t in topics if t.startswith(base) and fnmatch.fnmatchcase(t[len(base) :], pattern)
    )
    if not found:
        raise ConfigError(
            "--sessions", f"no topic {base}<id> with an id matching {pattern!r} on {bootstrap}"
        )
    return found


def _router_validate() -> Any:
    """``streams.router.validate``, imported on first use (an import statement per
    record costs more than the checks; at module level it would load the router
    package for every reader, e.g. ``trajectory export``)."""
    global _VALIDATE
    if _VALIDATE is None:
        from streams.router import validate

        _VALIDATE = validate
    return _VALIDATE


_VALIDATE: Any = None


@dataclass(frozen=True, slots=True)
class IngestCheck:
    """What live ingest refuses, applied to a replay so it sees what the worker saw.

    A replay of the per-session topics reads records the router dead-letters live
    (oversized, a payload naming another session, a bad ``seq``/``type``/
    ``timestamp_ms``): replaying them would make the offline answer differ from the
    live one on exactly the adversarial input where the comparison matters.  So the
    reader applies the router's own pure checks (``streams.router.validate``) to
    records of a session topic, and the worker's to records of ``<prefix>.events``
    (the key is the session id the payload must name).  Picklable, for
    ``--jobs`` workers.  Returns the reason a record is refused, or None.
    """

    prefix: str
    max_message_bytes: int

    def covers(self, topic: str) -> bool:
        """True when every event of ``topic`` this check lets through passed the
        router's ``event_error`` against its own session id (a session topic, or
        ``<prefix>.events``); other topics are not checked at all."""
        is_events, topic_session = _topic_kind(self.prefix, topic)
        return is_events or topic_session is not None

    def __call__(self, event: object, topic: str, key: bytes | None, size: int) -> str | None:
        if not isinstance(event, TraceEvent):
            return None
        is_events, topic_session = _topic_kind(self.prefix, topic)
        if is_events:
            if key is not None and key != event.session_id.encode("utf-8"):
                return (
                    f"session_id: the payload says {event.session_id!r} but the record's key "
                    f"is {key.decode('utf-8', 'replace')!r} (dead-lettered by the worker)"
                )
            # the router forwards after a framing check (decode once): the worker
            # runs the event checks where it decodes, and so does the replay
            refused = _router_validate().event_error(event, event.session_id, topic)
            return str(refused) if refused is not None else None
        if size > self.max_message_bytes:
            return f"message is {size} bytes, over the {self.max_message_bytes}-byte cap"
        if topic_session is None:
            return None  # not a per-session topic: nothing the router would check
        # the router's check_event, whose Rejected.reason is str() of this error
        refused = _router_validate().event_error(event, topic_session, topic)
        return str(refused) if refused is not None else None


@functools.lru_cache(maxsize=4096)
def _topic_kind(prefix: str, topic: str) -> tuple[bool, str | None]:
    """``(topic is <prefix>.events, the session id of a <prefix>.session.<id> topic
    or None)``: what :class:`IngestCheck` asks of every record's topic, worked out
    once per topic (a replay reads a handful of topics and checks every record).
    The events topic is never also a session topic (its name has no ``.session.``)."""
    if topic == f"{prefix}.events":
        return True, None
    return False, _router_validate().session_id_of_topic(prefix, topic)


def published_at(
    topic: str,
    partition: int,
    offset: int,
    headers: list[tuple[str, bytes | None]] | None,
    key: bytes | None = None,
) -> tuple[str, int, int]:
    """Where a record was first published: the router forwards each event to
    ``<prefix>.events`` with its source offset in ``src.*`` headers
    (``streams.router.validate.forwarded_from``; ``key`` is the record's), and the
    worker's dead letters name those coordinates; a record without them is its
    own origin."""
    found = _router_validate().forwarded_from(topic, key, headers)
    if found is None:
        return topic, partition, offset
    src, part, off, _key = found
    if not (part.isdigit() and off.isdigit()):
        return topic, partition, offset
    return src.decode("utf-8", "replace"), int(part), int(off)


class _Failed:
    """A record of a decoded slice that is not handed on: why, and the record, so
    :meth:`TopicReader._fail` reports it at its place in the slice."""

    __slots__ = ("exc", "key", "msg", "published", "reason")

    def __init__(
        self, msg: Any, key: bytes | None, reason: str, exc: Exception | None, published: bool
    ) -> None:
        self.msg = msg
        self.key = key
        self.reason = reason
        self.exc = exc
        #: report where the record was first published (its headers), not where it is
        self.published = published

    def where(self) -> tuple[str, int, int]:
        msg = self.msg
        if self.published:
            return published_at(msg.topic(), msg.partition(), msg.offset(), msg.headers(), self.key)
        return msg.topic(), msg.partition(), msg.offset()


class TopicReader(Generic[T]):
    """Reads ``topics`` between two bounds and decodes each value with ``decode``.

    ``decode`` is e.g. ``EventSerde().decode``; a :class:`SerdeError` (or a
    :class:`TrajectoryError`) from it is a decode failure, anything else propagates.
    ``key_filter`` (optional) skips records whose key is not accepted *before*
    decoding (used to pick sessions out of ``<prefix>.events``); skipped records
    are counted in ``stats.filtered``-free terms: they are simply out of scope.
    ``security``: the client's TLS/SASL settings (library callers pass their
    ``Settings.security``); None keeps the process-wide ones
    (:func:`streams.security.current`, what the CLI installs).
    """

    #: Records decoded before their events are handed on (iteration decodes a slice
    #: of a consumed batch at a time; failures are still reported in record order).
    DECODE_AHEAD: int = 256

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        decode: Callable[[bytes], T],
        *,
        start: Bound | None = None,
        end: Bound | None = None,
        strict: bool = False,
        key_filter: Callable[[bytes | None], bool] | None = None,
        batch_size: int = 10_000,
        timeout_s: float = 30.0,
        consumer_config: dict[str, Any] | None = None,
        ranges: Sequence[PartitionRange] | None = None,
        security: SecurityConfig | None = None,
        check: Callable[[T, str, bytes | None, int], str | None] | None = None,
    ) -> None:
        if not topics and not ranges:
            raise ConfigError("topics", "nothing to read: no topic given")
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.decode = decode
        self.start = start
        self.end = end
        self.strict = strict
        self.key_filter = key_filter
        #: what live ingest refuses (:class:`IngestCheck`): recorded like a failure
        self.check = check
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.stats = ReadStats()
        #: called with each consumed batch's record count after its values were
        #: handed on (see :meth:`__iter__`); None: no call
        self.on_batch: Callable[[int], None] | None = None
        config = dict(FAST_READ_CONFIG)
        config["bootstrap.servers"] = bootstrap
        config.update(client_config(security))
        # Required by the client even for assign(); never joined, never committed.
        config["group.id"] = f"trajectory-replay-{uuid.uuid4().hex[:12]}"
        config.update(consumer_config or {})
        self._config = config
        # ``ranges``: a plan resolved elsewhere (a parallel replay's share of it)
        self._ranges: list[PartitionRange] | None = list(ranges) if ranges is not None else None

    # -- planning ----------------------------------------------------------
    def plan(self) -> list[PartitionRange]:
        """Resolve every partition's ``[start, stop)`` now (watermarks captured once)."""
        if self._ranges is not None:
            return self._ranges
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._config)
        try:
            meta = consumer.list_topics(timeout=self.timeout_s)
            parts: list[TopicPartition] = []
            for topic in self.topics:
                tmeta = meta.topics.get(topic)
                if tmeta is None or tmeta.error is not None:
                    raise ConfigError(
                        "topic",
                        f"{topic!r} does not exist on {self.bootstrap} "
                        f"({tmeta.error if tmeta is not None else 'not in metadata'})",
                    )
                parts.extend(TopicPartition(topic, p) for p in sorted(tmeta.partitions))
            ranges = []
            lows_highs = {
                (tp.topic, tp.partition): consumer.get_watermark_offsets(
                    tp, timeout=self.timeout_s, cached=False
                )
                for tp in parts
            }
            starts = self._resolve(consumer, parts, self.start, lows_highs, is_end=False)
            stops = self._resolve(consumer, parts, self.end, lows_highs, is_end=True)
            for tp in parts:
                key = (tp.topic, tp.partition)
                ranges.append(PartitionRange(tp.topic, tp.partition, starts[key], stops[key]))
        finally:
            consumer.close()
        self._ranges = ranges
        return ranges

    def _resolve(
        self,
        consumer: Any,
        parts: list[Any],
        bound: Bound | None,
        watermarks: dict[tuple[str, int], tuple[int, int]],
        *,
        is_end: bool,
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        out: dict[tuple[str, int], int] = {}
        if bound is None or bound.kind == "offset":
            for tp in parts:
                low, high = watermarks[(tp.topic, tp.partition)]
                if bound is None:
                    value = high if is_end else low
                else:
                    value = bound.value + 1 if is_end else bound.value
                out[(tp.topic, tp.partition)] = min(max(value, low), high)
            return out
        # Time: the first offset whose record timestamp is >= t (for --to: > t).
        wanted = bound.value + 1 if is_end else bound.value
        query = [TopicPartition(tp.topic, tp.partition, wanted) for tp in parts]
        for tp in consumer.offsets_for_times(query, timeout=self.timeout_s):
            if tp.error is not None:
                raise ConfigError(
                    "--to" if is_end else "--from",
                    f"offsets_for_times on {tp.topic}[{tp.partition}] failed: {tp.error}",
                )
            low, high = watermarks[(tp.topic, tp.partition)]
            out[(tp.topic, tp.partition)] = (
                high if tp.offset < 0 else min(max(tp.offset, low), high)
            )
        return out

    @property
    def total(self) -> int:
        """Records in range (an upper bound: transaction markers take offsets too)."""
        return sum(r.size for r in self.plan())

    @property
    def prechecked(self) -> bool:
        """True when :attr:`check` is an :class:`IngestCheck` that covers every topic
        read (:meth:`IngestCheck.covers`): every event this reader yields then
        passed the router's ``event_error`` against its own session id, and
        :func:`~streams.replay.replay.replay_events` may skip that check
        (``prechecked=True``).  Uses the plan when one was given, else the topics."""
        check = self.check
        if not isinstance(check, IngestCheck):
            return False
        topics = {r.topic for r in self._ranges} if self._ranges is not None else set(self.topics)
        return all(check.covers(t) for t in topics)

    # -- reading -----------------------------------------------------------
    def batches(self) -> Iterator[list[Any]]:
        """Every record in range, as lists of librdkafka messages (one per ``consume``).

        Why lists: a replay spends a few microseconds per event in total, and one
        generator hop plus a tuple per record is a visible share of that; a loop
        over a list of messages is the cheapest way to hand them on.  Invariants:
        every message in a list has no error and an offset in its partition's
        ``[start, stop)``; partitions' messages keep their offset order; the read
        ends when every partition reached its stop offset (or its EOF).
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        ranges = [r for r in self.plan() if r.size > 0]
        if not ranges:
            return
        consumer = Consumer(self._config)
        stops = {(r.topic, r.partition): r.stop for r in ranges}
        pending = set(stops)
        began = time.monotonic()
        eof = KafkaError._PARTITION_EOF
        try:
            consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
            idle_since = time.monotonic()
            while pending:
                batch: list[Any] = consumer.consume(num_messages=self.batch_size, timeout=0.5)
                if not batch:
                    if time.monotonic() - idle_since > self.timeout_s:
                        left = ", ".join(f"{t}[{p}]" for t, p in sorted(pending))
                        first_topic, first_partition = min(pending)
                        raise ReplayReadError(
                            f"no data for {self.timeout_s:.0f} s while reading {left} on "
                            f"{self.bootstrap}; is the broker up? (raise --timeout if it is slow)",
                            topic=first_topic,
                            partition=first_partition,
                            retriable=True,
                        )
                    continue
                idle_since = time.monotonic()
                keep: list[Any] = []
                append = keep.append
                for msg in batch:
                    err = msg.error()
                    tkey = (msg.topic(), msg.partition())
                    if err is not None:
                        if err.code() == eof:
                            pending.discard(tkey)
                            continue
                        raise ReplayReadError.from_kafka(
                            f"reading {tkey[0]}[{tkey[1]}] on {self.bootstrap}: {err}",
                            err,
                            topic=tkey[0],
                            partition=tkey[1],
                        )
                    if tkey not in pending:
                        continue  # past its stop offset (batch overshoot), or done
                    offset = msg.offset()
                    stop = stops[tkey]
                    if offset >= stop:
                        pending.discard(tkey)
                        continue
                    if offset + 1 >= stop:
                        pending.discard(tkey)
                    append(msg)
                if keep:
                    yield keep
        finally:
            self.stats.elapsed_s += time.monotonic() - began
            consumer.close()

    def raw(self, headers: bool = False) -> Iterator[Any]:
        """``(topic, partition, offset, key, value)`` of every record in range, plus
        the record's headers list as a sixth item when ``headers``."""
        for batch in self.batches():
            for msg in batch:
                if headers:
                    yield (
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        msg.headers(),
                    )
                else:
                    yield msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()

    def __iter__(self) -> Iterator[T]:
        """Decoded values, failures recorded in ``stats`` (or raised when strict).

        ``on_batch`` (attribute, optional) is called with the number of records
        each consumed batch held once its values have all been handed on: the
        progress hook of a parallel replay's worker, instead of a call per event.
        """
        stats = self.stats
        decode = self.decode
        key_filter = self.key_filter
        check = self.check
        on_batch = self.on_batch
        decode_errors = (SerdeError, TrajectoryError)
        # counted in locals and added to ``stats`` after each batch (and when the
        # read stops early, e.g. --strict): three attribute updates per record
        # are a visible share of a replay's per-event cost
        records = size_total = decoded = 0
        ahead = self.DECODE_AHEAD
        try:
            for batch in self.batches():
                for start in range(0, len(batch), ahead):
                    # decode a slice, then hand its events on: decoding each event just
                    # before the core runs it cost a replay ~5 us more per event
                    # (docs/replay.md "Decode ahead"); failures keep their place
                    items: list[Any] = []
                    put = items.append
                    # counted as they are handed on (a caller may stop mid-slice)
                    sizes: list[int] = []
                    sized = sizes.append
                    for msg in batch[start : start + ahead]:
                        key = msg.key()
                        if key_filter is not None and not key_filter(key):
                            continue
                        value = msg.value()
                        if value is None:
                            put(_Failed(msg, key, "no value (tombstone)", None, False))
                            sized(0)
                            continue
                        size = len(value)
                        sized(size)
                        try:
                            item = decode(value)
                        except decode_errors as exc:
                            put(_Failed(msg, key, f"{type(exc).__name__}: {exc}", exc, True))
                            continue
                        if check is not None:
                            refused = check(item, msg.topic(), key, size)
                            if refused is not None:
                                put(
                                    _Failed(
                                        msg,
                                        key,
                                        f"refused as live ingest does: {refused}",
                                        None,
                                        True,
                                    )
                                )
                                continue
                        put(item)
                    for got, size in zip(items, sizes, strict=True):
                        records += 1
                        size_total += size
                        if type(got) is _Failed:
                            self._fail(*got.where(), got.reason, got.exc)
                            continue
                        decoded += 1
                        yield got
                stats.records += records
                stats.bytes += size_total
                stats.decoded += decoded
                records = size_total = decoded = 0
                if on_batch is not None:
                    on_batch(len(batch))
        finally:
            stats.records += records
            stats.bytes += size_total
            stats.decoded += decoded
        # partitions are consumed interleaved, in no fixed order: the report lists
        # the failures by coordinates, as a parallel replay's merge does
        stats.failures.sort(key=_failure_order)

    def _fail(
        self, topic: str, partition: int, offset: int, reason: str, exc: Exception | None = None
    ) -> None:
        failure = DecodeFailure(topic, partition, offset, reason)
        if self.strict:
            raise UndecodableRecordError(
                f"undecodable record {failure.describe()} (--strict)",
                topic=topic,
                partition=partition,
                offset=offset,
            ) from exc
        self.stats.failures.append(failure)


def _failure_order(f: DecodeFailure) -> tuple[str, int, int]:
    return f.topic, f.partition, f.offset


def session_key_filter(
    session_ids: Iterable[str] | None, pattern: str | None
) -> Callable[[bytes | None], bool] | None:
    """Key filter for ``<prefix>.events`` (key = session id): ids or an fnmatch glob."""
    if session_ids is None and pattern is None:
        return None
    wanted = {s.encode("utf-8") for s in session_ids or ()}

    def accept(key: bytes | None) -> bool:
        if key is None:
            return False
        if key in wanted:
            return True
        return pattern is not None and fnmatch.fnmatchcase(key.decode("utf-8", "replace"), pattern)

    return accept


def open_event_reader(
    bootstrap: str,
    prefix: str,
    *,
    session: str | None = None,
    sessions: str | None = None,
    source: Literal["sessions", "events"] = "sessions",
    start: Bound | None = None,
    end: Bound | None = None,
    strict: bool = False,
    timeout_s: float = 30.0,
    security: SecurityConfig | None = None,
) -> TopicReader[TraceEvent]:
    """The reader the CLI commands use: per-session topics or the routed events topic.

    ``security``: as for :class:`TopicReader` (None: the process-wide setting).
    """
    from streams.serde import EventSerde

    serde = EventSerde()
    if source == "sessions":
        topics = session_topics(
            bootstrap,
            prefix,
            session=session,
            pattern=sessions,
            timeout_s=timeout_s,
            security=security,
        )
        key_filter = None
    elif source == "events":
        if (session is None) == (sessions is None):
            raise ConfigError(
                "--session/--sessions", "give exactly one of --session ID or --sessions GLOB"
            )
        topics = [f"{prefix}.events"]
        key_filter = session_key_filter([session] if session else None, sessions)
    else:
        raise ConfigError("--source", f"{source!r}: use 'sessions' or 'events'")
    from streams.settings import Settings

    return TopicReader(
        bootstrap,
        topics,
        serde.decode,
        start=start,
        end=end,
        strict=strict,
        key_filter=key_filter,
        timeout_s=timeout_s,
        security=security,
        check=IngestCheck(prefix, Settings().max_message_bytes),
    )


__all__ = [
    "FAST_READ_CONFIG",
    "Bound",
    "DecodeFailure",
    "PartitionRange",
    "ReadStats",
    "ReplayReadError",
    "TopicReader",
    "open_event_reader",
    "parse_bound",
    "session_key_filter",
    "session_topics",
]
