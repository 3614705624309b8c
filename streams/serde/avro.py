"""fastavro encode/decode of trace events, pattern detections and assessments.

Framing (what precedes the Avro body on the wire):

* ``"single-object"`` (default, no registry): the Avro *single-object encoding*:
  ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
  schema's Parsing Canonical Form + the body.  The fingerprint is looked up in a
  table of known writer schemas (today: the bundled ones; older versions can be
  added with :meth:`AvroSerde.add_writer_schema`) and the body is resolved to the
  current reader schema.
* ``"confluent"``: the Confluent wire format: ``00`` + 4-byte big-endian schema id
  + the body.  The writer registers the bundled schema under the subject
  ``<full record name>`` (record-name strategy: one subject however many session
  topics) and the reader fetches unknown ids from the registry.

``decode`` accepts both framings whatever ``framing`` says (the first byte tells
them apart), so consumers keep working while producers migrate; a Confluent
message without a registry configured is an :class:`UnknownSchemaError`.

Errors: :class:`UnknownSchemaError` (unknown fingerprint / schema id, named in
hex / decimal), :class:`MalformedMessageError` (bad marker, truncated body,
trailing bytes, invalid enum index, a ``*_json`` field that is not bounded,
finite JSON (see :func:`streams.serde.jsontext.loads_json`) ...), and
:class:`OversizedMessageError` (more bytes than ``max_bytes``, encoding or
decoding).  The original exception is always chained.

Thread-safety: encode/decode of a serde object may be called from several
threads; the only mutable state is the writer-schema/registry-id caches, where
a race costs at most a duplicate registry lookup (dict assignment is atomic).
"""

from __future__ import annotations

import abc
import io
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

import fastavro

from streams.core.events import EVENT_TYPES, Budget, EventType, JsonValue, TraceEvent
from streams.errors import (
    InvalidEventError,
    MalformedMessageError,
    OversizedMessageError,
    SerdeError,
    UnknownSchemaError,
    UnserializableError,
)
from streams.serde.fastread import Reader
from streams.serde.jsontext import dumps_json, loads_json
from streams.serde.schemas import (
    canonical_form,
    codec_schema,
    compiled_reader,
    crc64_avro,
    fingerprint,
    load_schema,
    parse_codec_schema,
)

Framing = Literal["single-object", "confluent"]
FRAMINGS: Final[tuple[str, ...]] = ("single-object", "confluent")

SINGLE_OBJECT_MARKER: Final = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN: Final = 10
CONFLUENT_MAGIC: Final = b"\x00"
CONFLUENT_HEADER_LEN: Final = 5

_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1

T = TypeVar("T")

_DECODE_ERRORS: Final = (
    EOFError,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    struct.error,
    UnicodeDecodeError,
    OverflowError,
    StopIteration,
)


# "<_io.BytesIO object at 0x7f...>" in a decoder's message: the address differs on
# every decode, and a dead-letter reason must be the same each time the same
# record is redelivered (the DLQ and replay compare reasons).
_OBJECT_ADDRESS: Final = re.compile(r" object at 0x[0-9a-fA-F]+>")


def _stable_reason(exc: BaseException) -> str:
    """``Type: message`` of a decoder exception, without object addresses."""
    return f"{type(exc).__name__}: {_OBJECT_ADDRESS.sub(' object>', str(exc))}"


def _is_registry_client(obj: Any) -> bool:
    return hasattr(obj, "register_schema") and hasattr(obj, "get_schema")


def make_registry(registry: Any) -> Any:
    """A ``SchemaRegistryClient`` from a URL (``mock://...`` gives the in-memory mock)."""
    if registry is None or _is_registry_client(registry):
        return registry
    if isinstance(registry, str):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient.new_client({"url": registry})
    raise InvalidEventError(
        "registry", f"expected a schema registry URL or client, got {type(registry).__name__}"
    )


