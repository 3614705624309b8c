"""Snapshots of a session's observer state on Kafka: the contract and its helpers.

Contract between agents, the worker and the CLI (also in ``docs/snapshots.md``)
===============================================================================

**Asking.**  An agent asks for a restore point by publishing a ``snapshot``
control event (``type="snapshot"``, ``metadata["snapshot_id"] = ID``) in its own
session topic, through the SDK (:meth:`streams.sdk.Session.snapshot`) so that it
gets the session's next ``seq``.  It goes back with a ``restore`` control event
(``metadata["snapshot_id"] = ID``; :meth:`streams.sdk.Session.restore`).

**The worker, on a snapshot event**:

1. applies it with ``out = engine.on_event(ev)``; the engine records the restore
   point ``ID`` in its own state (at most ``EngineConfig.max_snapshots`` are kept,
   oldest evicted; re-using an id replaces it);
2. if ``out.applied``: produces to the compacted ``settings.snapshots_topic``
   (``<prefix>.snapshots``, see :func:`ensure_snapshots_topic`)

   * key   = :func:`snapshot_key` ``(session_id, ID)`` = ``f"{session_id}/{ID}"`` UTF-8,
   * value = :func:`snapshot_value` ``(engine.snapshot(), ID)``,
   * headers = :func:`snapshot_headers` ``(ev)``: ``session_id``, ``snapshot_id``,
     ``seq``, ``timestamp_ms`` (UTF-8 strings).

**What the stored value is, precisely.**  ``encode_state`` of the restore point
the engine recorded *while applying the snapshot event*: the session state
**after** the snapshot event (``last_seq`` = the snapshot event's seq, the event
clock includes its ``timestamp_ms``; a snapshot event touches nothing else: no
analysis, observer, budget or assessment change) with an empty restore-point
store (``snapshots=()``: points do not nest).  It is *not* the state before the
event: that one would differ in ``last_seq`` and the clock only, and the engine
would never go back to it.  A ``restore`` of ``ID`` makes the engine load exactly
this value, except that ``last_seq`` becomes the restore event's seq and the
event clock never goes backwards (``last_event_ms = max(point, restore event)``)
— so dedupe keeps working and later events continue from there.  Everything
else (trajectory window, observer states, budget and token count, current
assessment, assessment history, profile) is the point's, byte for byte.

**After a restore** ``on_event`` returns ``applied=True`` with no assessment,
but ``engine.current`` is now the restored point's assessment: the worker should
republish it (``<prefix>.assessments`` is "the latest"), otherwise readers keep
seeing the abandoned branch's assessment until the next one is made.

**Restore of an unknown id** (never taken, or evicted by ``max_snapshots``): the
engine raises :class:`~streams.errors.InvalidEventError` on
``metadata.snapshot_id`` and changes nothing; the worker dead-letters the event
with that message as the reason.  The snapshots topic is the durable, queryable
copy (``trajectory snapshot list|show``); the engine's own store is what
``restore`` uses, so a snapshot present on the topic but evicted from the engine
cannot be restored.

**Deleting** a snapshot from the topic is a tombstone (null value) on its key;
readers here treat it as gone.

**From outside the agent** (``trajectory snapshot create|restore``):
:func:`request_snapshot` / :func:`request_restore` publish the control event
themselves.  They find the next ``seq`` by reading the last record of the
session's single-partition topic — meant for **paused** sessions: an agent
publishing at the same moment can take the same ``seq``, and the engine then
drops whichever arrives second as a duplicate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from streams.core.engine import SessionState
from streams.core.events import META_SNAPSHOT_ID, TraceEvent
from streams.core.statecodec import decode_state, encode_state
from streams.errors import DeliveryError, InvalidEventError
from streams.security import client_config
from streams.settings import Settings, check_session_id
from streams.topics import ensure_snapshots_topic

#: Longest snapshot id accepted (it is part of a Kafka key and shown in tables).
MAX_SNAPSHOT_ID_LEN: Final = 200
#: Header names on ``<prefix>.snapshots`` records.
HEADER_NAMES: Final[tuple[str, ...]] = ("session_id", "snapshot_id", "seq", "timestamp_ms")


def check_snapshot_id(snapshot_id: object, *, field: str = f"metadata.{META_SNAPSHOT_ID}") -> str:
    """A snapshot id is 1-200 printable characters (no control characters)."""
    if not isinstance(snapshot_id, str) or not snapshot_id:
        raise InvalidEventError(field, f"expected a non-empty string, got {snapshot_id!r}")
    if len(snapshot_id) > MAX_SNAPSHOT_ID_LEN:
        raise InvalidEventError(
            field, f"{len(snapshot_id)} characters; use at most {MAX_SNAPSHOT_ID_LEN}"
        )
    if not snapshot_id.isprintable():
        raise InvalidEventError(field, f"{snapshot_id!r} contains control characters")
    return snapshot_id


def snapshot_key(session_id: str, snapshot_id: str) -> bytes:
    """``f"{session_id}/{snapshot_id}"`` as UTF-8 (session ids never contain ``/``)."""
    check_session_id(session_id)
    check_snapshot_id(snapshot_id)
    return f"{session_id}/{snapshot_id}".encode()


def parse_snapshot_key(key: bytes | str) -> tuple[str, str]:
    """Inverse of :func:`snapshot_key`: ``(session_id, snapshot_id)``.

    The split is at the first ``/`` (a session id has none; a snapshot id may).
    Raises :class:`InvalidEventError` on ``key`` for anything else.
    """
    if isinstance(key, bytes):
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEventError("key", f"snapshot key is not UTF-8: {key!r}") from exc
    elif isinstance(key, str):
        text = key
    else:
        raise InvalidEventError("key", f"expected bytes or str, got {type(key).__name__}")
    sid, sep, snap = text.partition("/")
    if not sep:
        raise InvalidEventError("key", f"{text!r} is not '<session_id>/<snapshot_id>'")
    try:
        check_session_id(sid)
        check_snapshot_id(snap)
    except InvalidEventError as exc:
        raise InvalidEventError("key", f"{text!r}: {exc}") from exc
    return sid, snap


def snapshot_headers(event: TraceEvent) -> list[tuple[str, bytes]]:
    """Record headers for the snapshot taken by ``event`` (a ``snapshot`` event)."""
    if event.type != "snapshot":
        raise InvalidEventError("type", f"expected a snapshot event, got {event.type!r}")
    snap = check_snapshot_id(event.metadata.get(META_SNAPSHOT_ID))
    return [
        ("session_id", event.session_id.encode("utf-8")),
        ("snapshot_id", snap.encode("utf-8")),
        ("seq", str(event.seq).encode("ascii")),
        ("timestamp_ms", str(event.timestamp_ms).encode("ascii")),
    ]


def restore_point(state: SessionState, snapshot_id: str) -> SessionState:
    """The restore point ``snapshot_id`` held in an engine state (``engine.snapshot()``)."""
    for sid, point in state.snapshots:
        if sid == snapshot_id:
            return point
    known = ", ".join(k for k, _ in state.snapshots) or "none"
    raise InvalidEventError(
        f"metadata.{META_SNAPSHOT_ID}",
        f"no snapshot {snapshot_id!r} in the state of session {state.session_id!r} "
        f"(known: {known})",
    )


def snapshot_value(state: SessionState, snapshot_id: str) -> bytes:
    """The value to store: ``encode_state`` of the restore point (see the module docstring).

    ``state`` is ``engine.snapshot()`` taken right after the snapshot event was applied.
    """
    return encode_state(restore_point(state, snapshot_id))


def decode_snapshot(value: bytes) -> SessionState:
    """The :class:`SessionState` stored in a snapshot record's value."""
    state = decode_state(value)
    if not isinstance(state, SessionState):
        raise InvalidEventError("value", f"decoded {type(state).__name__}, not a SessionState")
    return state


