"""What the router decides about one message: forward it, or dead-letter it and why.

Pure code (no Kafka client imports) so every rule is unit-testable.  The router
forwards the *original bytes* of an accepted message, so this module never
re-encodes anything: it only decodes to check.

Invariants:

* :func:`check_message` never raises for bad *input*: every way a message can be
  wrong (oversized, undecodable, unknown schema, wrong session, bad ``seq`` or
  ``type``) becomes a :class:`Rejected` with a human reason naming the field.
  Errors that are not about the input (a bug in a decoder, ``MemoryError``)
  propagate: the router stops loudly instead of dead-lettering good data.
* An :class:`Accepted` event's ``session_id`` equals the session id encoded in
  the topic it was published on; that is what makes re-keying by session safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from streams.core.events import EVENT_TYPES, TraceEvent
from streams.errors import (
    InvalidEventError,
    MalformedMessageError,
    OversizedMessageError,
    SerdeError,
)
from streams.serde.fastread import read_long

#: Header names the router puts on every dead-lettered message.
DLQ_REASON = "dlq.reason"
DLQ_ERROR_CLASS = "dlq.error_class"
DLQ_SOURCE_TOPIC = "dlq.source.topic"
DLQ_SOURCE_PARTITION = "dlq.source.partition"
DLQ_SOURCE_OFFSET = "dlq.source.offset"
#: Present only when the DLQ copy had to be cut short (value: original size in bytes).
DLQ_ORIGINAL_SIZE = "dlq.original_size"


class EventDecoder(Protocol):
    """The one thing the router needs from the serde (``EventSerde`` satisfies it)."""

    def decode(self, data: bytes) -> TraceEvent: ...


@dataclass(frozen=True, slots=True)
class Accepted:
    """Forward the original bytes to ``<prefix>.events`` keyed by ``session_id``."""

    session_id: str
    seq: int
    type: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """Dead-letter the message; ``reason`` is for humans, ``error_class`` for tools."""

    reason: str
    error_class: str


Verdict = Accepted | Rejected


def session_prefix(prefix: str) -> str:
    """The literal start of every per-session topic name of a deployment."""
    return f"{prefix}.session."


_SESSION_TAIL = re.compile(r"[A-Za-z0-9._-]{1,200}")


@lru_cache(maxsize=1 << 16)
def session_id_of_topic(prefix: str, topic: str) -> str | None:
    """The session id a per-session topic belongs to, or None if it is not one.

    Cached: it runs once per message on the router's hot path, for few topics.
    """
    head = session_prefix(prefix)
    if not topic.startswith(head):
        return None
    tail = topic[len(head) :]
    return tail if _SESSION_TAIL.fullmatch(tail) else None


def _reject(exc: Exception) -> Rejected:
    return Rejected(reason=str(exc), error_class=type(exc).__name__)


def check_event(ev: TraceEvent, topic_session: str, topic: str) -> Verdict:
    """Semantic checks on a decoded event (the schema cannot express these)."""
    error = event_error(ev, topic_session, topic)
    if error is not None:
        return _reject(error)
    return Accepted(session_id=ev.session_id, seq=ev.seq, type=ev.type)


def event_error(ev: TraceEvent, topic_session: str, topic: str) -> InvalidEventError | None:
    """What :func:`check_event` refuses, as the error to raise (None: the event is fine).

    The worker calls it on every event it decodes (``streams.worker.batch``), so
    the checks hold whether or not the router decoded the event (``validation``).
    """
    if not isinstance(ev.session_id, str) or ev.session_id != topic_session:
        return InvalidEventError(
            "session_id",
            f"event says {ev.session_id!r} but was published on {topic!r} "
            f"(session {topic_session!r}); publish each session's events on its own "
            "topic (Settings.session_topic)",
        )
    if isinstance(ev.seq, bool) or not isinstance(ev.seq, int) or ev.seq < 0:
        return InvalidEventError("seq", f"{ev.seq!r}: must be an int >= 0 (0-based, per session)")
    if ev.type not in EVENT_TYPES:
        return InvalidEventError("type", f"{ev.type!r} is not one of {', '.join(EVENT_TYPES)}")
    if (
        isinstance(ev.timestamp_ms, bool)
        or not isinstance(ev.timestamp_ms, int)
        or ev.timestamp_ms < 0
    ):
        return InvalidEventError(
            "timestamp_ms", f"{ev.timestamp_ms!r}: must be epoch milliseconds (int >= 0)"
        )
    return None


def check_message(
    value: bytes | None,
    topic: str,
    *,
    prefix: str,
    decoder: EventDecoder,
    max_message_bytes: int,
) -> Verdict:
    """Decide about one consumed message (see the module docstring for the rules)."""
    topic_session = session_id_of_topic(prefix, topic)
    if topic_session is None:
        return _reject(
            InvalidEventError(
                "topic",
                f"{topic!r} is not a per-session topic of prefix {prefix!r} "
                f"(expected {session_prefix(prefix)}<session_id>)",
            )
        )
    if value is None or len(value) == 0:
        return _reject(
            MalformedMessageError(
                "message has no value (tombstone or empty); publish Avro-encoded TraceEvents"
            )
        )
    if len(value) > max_message_bytes:
        return _reject(
            OversizedMessageError(
                f"message is {len(value)} bytes, over the {max_message_bytes}-byte cap "
                "(max_message_bytes / TRAJECTORY_MAX_MESSAGE_BYTES); shrink input/output "
                "(max_payload_bytes) or raise the cap"
            )
        )
    try:
        ev = decoder.decode(value)
    except (SerdeError, InvalidEventError) as exc:
        return _reject(exc)
    return check_event(ev, topic_session, topic)


class FramingDecoder(EventDecoder, Protocol):
    """A decoder that can also check the framing alone (``EventSerde`` is one)."""

    def check_framing(self, data: bytes) -> tuple[bool, int]: ...


#: Headers the router adds to every forwarded event: where it was published (the
#: worker puts them on a dead letter as ``dlq.source.*``): ``src.offset`` always,
#: ``src.partition`` when it is not 0, and ``src.key``, the original key, when it
#: differs from the session id the router keys ``<prefix>.events`` by.
#: ``src.topic`` is implied by the key (:func:`forwarded_from`); routers before
#: the one-header change wrote it, and readers still honour it.
SRC_TOPIC = "src.topic"
SRC_PARTITION = "src.partition"
SRC_OFFSET = "src.offset"
SRC_KEY = "src.key"
_EVENTS_SUFFIX = ".events"


def forwarded_from(
    topic: str, key: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> tuple[bytes, bytes, bytes, bytes | None] | None:
    """Where the router read a record it forwarded: ``(topic, partition, offset,
    original key)`` as header bytes, or None for a record it did not forward.

    ``topic``, ``key`` and ``headers`` are the record's in ``<prefix>.events``.
    A router forwards with ``src.offset`` (and ``src.partition`` unless 0); the
    source topic is ``<prefix>.session.<key>``: the router accepts an event only
    from its own session's topic and keys it by that session id, and ``<prefix>``
    is where the record is (``<prefix>.events``).  Records of older routers name
    the topic in ``src.topic``; that wins.  Invariant: for every record a router
    forwarded, this gives the coordinates it consumed it at.
    """
    found: dict[str, bytes] = {}
    for name, value in headers or ():
        if name.startswith("src.") and value is not None:
            found[name] = bytes(value)
    offset = found.get(SRC_OFFSET)
    if offset is None:
        return None
    src = found.get(SRC_TOPIC)
    if src is None:
        if key is None or not topic.endswith(_EVENTS_SUFFIX):
            return None
        src = session_prefix(topic[: -len(_EVENTS_SUFFIX)]).encode() + key
    original = found.get(SRC_KEY, key)
    return (
        src,
        found.get(SRC_PARTITION, b"0"),
        offset,
        # an empty src.key: the publisher sent no key
        original if original != b"" or SRC_KEY not in found else None,
    )


def _long_at(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint Avro ``long`` at ``pos`` and the position after it."""
    read = read_long(data, pos)
    if read is None:
        raise MalformedMessageError(
            "io.trajectory.v1.TraceEvent: invalid Avro body (EOFError: a varint runs past "
            "the end or past 64 bits); truncated or not written with this schema"
        )
    return read