class AvroSerde(abc.ABC, Generic[T]):
    """Framing + fastavro for one bundled record schema; subclasses map values."""

    schema_name: ClassVar[str]

    def __init__(
        self,
        framing: Framing | str = "single-object",
        registry: Any = None,
        *,
        max_bytes: int | None = None,
    ) -> None:
        if framing not in FRAMINGS:
            raise InvalidEventError("framing", f"{framing!r}: use 'single-object' or 'confluent'")
        self.registry = make_registry(registry)
        if framing == "confluent" and self.registry is None:
            raise InvalidEventError(
                "framing",
                "'confluent' framing needs a schema registry (set schema_registry_url / "
                "TRAJECTORY_SCHEMA_REGISTRY_URL, or use 'single-object')",
            )
        self.framing: str = framing
        self.max_bytes = max_bytes
        schema = load_schema(self.schema_name)
        self.schema_json: dict[str, Any] = schema
        self.full_name = f"{schema['namespace']}.{schema['name']}"
        self.subject = self.full_name
        self._reader = codec_schema(self.schema_name)
        #: the bundled schema's compiled reader (streams.serde.fastread): fastavro's
        #: value in about half the time, or None; None here keeps fastavro alone
        self._fast: Reader | None = compiled_reader(self.schema_name)
        self._fp = fingerprint(self.schema_name)
        self._header = SINGLE_OBJECT_MARKER + struct.pack("<Q", self._fp)
        # fingerprint -> (writer schema, needs resolution to the reader)
        self._writers: dict[int, tuple[Any, bool]] = {self._fp: (self._reader, False)}
        self._confluent_id: int | None = None
        self._ids: dict[int, tuple[Any, bool]] = {}

    # -- schema table ------------------------------------------------------
    @property
    def fingerprint(self) -> int:
        return self._fp

    def add_writer_schema(self, schema: dict[str, Any]) -> int:
        """Accept messages written with an older/newer version of the schema.

        Returns its fingerprint.  Bodies are resolved to the current reader schema
        with Avro schema resolution (defaults fill removed/added fields).
        """
        fp = crc64_avro(canonical_form(schema).encode("utf-8"))
        if fp != self._fp:
            self._writers[fp] = (parse_codec_schema(schema), True)
        return fp

    # -- encode ------------------------------------------------------------
    @abc.abstractmethod
    def to_record(self, value: T) -> dict[str, Any]:
        """The Avro record dict of ``value``; errors name the bad field."""

    @abc.abstractmethod
    def from_record(self, record: dict[str, Any]) -> T:
        """The value of a decoded record (raise MalformedMessageError if unusable)."""

    def encode(self, value: T) -> bytes:
        """Frame and encode ``value``; errors name the offending field."""
        record = self.to_record(value)
        buf = io.BytesIO()
        buf.write(self._confluent_header() if self.framing == "confluent" else self._header)
        try:
            fastavro.schemaless_writer(buf, self._reader, record)
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as exc:
            raise UnserializableError(self.schema_name, f"Avro write failed: {exc}") from exc
        data = buf.getvalue()
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise OversizedMessageError(
                f"{self.full_name}: encoded message is {len(data)} bytes, over the "
                f"{self.max_bytes}-byte cap (max_message_bytes); shrink input/output "
                "(max_payload_bytes) or raise the cap"
            )
        return data

    def _confluent_header(self) -> bytes:
        if self._confluent_id is None:
            from confluent_kafka.schema_registry import Schema

            try:
                sid = self.registry.register_schema(
                    self.subject, Schema(json.dumps(self.schema_json), "AVRO")
                )
            except Exception as exc:
                raise SerdeError(
                    f"registering {self.full_name} under subject {self.subject!r} failed: {exc}"
                ) from exc
            self._confluent_id = int(sid)
            self._ids[self._confluent_id] = (self._reader, False)
        return CONFLUENT_MAGIC + struct.pack(">I", self._confluent_id)

    # -- decode ------------------------------------------------------------
    def check_framing(self, data: bytes) -> tuple[bool, int]:
        """Check what precedes the Avro body, without decoding the body.

        Raises exactly what :meth:`decode` raises for a bad size, framing or
        unknown schema.  Returns ``(resolve, offset)``: whether the writer schema
        differs from the bundled one (the body needs schema resolution) and
        where the body starts.  The router uses it to forward an event without a
        full decode (the worker decodes it anyway, docs/guarantees.md).
        """
        _writer, resolve, offset = self._frame(data)
        return resolve, offset

    def _frame(self, data: bytes) -> tuple[Any, bool, int]:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise MalformedMessageError(
                f"{self.full_name}: expected bytes, got {type(data).__name__}"
            )
        size = len(data)
        if self.max_bytes is not None and size > self.max_bytes:
            raise OversizedMessageError(
                f"{self.full_name}: message is {size} bytes, over the {self.max_bytes}-byte cap"
            )
        if size == 0:
            raise MalformedMessageError(f"{self.full_name}: empty message (tombstone?)")
        first = data[0]
        if first == 0xC3:
            writer, resolve, offset = self._single_object_writer(data)
        elif first == 0x00:
            writer, resolve, offset = self._confluent_writer(data)
        else:
            raise MalformedMessageError(
                f"{self.full_name}: first byte 0x{first:02x} is neither the Avro single-object "
                "marker C3 01 nor the Confluent magic byte 00"
            )
        return writer, resolve, offset

    def decode(self, data: bytes) -> T:
        """Decode framed bytes (either framing) into a value."""
        max_bytes = self.max_bytes
        if (
            type(data) is bytes
            and data.startswith(self._header)
            and (max_bytes is None or len(data) <= max_bytes)
        ):
            # the common case, what _frame finds for it without the lookups: the
            # bundled writer schema, single-object framing, no resolution
            writer, resolve, offset = self._reader, False, SINGLE_OBJECT_HEADER_LEN
        else:
            writer, resolve, offset = self._frame(data)
        size = len(data)
        fast = self._fast
        if fast is not None and writer is self._reader and not resolve and type(data) is bytes:
            # the bundled writer schema, either framing: the compiled reader.  None:
            # bytes it does not take (a cut-short body, an invalid index, a varint
            # longer than a long ...); fastavro below decodes them and names the
            # error if they are malformed
            read = fast(data, offset)
            if read is not None and read[1] == size:
                return self.from_record(read[0])
        buf = io.BytesIO(data)
        buf.seek(offset)
        try:
            if resolve:
                record = fastavro.schemaless_reader(buf, writer, self._reader)
            else:
                record = fastavro.schemaless_reader(buf, writer, None)
        except _DECODE_ERRORS as exc:
            raise MalformedMessageError(
                f"{self.full_name}: invalid Avro body ({_stable_reason(exc)}); "
                "truncated or not written with this schema"
            ) from exc
        end = buf.tell()
        if end != size:
            raise MalformedMessageError(
                f"{self.full_name}: {size - end} trailing byte(s) after the Avro body "
                f"(body ends at offset {end} of {size})"
            )
        if not isinstance(record, dict):
            raise MalformedMessageError(f"{self.full_name}: body is not a record")
        return self.from_record(record)

    def _single_object_writer(self, data: bytes | bytearray | memoryview) -> tuple[Any, bool, int]:
        if len(data) < SINGLE_OBJECT_HEADER_LEN:
            raise MalformedMessageError(
                f"{self.full_name}: {len(data)} bytes is shorter than the 10-byte "
                "single-object header (C3 01 + 8-byte fingerprint)"
            )
        if data[1] != 0x01:
            raise MalformedMessageError(
                f"{self.full_name}: bad single-object marker {bytes(data[:2]).hex(' ')} "
                "(expected c3 01)"
            )
        (fp,) = struct.unpack_from("<Q", data, 2)
        try:
            writer, resolve = self._writers[fp]
        except KeyError:
            raise UnknownSchemaError(
                f"{self.full_name}: unknown writer schema fingerprint 0x{fp:016x} (CRC-64-AVRO; "
                f"known: {', '.join(f'0x{k:016x}' for k in self._writers)}); add the writer's "
                "schema with add_writer_schema() or upgrade this reader"
            ) from None
        return writer, resolve, SINGLE_OBJECT_HEADER_LEN

    def _confluent_writer(self, data: bytes | bytearray | memoryview) -> tuple[Any, bool, int]:
        if len(data) < CONFLUENT_HEADER_LEN:
            raise MalformedMessageError(
                f"{self.full_name}: {len(data)} bytes is shorter than the 5-byte Confluent "
                "header (00 + 4-byte schema id)"
            )
        (sid,) = struct.unpack_from(">I", data, 1)
        known = self._ids.get(sid)
        if known is not None:
            return known[0], known[1], CONFLUENT_HEADER_LEN
        if self.registry is None:
            raise UnknownSchemaError(
                f"{self.full_name}: Confluent-framed message with schema id {sid} but no schema "
                "registry is configured (set schema_registry_url)"
            )
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self.registry.get_schema(sid)
        except SchemaRegistryError as exc:
            if getattr(exc, "http_status_code", None) == 404:
                raise UnknownSchemaError(
                    f"{self.full_name}: schema id {sid} is not in the schema registry"
                ) from exc
            raise SerdeError(f"{self.full_name}: fetching schema id {sid} failed: {exc}") from exc
        try:
            schema = json.loads(registered.schema_str)
        except (TypeError, ValueError) as exc:
            raise UnknownSchemaError(
                f"{self.full_name}: schema id {sid} is not an Avro JSON schema"
            ) from exc
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise UnknownSchemaError(f"{self.full_name}: schema id {sid} is not an Avro record")
        same = canonical_form(schema) == canonical_form(self.schema_json)
        entry = (self._reader, False) if same else (parse_codec_schema(schema), True)
        self._ids[sid] = entry
        return entry[0], entry[1], CONFLUENT_HEADER_LEN