# ------------------------------------------------------------------- the topic

# The topic's spec and creation (compacted, checked if it exists) live with every
# other topic's in streams.topics; re-exported here where the contract names it.


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One stored snapshot (the latest value of its key), without its state bytes."""

    session_id: str
    snapshot_id: str
    seq: int | None
    timestamp_ms: int | None
    size: int
    partition: int
    offset: int


def _read_snapshots(settings: Settings) -> dict[tuple[str, str], tuple[SnapshotInfo, bytes]]:
    """Latest value per key up to the high watermark; tombstones delete."""
    from streams.lifecycle import scan_topic

    latest: dict[tuple[str, str], tuple[SnapshotInfo, bytes]] = {}
    for rec in scan_topic(settings, settings.snapshots_topic):
        if rec.key is None:
            raise InvalidEventError(
                "key",
                f"{rec.topic}[{rec.partition}]@{rec.offset} has no key; snapshot records are "
                "keyed '<session_id>/<snapshot_id>'",
            )
        sid, snap = parse_snapshot_key(rec.key)
        if rec.value is None:
            latest.pop((sid, snap), None)
            continue
        seq = rec.header("seq")
        ts = rec.header("timestamp_ms")
        info = SnapshotInfo(
            session_id=sid,
            snapshot_id=snap,
            seq=int(seq) if seq is not None else None,
            timestamp_ms=int(ts) if ts is not None else None,
            size=len(rec.value),
            partition=rec.partition,
            offset=rec.offset,
        )
        latest.pop((sid, snap), None)  # re-insert: dict order = order of latest write
        latest[(sid, snap)] = (info, rec.value)
    return latest


def list_snapshots(settings: Settings, session_id: str | None = None) -> list[SnapshotInfo]:
    """Stored snapshots (of ``session_id`` when given), by session then seq."""
    if session_id is not None:
        check_session_id(session_id)
    infos = [
        info
        for (sid, _), (info, _) in _read_snapshots(settings).items()
        if session_id is None or sid == session_id
    ]
    infos.sort(key=lambda i: (i.session_id, -1 if i.seq is None else i.seq, i.snapshot_id))
    return infos


def get_snapshot(settings: Settings, session_id: str, snapshot_id: str) -> bytes:
    """The canonical state bytes of one stored snapshot (latest value of its key)."""
    check_session_id(session_id)
    check_snapshot_id(snapshot_id)
    found = _read_snapshots(settings)
    hit = found.get((session_id, snapshot_id))
    if hit is None:
        known = sorted(s for (sid, s) in found if sid == session_id)
        raise InvalidEventError(
            f"metadata.{META_SNAPSHOT_ID}",
            f"no snapshot {snapshot_id!r} of session {session_id!r} in "
            f"{settings.snapshots_topic!r} (stored: {', '.join(known) or 'none'})",
        )
    return hit[1]


# ---------------------------------------------------- requests from outside


def _last_event(settings: Settings, session_id: str) -> TraceEvent | None:
    """The newest event of a session topic (None if it never had one)."""
    from confluent_kafka import TopicPartition

    from streams.lifecycle import reader
    from streams.serde import EventSerde
    from streams.topics import admin_client

    topic = settings.session_topic(session_id)
    md = admin_client(settings).list_topics(timeout=15.0)  # no topic=: that may auto-create it
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise InvalidEventError(
            "session_id",
            f"session {session_id!r} has no topic {topic!r} on {settings.bootstrap} "
            f"(prefix {settings.prefix!r}); check the id and --prefix",
        )
    if len(tmd.partitions) != 1:
        raise InvalidEventError(
            "session_id",
            f"{topic!r} has {len(tmd.partitions)} partitions; session topics have one "
            "(seq order is only defined on one partition)",
        )
    consumer = reader(settings)
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=15.0, cached=False)
        if high == 0:
            return None
        if low >= high:
            raise InvalidEventError(
                "session_id",
                f"{topic!r} is empty (all {high} records expired): its next seq is unknown",
            )
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                raise DeliveryError(f"reading {topic!r}: {msg.error()}")
            serde = EventSerde(
                "confluent" if settings.schema_registry_url else "single-object",
                registry=settings.schema_registry_url,
            )
            return serde.decode(msg.value())
        raise DeliveryError(f"reading the last record of {topic!r} timed out after 30 s")
    finally:
        consumer.close()


def _request(
    settings: Settings,
    session_id: str,
    etype: str,
    snapshot_id: str,
    *,
    timestamp_ms: int | None = None,
) -> TraceEvent:
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    check_session_id(session_id)
    check_snapshot_id(snapshot_id)
    last = _last_event(settings, session_id)
    now = timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000
    if last is not None:
        now = max(now, last.timestamp_ms)  # event time stays monotone within a session
    event = TraceEvent(
        type=etype,  # type: ignore[arg-type]
        session_id=session_id,
        seq=0 if last is None else last.seq + 1,
        timestamp_ms=now,
        agent_id=last.agent_id if last is not None else None,
        parent_session_id=last.parent_session_id if last is not None else None,
        metadata={META_SNAPSHOT_ID: snapshot_id, "requested_by": "cli"},
    )
    serde = EventSerde(
        "confluent" if settings.schema_registry_url else "single-object",
        registry=settings.schema_registry_url,
        max_bytes=settings.max_message_bytes,
    )
    data = serde.encode(event)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            **client_config(settings.security),
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    topic = settings.session_topic(session_id)
    producer.produce(topic, value=data, key=session_id.encode("utf-8"), on_delivery=on_delivery)
    left = producer.flush(30.0)
    if errors or left:
        raise DeliveryError(
            f"{etype} request to {topic!r} was not acknowledged: {'; '.join(errors) or 'timeout'}"
        )
    return event


def request_snapshot(
    settings: Settings, session_id: str, snapshot_id: str | None = None
) -> TraceEvent:
    """Publish a ``snapshot`` control event into a (paused) session; returns it.

    ``snapshot_id`` defaults to ``snap-<seq>`` like :meth:`Session.snapshot`.
    """
    if snapshot_id is None:
        last = _last_event(settings, session_id)
        snapshot_id = f"snap-{0 if last is None else last.seq + 1}"
    return _request(settings, session_id, "snapshot", snapshot_id)


def request_restore(
    settings: Settings, session_id: str, snapshot_id: str, *, check: bool = True
) -> TraceEvent:
    """Publish a ``restore`` control event into a (paused) session; returns it.

    With ``check`` the snapshot must be stored on ``<prefix>.snapshots`` (a typo
    would otherwise only show up as a dead-lettered event).  The engine's own
    store decides in the end: a snapshot evicted by ``max_snapshots`` is still
    dead-lettered.
    """
    if check:
        get_snapshot(settings, session_id, snapshot_id)
    return _request(settings, session_id, "restore", snapshot_id)


def state_summary(state: SessionState) -> dict[str, Any]:
    """A human-sized summary of a stored state (``trajectory snapshot show``)."""
    analysis = state.analysis
    window = len(analysis.window) if analysis is not None else 0
    tool_calls = analysis.tool_call_count if analysis is not None else 0
    errors = analysis.error_count if analysis is not None else 0
    active = [name for name, _ in analysis.active] if analysis is not None else []
    b = state.budget
    return {
        "session_id": state.session_id,
        "last_seq": state.last_seq,
        "profile": state.profile,
        "session_start_ms": state.session_start_ms,
        "last_event_ms": state.last_event_ms,
        "window_length": window,
        "tool_calls": tool_calls,
        "errors": errors,
        "active_patterns": active,
        "observers": {
            name: {
                "tool_calls_since_assessment": st.tool_calls_since_assessment,
                "total_assessments": st.total_assessments,
                "last_assessment_ms": st.last_assessment_ms,
            }
            for name, st in state.observer_states
        },
        "budget": {
            "deadline_ms": b.deadline_ms,
            "max_tokens": b.max_tokens,
            "max_tool_calls": b.max_tool_calls,
            "tokens_used": state.tokens_used,
        },
        "assessments_in_history": len(state.history.entries),
        "current_assessment": state.current.render() if state.current is not None else None,
    }


__all__ = [
    "HEADER_NAMES",
    "MAX_SNAPSHOT_ID_LEN",
    "SnapshotInfo",
    "check_snapshot_id",
    "decode_snapshot",
    "ensure_snapshots_topic",
    "get_snapshot",
    "list_snapshots",
    "parse_snapshot_key",
    "request_restore",
    "request_snapshot",
    "restore_point",
    "snapshot_headers",
    "snapshot_key",
    "snapshot_value",
    "state_summary",
]