#: Number of symbols of the bundled ``EventType`` enum (``unknown`` is the last).
_ENUM_SYMBOLS = len(EVENT_TYPES) + 1


def check_routing(
    value: bytes | None,
    topic: str,
    *,
    prefix: str,
    decoder: FramingDecoder,
    max_message_bytes: int,
) -> Verdict:
    """Decide about one message WITHOUT a full Avro decode ("decode once", issue #12).

    Checks the topic, size, framing and writer-schema fingerprint (or Confluent
    schema id), then reads only the first two fields of the body (``type``, an enum
    index, and ``session_id``, a string: the schema's first two fields) and
    refuses an event whose ``session_id`` is not the topic's session.  A body
    written with another (known) writer schema is fully decoded, as before.

    Everything else (a truncated or trailing body, ``seq``/``timestamp_ms``, JSON
    fields) is checked by the worker, which decodes every event anyway and
    dead-letters with the same reasons and the source coordinates the router
    forwards in ``src.*`` headers (``streams.worker.batch``).  The returned
    :class:`Accepted` has ``seq`` -1: the router did not read it.
    """
    topic_session = session_id_of_topic(prefix, topic)
    if topic_session is None or value is None or len(value) == 0:
        return check_message(
            value, topic, prefix=prefix, decoder=decoder, max_message_bytes=max_message_bytes
        )
    if len(value) > max_message_bytes:
        return check_message(
            value, topic, prefix=prefix, decoder=decoder, max_message_bytes=max_message_bytes
        )
    try:
        resolve, pos = decoder.check_framing(value)
        if resolve:  # another writer schema: field order may differ, decode fully
            return check_event(decoder.decode(value), topic_session, topic)
        index, pos = _long_at(value, pos)
        if not 0 <= index < _ENUM_SYMBOLS - 1:
            raise MalformedMessageError(
                f"io.trajectory.v1.TraceEvent: type: enum index {index} is not a known "
                "event type; written by a newer schema or corrupt"
            )
        length, pos = _long_at(value, pos)
        end = pos + length
        if length < 0 or end > len(value):
            raise MalformedMessageError(
                "io.trajectory.v1.TraceEvent: invalid Avro body (session_id runs past the "
                "end); truncated or not written with this schema"
            )
        sid = value[pos:end]
    except (SerdeError, InvalidEventError) as exc:
        return _reject(exc)
    if sid != _session_bytes(topic_session):
        shown = sid.decode("utf-8", "replace")
        return _reject(
            InvalidEventError(
                "session_id",
                f"event says {shown!r} but was published on {topic!r} "
                f"(session {topic_session!r}); publish each session's events on its own "
                "topic (Settings.session_topic)",
            )
        )
    return Accepted(session_id=topic_session, seq=-1, type=EVENT_TYPES[index])