# --------------------------------------------------------------------------
# field checks (encode side): cheap, and they name the field


def _str(value: Any, path: str, *, optional: bool = True) -> str | None:
    if value is None:
        if optional:
            return None
        raise UnserializableError(path, "missing (a string is required)")
    if not isinstance(value, str):
        raise UnserializableError(path, f"expected str, got {type(value).__name__}")
    return value


def _long(value: Any, path: str, *, optional: bool = True) -> int | None:
    if value is None:
        if optional:
            return None
        raise UnserializableError(path, "missing (an integer is required)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnserializableError(path, f"expected int, got {type(value).__name__}")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise UnserializableError(path, f"{value} does not fit a signed 64-bit Avro long")
    return value


def _str_map(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise UnserializableError(
            path, f"expected a mapping of str to str, got {type(value).__name__}"
        )
    for k, v in value.items():
        if not isinstance(k, str):
            raise UnserializableError(f"{path}[{k!r}]", f"key of type {type(k).__name__}; use str")
        if not isinstance(v, str):
            raise UnserializableError(
                f"{path}[{json.dumps(k, ensure_ascii=False)}]",
                f"expected str, got {type(v).__name__} (metadata values are strings)",
            )
    return dict(value)


def _loads(text: str | None, path: str, name: str) -> JsonValue:
    """A ``*_json`` field's value: bounded and total (:func:`loads_json`), so a
    decoded event never holds a value the worker cannot encode (NaN, a lone
    surrogate, nesting deeper than ``MAX_JSON_DEPTH``) and a hostile text cannot
    raise ``RecursionError``.  The error names the record and the field."""
    if text is None:
        return None
    try:
        result: JsonValue = loads_json(text, path)
    except MalformedMessageError as exc:
        raise MalformedMessageError(f"{name}: {exc}") from exc
    return result


# --------------------------------------------------------------------------
# TraceEvent


class EventSerde(AvroSerde[TraceEvent]):
    """:class:`~streams.core.events.TraceEvent` <-> framed Avro ``TraceEvent``.

    ``input``/``output`` travel as compact JSON text (``ensure_ascii=False``, the
    caller's key order kept); decoding parses them back, so a round trip gives an
    equal event.  ``metadata`` values must already be strings.
    """

    schema_name = "trace_event"

    def to_record(self, value: TraceEvent) -> dict[str, Any]:
        ev = value
        if not isinstance(ev, TraceEvent):
            raise UnserializableError("event", f"expected TraceEvent, got {type(ev).__name__}")
        if ev.type not in EVENT_TYPES:
            raise UnserializableError("type", f"{ev.type!r} is not one of {', '.join(EVENT_TYPES)}")
        if not isinstance(ev.is_error, bool):
            raise UnserializableError(
                "is_error", f"expected bool, got {type(ev.is_error).__name__}"
            )
        budget: dict[str, Any] | None = None
        if ev.budget is not None:
            b = ev.budget
            if not isinstance(b, Budget):
                raise UnserializableError("budget", f"expected Budget, got {type(b).__name__}")
            budget = {
                "deadline_ms": _long(b.deadline_ms, "budget.deadline_ms"),
                "max_tokens": _long(b.max_tokens, "budget.max_tokens"),
                "tokens_used": _long(b.tokens_used, "budget.tokens_used"),
                "max_tool_calls": _long(b.max_tool_calls, "budget.max_tool_calls"),
            }
        return {
            "type": ev.type,
            "session_id": _str(ev.session_id, "session_id", optional=False),
            "seq": _long(ev.seq, "seq", optional=False),
            "timestamp_ms": _long(ev.timestamp_ms, "timestamp_ms", optional=False),
            "agent_id": _str(ev.agent_id, "agent_id"),
            "parent_session_id": _str(ev.parent_session_id, "parent_session_id"),
            "call_id": _str(ev.call_id, "call_id"),
            "tool_name": _str(ev.tool_name, "tool_name"),
            "input_json": None if ev.input is None else dumps_json(ev.input, "input"),
            "output_json": None if ev.output is None else dumps_json(ev.output, "output"),
            "params_summary": _str(ev.params_summary, "params_summary"),
            "is_error": ev.is_error,
            "error_message": _str(ev.error_message, "error_message"),
            "text": _str(ev.text, "text"),
            "input_tokens": _long(ev.input_tokens, "input_tokens"),
            "output_tokens": _long(ev.output_tokens, "output_tokens"),
            "latency_ms": _long(ev.latency_ms, "latency_ms"),
            "metadata": _str_map(ev.metadata, "metadata"),
            "budget": budget,
        }

    def from_record(self, record: dict[str, Any]) -> TraceEvent:
        etype = record["type"]
        if etype not in EVENT_TYPES:
            raise MalformedMessageError(
                f"{self.full_name}: type {etype!r} was written by a newer schema and is unknown "
                "to this reader; upgrade the consumer"
            )
        get = record.get  # one bound method for the 18 lookups (a decode per event)
        b = get("budget")
        budget = (
            None
            if b is None
            else Budget(
                deadline_ms=b.get("deadline_ms"),
                max_tokens=b.get("max_tokens"),
                tokens_used=b.get("tokens_used"),
                max_tool_calls=b.get("max_tool_calls"),
            )
        )
        event_type: EventType = etype
        name = self.full_name
        input_json, output_json = get("input_json"), get("output_json")
        # positional, in TraceEvent's field order (cheaper than 19 keywords); the
        # order is pinned by test_full_event_round_trips_every_field (distinct values)
        return TraceEvent(
            event_type,
            record["session_id"],
            record["seq"],
            record["timestamp_ms"],
            get("agent_id"),
            get("parent_session_id"),
            get("call_id"),
            get("tool_name"),
            None if input_json is None else _loads(input_json, "input_json", name),
            None if output_json is None else _loads(output_json, "output_json", name),
            get("params_summary"),
            bool(get("is_error", False)),
            get("error_message"),
            get("text"),
            get("input_tokens"),
            get("output_tokens"),
            get("latency_ms"),
            get("metadata") or {},
            budget,
        )


# --------------------------------------------------------------------------
# PatternDetection / AssessmentRecord wire values


@dataclass(frozen=True, slots=True)
class PatternRecord:
    """Wire value of a fired pattern (``<prefix>.patterns``), plain data only.

    Kept separate from the core's pattern classes so the wire format does not
    change when a detector grows a field: detector-specific fields go in
    ``details`` (a JSON object).
    """

    session_id: str
    seq: int
    timestamp_ms: int
    pattern_type: str
    call_index: int = 0
    confidence: float = 0.0
    severity: str | None = None
    evidence: tuple[str, ...] = ()
    occurrences: int = 1
    first_seen_ms: int | None = None
    details: JsonValue = None
    #: The originator session (``TraceEvent.parent_session_id``); None for a root.
    parent_session_id: str | None = None
    #: ``TraceEvent.agent_id`` of the session; None when the events carry none.
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class AssessmentWire:
    """Wire value of a session's current assessment (``<prefix>.assessments``)."""

    session_id: str
    seq: int
    timestamp_ms: int
    trigger: Literal["event", "timer"]
    call_index: int = 0
    max_severity: str | None = None
    rendered: str = ""
    assessments: JsonValue = None
    #: The originator session (``TraceEvent.parent_session_id``); None for a root.
    #: Lets consumers follow a parent session and its sub-agent sessions.
    parent_session_id: str | None = None
    #: ``TraceEvent.agent_id`` of the session; None when the events carry none.
    agent_id: str | None = None


class PatternSerde(AvroSerde[PatternRecord]):
    """:class:`PatternRecord` <-> framed Avro ``PatternDetection``."""

    schema_name = "pattern_detection"

    def to_record(self, value: PatternRecord) -> dict[str, Any]:
        p = value
        if not isinstance(p, PatternRecord):
            raise UnserializableError("pattern", f"expected PatternRecord, got {type(p).__name__}")
        if isinstance(p.confidence, bool) or not isinstance(p.confidence, (int, float)):
            raise UnserializableError(
                "confidence", f"expected float, got {type(p.confidence).__name__}"
            )
        evidence = list(p.evidence)
        for i, line in enumerate(evidence):
            _str(line, f"evidence[{i}]", optional=False)
        return {
            "session_id": _str(p.session_id, "session_id", optional=False),
            "seq": _long(p.seq, "seq", optional=False),
            "call_index": _long(p.call_index, "call_index", optional=False),
            "timestamp_ms": _long(p.timestamp_ms, "timestamp_ms", optional=False),
            "pattern_type": _str(p.pattern_type, "pattern_type", optional=False),
            "confidence": float(p.confidence),
            "severity": _str(p.severity, "severity"),
            "evidence": evidence,
            "occurrences": _long(p.occurrences, "occurrences", optional=False),
            "first_seen_ms": _long(p.first_seen_ms, "first_seen_ms"),
            "details_json": None if p.details is None else dumps_json(p.details, "details"),
            "parent_session_id": _str(p.parent_session_id, "parent_session_id"),
            "agent_id": _str(p.agent_id, "agent_id"),
        }

    def from_record(self, record: dict[str, Any]) -> PatternRecord:
        return PatternRecord(
            session_id=record["session_id"],
            seq=record["seq"],
            call_index=record["call_index"],
            timestamp_ms=record["timestamp_ms"],
            pattern_type=record["pattern_type"],
            confidence=record["confidence"],
            severity=record.get("severity"),
            evidence=tuple(record.get("evidence") or ()),
            occurrences=record["occurrences"],
            first_seen_ms=record.get("first_seen_ms"),
            details=_loads(record.get("details_json"), "details_json", self.full_name),
            parent_session_id=record.get("parent_session_id"),
            agent_id=record.get("agent_id"),
        )


class AssessmentSerde(AvroSerde[AssessmentWire]):
    """:class:`AssessmentWire` <-> framed Avro ``AssessmentRecord``."""

    schema_name = "assessment_record"

    def to_record(self, value: AssessmentWire) -> dict[str, Any]:
        a = value
        if not isinstance(a, AssessmentWire):
            raise UnserializableError(
                "assessment", f"expected AssessmentWire, got {type(a).__name__}"
            )
        if a.trigger not in ("event", "timer"):
            raise UnserializableError("trigger", f"{a.trigger!r}: use 'event' or 'timer'")
        return {
            "session_id": _str(a.session_id, "session_id", optional=False),
            "seq": _long(a.seq, "seq", optional=False),
            "call_index": _long(a.call_index, "call_index", optional=False),
            "timestamp_ms": _long(a.timestamp_ms, "timestamp_ms", optional=False),
            "trigger": a.trigger,
            "max_severity": _str(a.max_severity, "max_severity"),
            "rendered": _str(a.rendered, "rendered", optional=False),
            "assessments_json": None
            if a.assessments is None
            else dumps_json(a.assessments, "assessments"),
            "parent_session_id": _str(a.parent_session_id, "parent_session_id"),
            "agent_id": _str(a.agent_id, "agent_id"),
        }

    def from_record(self, record: dict[str, Any]) -> AssessmentWire:
        trigger = record["trigger"]
        if trigger not in ("event", "timer"):
            raise MalformedMessageError(
                f"{self.full_name}: trigger {trigger!r} is unknown to this reader; upgrade it"
            )
        return AssessmentWire(
            session_id=record["session_id"],
            seq=record["seq"],
            call_index=record["call_index"],
            timestamp_ms=record["timestamp_ms"],
            trigger=trigger,
            max_severity=record.get("max_severity"),
            rendered=record.get("rendered") or "",
            assessments=_loads(record.get("assessments_json"), "assessments_json", self.full_name),
            parent_session_id=record.get("parent_session_id"),
            agent_id=record.get("agent_id"),
        )


__all__ = [
    "CONFLUENT_MAGIC",
    "FRAMINGS",
    "SINGLE_OBJECT_MARKER",
    "AssessmentSerde",
    "AssessmentWire",
    "AvroSerde",
    "EventSerde",
    "Framing",
    "PatternRecord",
    "PatternSerde",
    "make_registry",
]
