"""Mapped spans and log events → numbered session events, published through the SDK.

:class:`Ingest` is the receiver's state: one publisher :class:`~streams.sdk.Session`
per session id it has seen, and the dedup keys of the items it has published.

Invariants:

* **Duplicates do not count twice.**  An OTLP exporter retries a whole request
  when it does not get an answer in time, so the same span (trace id + span id)
  or log record (hash of its time, name, ids, body and attributes) can arrive
  again; an item whose key was already published is counted as a duplicate and
  sends nothing.  The keys of the last ``dedup_capacity`` items are remembered
  (oldest forgotten first).  An item's key is remembered (:meth:`Ingest.commit`)
  only after the producer confirmed the delivery of the whole request; a request
  whose delivery failed (broker down: 503) is published again on retry, so a
  failure repeats events (new ``seq``) rather than losing them.
* **One order per session.**  Within a request, a session's events are sent in
  the order the file importer uses (time, then model step < call < result, then
  arrival), with a clock that never goes back (a late span is stamped with the
  session's last time), and call ids are made unique per session as the file
  importer does (``id``, ``id#1`` ...), so spans sent live and the same spans
  read from a file give the same events.
* **A receiver restart continues a session's ``seq``.**  The first time a
  process sees a session whose topic already holds events (an earlier receiver
  run), it reads the last record and continues after its ``seq`` instead of
  starting again at 0 (consumers would drop those as duplicates).
* Single-threaded: the server calls :meth:`Ingest.ingest` from one worker thread.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from streams.core.events import TraceEvent
from streams.errors import DeliveryError, TrajectoryError
from streams.importers._common import sanitize_session_id
from streams.importers.otlp import (
    FORMAT,
    LogRecord,
    Mapped,
    MappingError,
    Pending,
    Span,
    map_log,
    map_span,
)
from streams.security import client_config, explain_kafka_error

#: Dedup keys remembered (about 100 bytes each).
DEFAULT_DEDUP_CAPACITY: Final = 1_000_000
#: Kafka error codes of a topic created a moment ago that the broker or this
#: client's metadata does not list yet: UNKNOWN_TOPIC_OR_PART (3),
#: LEADER_NOT_AVAILABLE (5), NOT_LEADER (6), and librdkafka's local
#: _UNKNOWN_PARTITION (-190) and _UNKNOWN_TOPIC (-188) (seen under load: the
#: export was answered 503 although the topic had just been created).
_NO_LEADER_YET: Final = frozenset({3, 5, 6, -190, -188})
#: The two of them that come from this client's metadata cache, not the broker.
_LOCAL_UNKNOWN: Final = frozenset({-190, -188})
#: Rejection reasons listed in one ``partial_success.error_message``.
_SHOWN_REASONS: Final = 10


@dataclass
class IngestResult:
    """What one request gave: counts per outcome and a reason per rejected item."""

    accepted: int = 0
    duplicates: int = 0
    ignored: int = 0
    events: int = 0
    new_sessions: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (reason class, text)
    keys: list[str] = field(default_factory=list)  # dedup keys to remember once delivered

    def error_message(self) -> str:
        """``partial_success.error_message``: the first reasons, then how many more."""
        texts = [t for _, t in self.rejected[:_SHOWN_REASONS]]
        more = len(self.rejected) - len(texts)
        return "; ".join(texts) + (f"; and {more} more" if more > 0 else "")


@dataclass
class _Live:
    """The receiver's side of one session: its SDK session and call-id counts."""

    session: Any  # streams.sdk.publisher.Session
    call_counts: dict[str, int] = field(default_factory=dict)
    call_ids: dict[str, str] = field(default_factory=dict)
    last_ts: int | None = None

    def unique_call_id(self, raw: str) -> str:
        n = self.call_counts.get(raw, 0)
        self.call_counts[raw] = n + 1
        unique = raw if n == 0 else f"{raw}#{n}"
        self.call_ids[raw] = unique
        return unique