@lru_cache(maxsize=1 << 16)
def _session_bytes(session: str) -> bytes:
    return session.encode("utf-8")


#: Length of the Avro single-object header (C3 01 + 8-byte fingerprint).
_SINGLE_OBJECT_HEADER = 10
#: Bound on the per-topic cache (sessions come and go).
_MAX_CACHED = 100_000
#: Slots of a topic's verdict list: one per one-byte ``type`` varint that can be a
#: known type (even bytes below ``2 * len(EVENT_TYPES)``; odd ones stay None).
_VERDICT_SLOTS = 2 * len(EVENT_TYPES)
#: The fast path's facts about one session topic: the smallest message it can
#: accept (header + type + length + id), the one-byte zig-zag varint of the id's
#: length (-1: the id is too long for one byte, so no fast path), the id's UTF-8
#: bytes, the shared Accepted verdict per type byte (filled on first use: a topic
#: sees a few types, and up to _MAX_CACHED topics are kept), and the id.
_TopicFacts = tuple[int, int, bytes, list[Accepted | None], str]


def _topic_facts(sid: str) -> _TopicFacts:
    sid_bytes = sid.encode("utf-8")
    n = len(sid_bytes)
    length = 2 * n if 2 * n < 0x80 else -1
    return (_SINGLE_OBJECT_HEADER + 2 + n, length, sid_bytes, [None] * _VERDICT_SLOTS, sid)


def _verdict(facts: _TopicFacts, b: int) -> Accepted | None:
    """The topic's shared Accepted for type byte ``b`` (< _VERDICT_SLOTS), made on
    first use; None for an odd byte (a negative zig-zag varint: not a type)."""
    if b & 1:
        return None
    verdict = facts[3][b] = Accepted(session_id=facts[4], seq=-1, type=EVENT_TYPES[b >> 1])
    return verdict


