"""Topic lifecycle: list session topics, find idle ones, archive and delete them.

Also the one "read a topic to its end" helper that :mod:`streams.snapshots` and
:mod:`streams.history` build on (:func:`scan_topic`).

Why: every agent session gets its own topic (``<prefix>.session.<id>``), so a
busy fleet leaves thousands of topics behind.  ``retention.ms`` empties them but
does not remove them; ``trajectory topics gc`` does, optionally archiving each
one to a file first.

Invariants:

* **Reads stop at the high watermark** taken when the scan starts: a scan always
  terminates, and records produced during it are not part of its answer.
* **Idleness is measured on the Kafka record timestamp** of a topic's newest
  record (the SDK leaves it to the producer, i.e. send time), not on the event's
  ``timestamp_ms``: a year-old trajectory replayed today is not idle.  A topic
  that was never written (high watermark 0) is never idle — its session may be
  starting right now; a topic whose records all expired (low == high > 0) is.
* **Never delete what could not be archived.**  With an archive requested, a
  topic is deleted only after its file was written, re-read and found to hold
  exactly the events the topic held; if the high watermark moved meanwhile (the
  session woke up), the topic is kept.  A small race remains between that last
  check and the delete call: stop the agents of sessions you collect.
* Byte sizes are not reported: confluent-kafka 2.16's Python ``AdminClient`` has
  no ``describe_log_dirs``; the message count comes from the watermarks.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

from streams.core.events import TraceEvent
from streams.errors import BrokerError, ConfigError, DeliveryError
from streams.security import client_config
from streams.settings import Settings
from streams.topics import admin_client, cluster_metadata

#: Archive file formats ``trajectory topics gc --archive-format`` knows.
ARCHIVE_FORMATS: Final[tuple[str, ...]] = ("jsonl", "avro")
ArchiveFormat = Literal["jsonl", "avro"]

_UNITS: Final[dict[str, int]] = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")


def parse_duration(text: str, *, name: str = "--idle-for") -> int:
    """``"7d"``, ``"12h"``, ``"1d12h"``, ``"90s"``, ``"250ms"`` -> milliseconds.

    Units: ``ms s m h d w``; parts add up; the result must be > 0.  Raises
    :class:`ConfigError` naming ``name`` otherwise.
    """
    if not isinstance(text, str):
        raise ConfigError(name, f"expected a duration string like '7d', got {type(text).__name__}")
    raw = text.strip().lower()
    pos = 0
    total = 0
    for m in _DURATION_PART.finditer(raw):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not raw or pos != len(raw):
        raise ConfigError(
            name, f"{text!r} is not a duration: use e.g. 7d, 12h, 30m, 1d12h (units ms s m h d w)"
        )
    if total <= 0:
        raise ConfigError(name, f"{text!r}: the duration must be greater than zero")
    return total


# ------------------------------------------------------------------ clients


def reader(settings: Settings, **extra: Any) -> Any:
    """A consumer for assign()-based reads: no group membership, nothing committed.

    librdkafka wants a ``group.id`` even for manual assignment; a throwaway one
    is used and offsets are never committed, so no group state is left behind.
    """
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "group.id": f"{settings.prefix}.reader.{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        **client_config(settings.security),
    }
    config.update(extra)
    return Consumer(config)


def topic_partitions(
    admin: Any, topic: str, *, settings: Settings, timeout_s: float = 15.0
) -> list[int]:
    """Partition ids of ``topic``; :class:`ConfigError` (naming the prefix) if it does not exist."""

    md = cluster_metadata(admin, settings, timeout_s=timeout_s)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise ConfigError(
            "prefix",
            f"topic {topic!r} does not exist on {settings.bootstrap} "
            f"(prefix {settings.prefix!r}: check --prefix / TRAJECTORY_PREFIX, or start the "
            "process that creates it)",
        )
    return sorted(tmd.partitions)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as read from Kafka (plain values, detached from librdkafka)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def header(self, name: str) -> str | None:
        """The last header called ``name`` decoded as UTF-8, or None."""
        for k, v in reversed(self.headers):
            if k == name:
                return None if v is None else v.decode("utf-8")
        return None


def scan_topic(
    settings: Settings,
    topic: str,
    *,
    start: Mapping[int, int] | None = None,
    timeout_s: float = 30.0,
    admin: Any = None,
) -> Iterator[RawRecord]:
    """Every record of ``topic`` from ``start`` (partition -> offset; default the
    low watermark) up to the high watermark taken now; partitions one after another.

    Raises :class:`ConfigError` if the topic does not exist and
    :class:`DeliveryError` if the broker does not deliver the records up to the
    watermark within ``timeout_s`` of silence.
    """
    from confluent_kafka import KafkaError, TopicPartition

    admin = admin if admin is not None else admin_client(settings)
    parts = topic_partitions(admin, topic, settings=settings)
    consumer = reader(settings)
    try:
        ranges: dict[int, tuple[int, int]] = {}
        for p in parts:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
            first = max(low, start.get(p, low) if start is not None else low)
            if first < high:
                ranges[p] = (first, high)
        if not ranges:
            return
        consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in ranges.items()])
        pending = dict(ranges)
        while pending:
            msg = consumer.poll(timeout_s)
            if msg is None:
                # Compaction or aborted transactions can leave the last offsets
                # without a record: the position tells whether we reached the end.
                positions = consumer.position([TopicPartition(topic, p) for p in pending])
                done = [tp.partition for tp in positions if tp.offset >= pending[tp.partition][1]]
                if not done:
                    raise DeliveryError(
                        f"reading {topic!r}: no record for {timeout_s} s before the high "
                        f"watermark (partitions {sorted(pending)}); is the broker healthy?"
                    )
                for p in done:
                    del pending[p]
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise DeliveryError(f"reading {topic!r}: {err}")
            p = msg.partition()
            if p not in pending:
                continue
            off = msg.offset()
            high = pending[p][1]
            if off >= high:
                del pending[p]
                continue
            ts_type, ts = msg.timestamp()
            yield RawRecord(
                topic=topic,
                partition=p,
                offset=off,
                timestamp_ms=ts if ts_type != 0 else None,
                key=msg.key(),
                value=msg.value(),
                headers=tuple(msg.headers() or ()),
            )
            if off >= high - 1:
                del pending[p]
    finally:
        consumer.close()


def last_records(
    settings: Settings, topics: Sequence[str], *, timeout_s: float = 30.0
) -> tuple[dict[str, tuple[int, int]], dict[str, RawRecord]]:
    """Watermarks (low, high summed over partitions) and newest record of each topic.

    "Newest" is the record at ``high - 1`` with the greatest record timestamp over
    the topic's partitions.  Topics without records have no entry in the second map.
    """
    from confluent_kafka import TopicPartition

    admin = admin_client(settings)
    md = admin.list_topics(timeout=timeout_s)
    consumer = reader(settings)
    marks: dict[str, tuple[int, int]] = {}
    newest: dict[str, RawRecord] = {}
    try:
        assign: list[Any] = []
        wanted: set[tuple[str, int]] = set()
        for t in topics:
            tmd = md.topics.get(t)
            if tmd is None or tmd.error is not None:
                continue
            lo_sum = hi_sum = 0
            for p in tmd.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(t, p), timeout=timeout_s, cached=False
                )
                lo_sum += low
                hi_sum += high
                if high > low:
                    assign.append(TopicPartition(t, p, high - 1))
                    wanted.add((t, p))
            marks[t] = (lo_sum, hi_sum)
        if assign:
            consumer.assign(assign)
        while wanted:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise DeliveryError(
                    f"reading the newest record of {len(wanted)} topic(s) timed out after "
                    f"{timeout_s} s (e.g. {sorted(wanted)[0][0]!r})"
                )
            if msg.error() is not None:
                raise DeliveryError(f"reading {msg.topic()!r}: {msg.error()}")
            tp = (msg.topic(), msg.partition())
            if tp not in wanted:
                continue
            wanted.discard(tp)
            ts_type, ts = msg.timestamp()
            rec = RawRecord(
                topic=tp[0],
                partition=tp[1],
                offset=msg.offset(),
                timestamp_ms=ts if ts_type != 0 else None,
                key=msg.key(),
                value=msg.value(),
                headers=tuple(msg.headers() or ()),
            )
            prev = newest.get(rec.topic)
            if prev is None or (rec.timestamp_ms or 0) > (prev.timestamp_ms or 0):
                newest[rec.topic] = rec
    finally:
        consumer.close()
    return marks, newest


# -------------------------------------------------------------- session topics


@dataclass(frozen=True, slots=True)
class SessionTopic:
    """One session topic: its message count and newest record.

    ``messages`` is ``high - low`` summed over partitions (what retention has not
    removed yet).  ``last_record_ms`` is the Kafka timestamp of the newest record,
    ``last_event_ms`` that record's event ``timestamp_ms`` (None when empty or
    undecodable: ``decode_error`` then says why).
    """

    topic: str
    session_id: str
    messages: int
    high_watermark: int
    last_record_ms: int | None = None
    last_event_ms: int | None = None
    last_seq: int | None = None
    decode_error: str | None = None


def session_id_of(settings: Settings, topic: str) -> str | None:
    """The session id of a session topic name, None for any other topic."""
    head = f"{settings.prefix}.session."
    if not topic.startswith(head) or not re.match(settings.session_topic_regex, topic):
        return None
    return topic[len(head) :]


def list_session_topics(
    settings: Settings, pattern: str | None = None, *, timeout_s: float = 30.0
) -> list[SessionTopic]:
    """Session topics of ``settings.prefix`` (session ids matching the glob
    ``pattern`` when given), sorted by session id."""

    from streams.serde import EventSerde

    admin = admin_client(settings)
    md = cluster_metadata(admin, settings, timeout_s=timeout_s)
    names: list[tuple[str, str]] = []
    for t in md.topics:
        sid = session_id_of(settings, t)
        if sid is not None and (pattern is None or fnmatch.fnmatchcase(sid, pattern)):
            names.append((sid, t))
    names.sort()
    marks, newest = last_records(settings, [t for _, t in names], timeout_s=timeout_s)
    serde = EventSerde(
        "confluent" if settings.schema_registry_url else "single-object",
        registry=settings.schema_registry_url,
    )
    out: list[SessionTopic] = []
    for sid, t in names:
        if t not in marks:
            continue  # deleted between the two metadata calls
        low, high = marks[t]
        rec = newest.get(t)
        ev: TraceEvent | None = None
        error: str | None = None
        if rec is not None and rec.value is not None:
            try:
                ev = serde.decode(rec.value)
            except Exception as exc:  # reported per topic, not hidden: see decode_error
                error = f"{type(exc).__name__}: {exc}"
        out.append(
            SessionTopic(
                topic=t,
                session_id=sid,
                messages=high - low,
                high_watermark=high,
                last_record_ms=rec.timestamp_ms if rec is not None else None,
                last_event_ms=ev.timestamp_ms if ev is not None else None,
                last_seq=ev.seq if ev is not None else None,
                decode_error=error,
            )
        )
    return out


def select_idle(topics: Iterable[SessionTopic], *, now_ms: int, idle_ms: int) -> list[SessionTopic]:
    """The topics whose newest record is at least ``idle_ms`` old at ``now_ms``.

    Pure (``now_ms`` is injected).  Never-written topics (high watermark 0) are
    never idle; fully expired ones (no records, high > 0) always are.
    """
    if idle_ms <= 0:
        raise ConfigError("idle_ms", f"must be > 0, got {idle_ms}")
    chosen: list[SessionTopic] = []
    for t in topics:
        if t.last_record_ms is None:
            if t.high_watermark > 0:
                chosen.append(t)
            continue
        if now_ms - t.last_record_ms >= idle_ms:
            chosen.append(t)
    return chosen


# ------------------------------------------------------------------- archives


def _serde(settings: Settings) -> Any:
    from streams.serde import EventSerde

    return EventSerde(
        "confluent" if settings.schema_registry_url else "single-object",
        registry=settings.schema_registry_url,
    )


def read_session_events(settings: Settings, topic: str) -> list[TraceEvent]:
    """Every event of a session topic up to its high watermark, decoded.

    A record that does not decode raises (naming topic, partition and offset):
    an archive that silently skipped records would not be an archive.
    """
    serde = _serde(settings)
    events: list[TraceEvent] = []
    for rec in scan_topic(settings, topic):
        if rec.value is None:
            raise DeliveryError(f"{topic}[{rec.partition}]@{rec.offset}: empty record value")
        try:
            events.append(serde.decode(rec.value))
        except Exception as exc:
            raise DeliveryError(
                f"{topic}[{rec.partition}]@{rec.offset}: cannot decode the event ({exc}); "
                "not archiving a topic that cannot be read completely"
            ) from exc
    return events


def write_archive(events: Sequence[TraceEvent], path: Path, fmt: ArchiveFormat) -> None:
    """Write ``events`` to ``path`` (via a temporary file, renamed when complete)."""
    if fmt not in ARCHIVE_FORMATS:
        raise ConfigError("--archive-format", f"{fmt!r}: use one of {', '.join(ARCHIVE_FORMATS)}")
    tmp = path.with_name(path.name + ".partial")
    if fmt == "jsonl":
        from streams.core.jsonl import dumps_event

        with tmp.open("w", encoding="utf-8") as fh:
            for ev in events:
                fh.write(dumps_event(ev))
                fh.write("\n")
    else:
        import fastavro

        from streams.serde import EventSerde, load_schema

        serde = EventSerde("single-object")
        schema = fastavro.parse_schema(load_schema("trace_event"))
        with tmp.open("wb") as fh:
            fastavro.writer(fh, schema, [serde.to_record(ev) for ev in events], codec="deflate")
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_archive(path: Path, fmt: ArchiveFormat) -> list[TraceEvent]:
    """Read an archive written by :func:`write_archive` back into events."""
    if fmt == "jsonl":
        from streams.core.jsonl import read_jsonl

        with path.open(encoding="utf-8") as fh:
            return list(read_jsonl(fh, source=str(path)))
    if fmt == "avro":
        import fastavro

        from streams.serde import EventSerde
        from streams.serde.schemas import codec_schema

        serde = EventSerde("single-object")
        with path.open("rb") as fh:
            # fastavro applies the writer's timestamp-millis logical type even with
            # a reader schema without it: turn those datetimes back into epoch ms.
            return [
                serde.from_record(_epoch_ms(r))
                for r in fastavro.reader(fh, reader_schema=codec_schema("trace_event"))
            ]
    raise ConfigError("--archive-format", f"{fmt!r}: use one of {', '.join(ARCHIVE_FORMATS)}")


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_ms(value: Any) -> Any:
    """Recursively replace timezone-aware datetimes by exact epoch milliseconds."""
    if isinstance(value, datetime):
        return (value - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, dict):
        return {k: _epoch_ms(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_epoch_ms(v) for v in value]
    return value


def archive_path(directory: Path, topic: str, fmt: ArchiveFormat) -> Path:
    return directory / f"{topic}.{fmt}"


def archive_topic(
    settings: Settings, topic: str, directory: Path, fmt: ArchiveFormat
) -> tuple[Path, int]:
    """Archive one session topic and verify the file; returns (path, events).

    Refuses to overwrite an existing archive (an earlier one may hold records that
    retention has since removed from the topic).  Verification re-reads the file
    and compares it event for event with what was read from the topic.
    """
    path = archive_path(directory, topic, fmt)
    if path.exists():
        raise ConfigError(
            "--archive",
            f"{path} already exists; move it away (it may hold records the topic no longer has)",
        )
    directory.mkdir(parents=True, exist_ok=True)
    events = read_session_events(settings, topic)
    write_archive(events, path, fmt)
    back = read_archive(path, fmt)
    if back != events:
        raise DeliveryError(
            f"archive {path} does not read back to the topic's events "
            f"({len(back)} read back vs {len(events)} in {topic!r}); the topic was not deleted"
        )
    return path, len(events)


# ------------------------------------------------------------------------ gc


@dataclass(frozen=True, slots=True)
class GcAction:
    """What gc did (or, in a dry run, would do) with one idle topic."""

    topic: str
    messages: int
    last_record_ms: int | None
    archive: str | None = None
    archived_events: int | None = None
    deleted: bool = False
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class GcReport:
    now_ms: int
    idle_ms: int
    examined: int
    actions: tuple[GcAction, ...] = field(default_factory=tuple)
    dry_run: bool = False


def delete_topics(settings: Settings, topics: Sequence[str], *, timeout_s: float = 30.0) -> None:
    """Delete ``topics`` and wait for the broker to confirm each."""
    from confluent_kafka import KafkaException

    if not topics:
        return
    admin = admin_client(settings)
    futures = admin.delete_topics(
        list(topics), operation_timeout=timeout_s, request_timeout=timeout_s
    )
    failed: list[str] = []
    for topic, fut in futures.items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            failed.append(f"{topic}: {exc}")
    if failed:
        raise DeliveryError("deleting topics failed: " + "; ".join(failed))
    # The controller confirmed; a broker's metadata applies the deletion a moment
    # later (KRaft brokers replay the metadata log behind the controller).  Wait for
    # it, so "deleted" means a listing made right after no longer shows them.
    deadline = time.monotonic() + timeout_s
    while True:
        listed = set(admin.list_topics(timeout=timeout_s).topics) & set(topics)
        if not listed:
            return
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topics still listed by {settings.bootstrap} {timeout_s} s after their "
                f"deletion was confirmed: {', '.join(sorted(listed))} (is every broker up?)"
            )
        time.sleep(0.05)


def gc(
    settings: Settings,
    *,
    now_ms: int,
    idle_ms: int | None = None,
    pattern: str | None = None,
    archive_dir: Path | None = None,
    archive_format: ArchiveFormat = "jsonl",
    dry_run: bool = True,
) -> GcReport:
    """Archive (optional) and delete the idle session topics; see the module docstring.

    ``idle_ms`` defaults to ``settings.session_retention_ms``.  With ``dry_run``
    nothing is written or deleted: the report lists what would be.
    """
    idle = settings.session_retention_ms if idle_ms is None else idle_ms
    if archive_format not in ARCHIVE_FORMATS:
        raise ConfigError(
            "--archive-format", f"{archive_format!r}: use one of {', '.join(ARCHIVE_FORMATS)}"
        )
    infos = list_session_topics(settings, pattern)
    idle_topics = select_idle(infos, now_ms=now_ms, idle_ms=idle)
    actions: list[GcAction] = []
    for t in idle_topics:
        target = (
            str(archive_path(archive_dir, t.topic, archive_format))
            if archive_dir is not None
            else None
        )
        if dry_run:
            actions.append(GcAction(t.topic, t.messages, t.last_record_ms, archive=target))
            continue
        archived: int | None = None
        if archive_dir is not None:
            _, archived = archive_topic(settings, t.topic, archive_dir, archive_format)
            # The session may have woken up while we archived: keep it then.
            marks, _ = last_records(settings, [t.topic])
            low_now, high_now = marks.get(t.topic, (0, 0))
            if high_now != t.high_watermark:
                actions.append(
                    GcAction(
                        t.topic,
                        t.messages,
                        t.last_record_ms,
                        archive=target,
                        archived_events=archived,
                        skipped="new records arrived while archiving; kept",
                    )
                )
                continue
            if archived != high_now - low_now:
                raise DeliveryError(
                    f"{t.topic}: archived {archived} events but the topic holds "
                    f"{high_now - low_now}; not deleting it"
                )
        delete_topics(settings, [t.topic])
        actions.append(
            GcAction(
                t.topic,
                t.messages,
                t.last_record_ms,
                archive=target,
                archived_events=archived,
                deleted=True,
            )
        )
    return GcReport(
        now_ms=now_ms, idle_ms=idle, examined=len(infos), actions=tuple(actions), dry_run=dry_run
    )


def report_json(report: GcReport) -> str:
    """The report as one JSON object (stable key order)."""
    from dataclasses import asdict

    return json.dumps(asdict(report), sort_keys=True, ensure_ascii=False)


__all__ = [
    "ARCHIVE_FORMATS",
    "ArchiveFormat",
    "GcAction",
    "GcReport",
    "RawRecord",
    "SessionTopic",
    "admin_client",
    "archive_path",
    "archive_topic",
    "delete_topics",
    "gc",
    "last_records",
    "list_session_topics",
    "parse_duration",
    "read_archive",
    "read_session_events",
    "reader",
    "report_json",
    "scan_topic",
    "select_idle",
    "session_id_of",
    "topic_partitions",
    "write_archive",
]