class Ingest:
    """Maps, deduplicates, numbers and publishes OTLP items (see the module docstring)."""

    def __init__(
        self,
        publisher: Any,
        *,
        dedup_capacity: int = DEFAULT_DEDUP_CAPACITY,
        resume: bool = True,
    ) -> None:
        self.publisher = publisher
        self.dedup_capacity = dedup_capacity
        self.resume = resume
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._live: dict[str, _Live] = {}
        self._consumer: Any = None

    @property
    def sessions(self) -> int:
        return len(self._live)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- the one entry point -----------------------------------------------------
    def ingest(self, items: Sequence[tuple[str, Span | LogRecord | MappingError]]) -> IngestResult:
        """Publish the events of *items*; raises DeliveryError when Kafka fails."""
        result = IngestResult()
        batch: dict[str, list[Mapped]] = {}
        keys_now: set[str] = set()
        for where, item in items:
            if isinstance(item, MappingError):
                result.rejected.append(("malformed", str(item)))
                continue
            try:
                mapped = map_span(item) if isinstance(item, Span) else map_log(item)
            except MappingError as exc:
                result.rejected.append(("unmappable", f"{where}.{exc}"))
                continue
            if mapped is None:
                result.ignored += 1
                continue
            if mapped.key in self._seen or mapped.key in keys_now:
                result.duplicates += 1
                continue
            keys_now.add(mapped.key)
            batch.setdefault(sanitize_session_id(mapped.session), []).append(mapped)
        if not batch:
            return result
        self._open_sessions(batch, result)
        for sid, mapped_items in batch.items():
            self._publish(sid, mapped_items, result)
        return result

    # -- sessions ----------------------------------------------------------------
    def _open_sessions(self, batch: dict[str, list[Mapped]], result: IngestResult) -> None:
        new = [sid for sid in batch if sid not in self._live]
        if not new:
            return
        pub = self.publisher
        pub.ensure_session_topics(new)  # one admin request for every new session
        for sid in new:
            first_ts = min(p.ts for m in batch[sid] for p in m.items)
            session = pub.session(
                sid, metadata={"source_format": FORMAT}, timestamp_ms=first_ts, flush_on_exit=False
            )
            live = _Live(session)
            resumed = self._resume_point(session.topic) if self.resume else None
            if resumed is not None:
                _continue_session(session, resumed)
                live.last_ts = resumed.timestamp_ms
            else:
                session.start()
                live.last_ts = first_ts
                result.new_sessions += 1
            self._live[sid] = live

    def _resume_point(self, topic: str) -> TraceEvent | None:
        """The last event on *topic* if it has any (an earlier receiver's session)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if self._consumer is None:
            settings = self.publisher.settings
            self._consumer = Consumer(
                {
                    "bootstrap.servers": settings.bootstrap,
                    # the receiver's credential, as its publisher has it: without it
                    # this read failed on every secured cluster, for every new session
                    **client_config(settings.security),
                    # assign() only, nothing committed: the group is never joined, but
                    # a name under the deployment's prefix is what its ACLs cover
                    "group.id": f"{settings.prefix}.otlp-resume",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
        tp = TopicPartition(topic, 0)
        deadline = time.monotonic() + 15.0
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=10.0)
                break
            except KafkaException as exc:
                # A topic created a moment ago may have no leader yet: retry that.
                if not exc.args[0].retriable() and exc.args[0].code() not in _NO_LEADER_YET:
                    raise self._read_error(
                        f"cannot read the offsets of {topic}", exc.args[0]
                    ) from exc
                if time.monotonic() > deadline:
                    raise self._read_error(
                        f"cannot read the offsets of {topic}", exc.args[0]
                    ) from exc
                if exc.args[0].code() in _LOCAL_UNKNOWN:
                    # librdkafka answers these from its own metadata cache, which a
                    # watermark query does not refresh: ask for the cluster's
                    # metadata (all topics: naming one could auto-create it).
                    self._consumer.list_topics(timeout=5.0)
                time.sleep(0.1)
        if high <= low:
            return None
        self._consumer.assign([TopicPartition(topic, 0, high - 1)])
        try:
            msg = self._consumer.poll(10.0)
            while msg is not None and msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF: last record was a marker
                    return None
                raise self._read_error(f"cannot read the last event of {topic}", msg.error())
            if msg is None:
                raise DeliveryError(f"cannot read the last event of {topic} within 10 s")
            event: TraceEvent = self.publisher.serde.decode(msg.value())
            return event
        finally:
            self._consumer.unassign()

    def _read_error(self, what: str, err: Any) -> DeliveryError:
        """``what`` failed with ``err`` (a ``KafkaError``): a DeliveryError, which names the
        credential the receiver needs when Kafka refused it (an ACL, the login, TLS).

        Why: the receiver reads back each session topic it opens, so a credential
        that may only write (an ``agent`` one) publishes a new session and then
        fails on the first session a restarted receiver continues."""
        explained = explain_kafka_error(err, self.publisher.settings.security)
        if explained is None:
            return DeliveryError(f"{what}: {err}")
        return DeliveryError(
            f"{what}: {explained}.  The OTLP receiver reads the last event of each "
            "session topic it opens (a restarted receiver continues the seq), so its "
            "credential needs to read the session topics as well as write them: the "
            "service role (`trajectory acl grant service --user NAME`, docs/otlp.md)"
        )

    # -- publishing -----------------------------------------------------------------
    def _publish(self, sid: str, mapped_items: list[Mapped], result: IngestResult) -> None:
        live = self._live[sid]
        pending: list[tuple[Pending, Mapped]] = []
        order = 0
        for m in mapped_items:
            for p in m.items:
                order += 1
                p.order = order
                pending.append((p, m))
        pending.sort(key=lambda pm: (pm[0].ts, pm[0].rank, pm[0].order))
        failed: set[str] = set()
        sent: dict[str, int] = {}
        for p, m in pending:
            if m.key in failed:
                continue
            fields = dict(p.fields)
            if p.etype == "tool_call":
                fields["call_id"] = live.unique_call_id(fields["call_id"])
            elif p.etype == "tool_result":
                fields["call_id"] = live.call_ids.get(fields["call_id"], fields["call_id"])
            ts = p.ts if live.last_ts is None else max(p.ts, live.last_ts)
            event = TraceEvent(type=p.etype, session_id=sid, seq=0, timestamp_ms=ts, **fields)
            try:
                live.session.emit(event)
            except DeliveryError:
                raise
            except TrajectoryError as exc:
                # Not encodable (e.g. a NaN double attribute): this item is rejected; an
                # event of it that was already sent stays (its key is remembered below).
                failed.add(m.key)
                result.rejected.append(("unencodable", f"{m.key}: {exc}"))
                continue
            live.last_ts = ts
            sent[m.key] = sent.get(m.key, 0) + 1
            result.events += 1
        for m in mapped_items:
            if m.key in sent or m.key in failed:
                result.keys.append(m.key)
            if m.key not in failed:
                result.accepted += 1

    def commit(self, result: IngestResult) -> None:
        """Remember *result*'s items as published: call once their delivery is confirmed."""
        for key in result.keys:
            self._seen[key] = None
        while len(self._seen) > self.dedup_capacity:
            self._seen.popitem(last=False)

    def forget_sessions(self, session_ids: Iterable[str]) -> None:
        """Drop the receiver's state of sessions (tests; a later item resumes them)."""
        for sid in session_ids:
            self._live.pop(sid, None)


def _continue_session(session: Any, last: TraceEvent) -> None:
    """Make a fresh SDK session continue after *last* (already on its topic).

    The publisher SDK numbers from 0 and starts with ``session_start``; a session
    an earlier receiver began must continue at ``last.seq + 1`` with no second
    start.  The SDK's Session keeps that in ``_seq`` / ``_last_ts`` / ``_started``.
    """
    session._seq = last.seq + 1
    session._last_ts = last.timestamp_ms
    session._started = True


__all__ = ["DEFAULT_DEDUP_CAPACITY", "Ingest", "IngestResult"]