class RoutingCheck:
    """:func:`check_routing` bound to one deployment, for the router's per-message path.

    Why: at ~100k events/s every per-message allocation and call shows in the
    profile (keyword call, ``check_framing``'s tuple, two varint calls, a slice,
    a frozen dataclass per event).  This does the same checks with cached
    per-topic and per-header facts: for the first header the decoder accepted
    (one writer schema, the common case) a ``startswith`` and three byte
    compares, and a prebuilt verdict per (topic, type).

    Invariant: it returns exactly what ``check_routing(value, topic, ...)``
    returns.  The fast path only ever *accepts*: a message whose header is a
    single-object header the decoder already accepted without schema
    resolution, whose ``type`` index and ``session_id`` length are one-byte
    varints, whose index is a known type and whose ``session_id`` bytes equal
    the topic's session.  Anything else (including every refusal) goes through
    :func:`check_routing` itself, so every reason and error class is unchanged.
    The :class:`Accepted` values are shared per (session, type): they are frozen.
    """

    __slots__ = ("_decoder", "_headers", "_max", "_prefix", "_primary", "_topics")

    def __init__(self, *, prefix: str, decoder: FramingDecoder, max_message_bytes: int) -> None:
        self._prefix = prefix
        self._decoder = decoder
        self._max = max_message_bytes
        #: single-object headers check_framing accepted with resolve=False (one per
        #: known writer fingerprint: unknown ones raise, so this stays tiny)
        self._headers: set[bytes] = set()
        #: the first of them: checked with ``startswith``, no slice
        self._primary: bytes | None = None
        #: topic -> its facts; None: not a session topic
        self._topics: dict[str, _TopicFacts | None] = {}

    def __call__(self, value: bytes | None, topic: str) -> Verdict:
        try:
            facts = self._topics[topic]
        except KeyError:
            if len(self._topics) >= _MAX_CACHED:
                self._topics.clear()
            sid = session_id_of_topic(self._prefix, topic)
            facts = self._topics[topic] = None if sid is None else _topic_facts(sid)
        if facts is not None and value and len(value) <= self._max:
            primary = self._primary
            if primary is not None and value.startswith(primary):
                if len(value) >= facts[0]:
                    b = value[_SINGLE_OBJECT_HEADER]
                    if (
                        b < _VERDICT_SLOTS
                        and value[_SINGLE_OBJECT_HEADER + 1] == facts[1]
                        and value.startswith(facts[2], _SINGLE_OBJECT_HEADER + 2)
                    ):
                        verdict = facts[3][b] or _verdict(facts, b)
                        if verdict is not None:
                            return verdict
            elif value[:_SINGLE_OBJECT_HEADER] in self._headers:
                accepted = self._accept(value, facts)
                if accepted is not None:
                    return accepted
            elif value[0] == 0xC3 and len(self._headers) < 64:
                self._learn(value)
        return check_routing(
            value, topic, prefix=self._prefix, decoder=self._decoder, max_message_bytes=self._max
        )

    def _learn(self, value: bytes) -> None:
        """Remember the header if the decoder accepts it without schema resolution."""
        try:
            resolve, pos = self._decoder.check_framing(value)
        except (SerdeError, InvalidEventError):
            return  # check_routing refuses it with the reason
        if not resolve and pos == _SINGLE_OBJECT_HEADER:
            header = bytes(value[:_SINGLE_OBJECT_HEADER])
            self._headers.add(header)
            if self._primary is None:
                self._primary = header

    @staticmethod
    def _accept(value: bytes, facts: _TopicFacts) -> Accepted | None:
        """The fast path for a known header other than the first (class
        docstring); None: let check_routing decide."""
        if len(value) < facts[0]:
            return None
        b = value[_SINGLE_OBJECT_HEADER]
        if b >= _VERDICT_SLOTS or value[_SINGLE_OBJECT_HEADER + 1] != facts[1]:
            return None
        if not value.startswith(facts[2], _SINGLE_OBJECT_HEADER + 2):
            return None
        return facts[3][b] or _verdict(facts, b)


def dlq_headers(
    rejected: Rejected,
    topic: str,
    partition: int,
    offset: int,
    original_size: int | None = None,
) -> list[tuple[str, bytes]]:
    """Headers that let an operator find, understand and replay a dead letter."""
    headers = [
        (DLQ_REASON, rejected.reason.encode("utf-8", "replace")),
        (DLQ_ERROR_CLASS, rejected.error_class.encode("utf-8")),
        (DLQ_SOURCE_TOPIC, topic.encode("utf-8")),
        (DLQ_SOURCE_PARTITION, str(partition).encode("ascii")),
        (DLQ_SOURCE_OFFSET, str(offset).encode("ascii")),
    ]
    if original_size is not None:
        headers.append((DLQ_ORIGINAL_SIZE, str(original_size).encode("ascii")))
    return headers


__all__ = [
    "DLQ_ERROR_CLASS",
    "DLQ_ORIGINAL_SIZE",
    "DLQ_REASON",
    "DLQ_SOURCE_OFFSET",
    "DLQ_SOURCE_PARTITION",
    "DLQ_SOURCE_TOPIC",
    "SRC_KEY",
    "SRC_OFFSET",
    "SRC_PARTITION",
    "SRC_TOPIC",
    "Accepted",
    "EventDecoder",
    "FramingDecoder",
    "Rejected",
    "RoutingCheck",
    "Verdict",
    "check_event",
    "check_message",
    "check_routing",
    "dlq_headers",
    "event_error",
    "forwarded_from",
    "session_id_of_topic",
    "session_prefix",
]
