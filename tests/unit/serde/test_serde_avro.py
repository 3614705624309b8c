"""EventSerde / PatternSerde / AssessmentSerde: round trips, framing errors, registry."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_strategies import json_values

from streams.core.events import EVENT_TYPES, Budget, TraceEvent
from streams.errors import (
    InvalidEventError,
    MalformedMessageError,
    OversizedMessageError,
    UnknownSchemaError,
    UnserializableError,
)
from streams.serde import (
    AssessmentSerde,
    AssessmentWire,
    EventSerde,
    PatternRecord,
    PatternSerde,
    fingerprint,
    load_schema,
)
from streams.serde.schemas import codec_schema

FULL = TraceEvent(
    type="tool_result",
    session_id="sess.1_a-b",
    seq=2**63 - 1,
    timestamp_ms=-(2**63),
    agent_id="agent-ü",
    parent_session_id="parent",
    call_id="call-1",
    tool_name="bash",
    input={"cmd": "ls ☃", "args": [1, 2.5, None, True, "x"], "big": 10**40, "nested": {"a": []}},
    output=["résumé", {"b": -1}],
    params_summary="ls ☃",
    is_error=True,
    error_message="boom 💥",
    text="some text\nwith newline",
    input_tokens=0,
    output_tokens=123456789012,
    latency_ms=17,
    metadata={"observer_profile": "default", "ключ": "значение"},
    budget=Budget(deadline_ms=1_700_000_000_000, max_tokens=5, tokens_used=None, max_tool_calls=9),
)


def test_full_event_round_trips_every_field() -> None:
    serde = EventSerde()
    data = serde.encode(FULL)
    assert data[:2] == b"\xc3\x01"
    assert struct.unpack("<Q", data[2:10])[0] == fingerprint("trace_event")
    assert serde.decode(data) == FULL


def test_minimal_event_round_trips_with_defaults() -> None:
    ev = TraceEvent(type="session_start", session_id="s", seq=0, timestamp_ms=0)
    out = EventSerde().decode(EventSerde().encode(ev))
    assert out == ev and out.metadata == {} and out.input is None and out.budget is None


@pytest.mark.parametrize("etype", EVENT_TYPES)
def test_every_event_type_round_trips(etype: str) -> None:
    ev = TraceEvent(type=etype, session_id="s", seq=1, timestamp_ms=5)  # type: ignore[arg-type]
    assert EventSerde().decode(EventSerde().encode(ev)).type == etype


finite_json_values = json_values(key_size=8, max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(
    inp=finite_json_values,
    out=finite_json_values,
    text=st.none() | st.text(),
    seq=st.integers(min_value=0, max_value=2**63 - 1),
    ts=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    meta=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
def test_round_trip_property(
    inp: Any, out: Any, text: str | None, seq: int, ts: int, meta: dict[str, str]
) -> None:
    ev = TraceEvent(
        type="tool_call",
        session_id="s",
        seq=seq,
        timestamp_ms=ts,
        input=inp,
        output=out,
        text=text,
        metadata=meta,
    )
    serde = EventSerde()
    assert serde.decode(serde.encode(ev)) == ev


# -- framing errors -----------------------------------------------------------


def _data() -> bytes:
    return EventSerde().encode(FULL)


def test_bad_marker_is_malformed() -> None:
    data = _data()
    with pytest.raises(MalformedMessageError, match="bad single-object marker c3 02"):
        EventSerde().decode(b"\xc3\x02" + data[2:])
    with pytest.raises(MalformedMessageError, match="first byte 0x7b"):
        EventSerde().decode(b'{"type": "json"}')
    with pytest.raises(MalformedMessageError, match="shorter than the 10-byte"):
        EventSerde().decode(data[:6])
    with pytest.raises(MalformedMessageError, match="empty message"):
        EventSerde().decode(b"")


def test_unknown_fingerprint_is_named_in_hex() -> None:
    data = _data()
    forged = data[:2] + struct.pack("<Q", 0x0123456789ABCDEF) + data[10:]
    with pytest.raises(UnknownSchemaError, match="0x0123456789abcdef"):
        EventSerde().decode(forged)


def test_truncated_body_and_trailing_bytes_are_malformed() -> None:
    data = _data()
    with pytest.raises(MalformedMessageError, match="invalid Avro body"):
        EventSerde().decode(data[:-5])
    with pytest.raises(MalformedMessageError, match="2 trailing byte"):
        EventSerde().decode(data + b"\x00\x00")


def test_the_reason_for_a_truncated_body_is_the_same_on_every_decode() -> None:
    # fastavro's EOFError names the BytesIO it read from, address included; a
    # reason carrying it differs on every redelivery of the same bad record,
    # so the DLQ would hold one input twice "with differing content".
    data = _data()
    for cut in range(10, len(data)):
        reasons = set()
        for _ in range(2):
            try:
                EventSerde().decode(data[:cut])
            except MalformedMessageError as exc:
                reasons.add(str(exc))
        assert len(reasons) <= 1, reasons
        assert not any(" at 0x" in r for r in reasons), reasons


def test_invalid_enum_index_is_malformed() -> None:
    data = bytearray(_data())
    data[10] = 2 * 40  # zigzag(40): no such EventType symbol
    with pytest.raises(MalformedMessageError, match="invalid Avro body"):
        EventSerde().decode(bytes(data))


def _raw(record_changes: dict[str, Any]) -> bytes:
    record = {
        "type": "tool_call",
        "session_id": "s",
        "seq": 0,
        "timestamp_ms": 0,
        "metadata": {},
    } | record_changes
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fingerprint("trace_event")))
    fastavro.schemaless_writer(buf, codec_schema("trace_event"), record)
    return buf.getvalue()


def test_forward_compat_unknown_type_and_invalid_json_text_are_malformed() -> None:
    with pytest.raises(MalformedMessageError, match=r"type 'unknown'.*newer schema"):
        EventSerde().decode(_raw({"type": "unknown"}))
    with pytest.raises(MalformedMessageError, match="input_json is not valid JSON"):
        EventSerde().decode(_raw({"input_json": "{not json"}))


def test_oversized_on_encode_and_decode() -> None:
    big = TraceEvent(type="message", session_id="s", seq=0, timestamp_ms=0, text="x" * 5000)
    with pytest.raises(OversizedMessageError, match="over the 1000-byte cap"):
        EventSerde(max_bytes=1000).encode(big)
    data = EventSerde().encode(big)
    with pytest.raises(OversizedMessageError, match=f"{len(data)} bytes"):
        EventSerde(max_bytes=1000).decode(data)


# -- encode-side validation ---------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"seq": 2**63}, "seq"),
        ({"seq": "1"}, "seq"),
        ({"timestamp_ms": 1.5}, "timestamp_ms"),
        ({"input_tokens": True}, "input_tokens"),
        ({"session_id": None}, "session_id"),
        ({"metadata": {"k": 1}}, 'metadata["k"]'),
        ({"metadata": {1: "v"}}, "metadata[1]"),
        ({"input": {"args": [1, 2, {3}]}}, "input.args[2]"),
        ({"output": {"x": float("nan")}}, "output.x"),
        ({"input": {"a b": b"raw"}}, 'input["a b"]'),
        ({"input": {1: "x"}}, "input[1]"),
        ({"budget": Budget(max_tokens=2**64)}, "budget.max_tokens"),
        ({"type": "bogus"}, "type"),
    ],
)
def test_encode_errors_name_the_field(changes: dict[str, Any], path: str) -> None:
    base = {"type": "tool_call", "session_id": "s", "seq": 0, "timestamp_ms": 0}
    ev = TraceEvent(**(base | changes))
    with pytest.raises(UnserializableError) as info:
        EventSerde().encode(ev)
    assert info.value.field == path


def test_encode_cycle_is_named() -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    ev = TraceEvent(type="tool_call", session_id="s", seq=0, timestamp_ms=0, input=loop)
    with pytest.raises(UnserializableError, match="cycle") as info:
        EventSerde().encode(ev)
    assert info.value.field == "input[1].again"


# -- schema evolution ----------------------------------------------------------


def _old_schema() -> dict[str, Any]:
    """An imagined older TraceEvent without latency_ms/metadata/budget."""
    schema = load_schema("trace_event")
    drop = {"latency_ms", "metadata", "budget"}
    schema["fields"] = [f for f in schema["fields"] if f["name"] not in drop]
    return schema


def test_older_writer_schema_resolves_to_the_current_reader() -> None:
    old = _old_schema()
    buf = io.BytesIO()
    serde = EventSerde()
    fp = serde.add_writer_schema(old)
    assert fp != serde.fingerprint
    buf.write(b"\xc3\x01" + struct.pack("<Q", fp))
    rec = {"type": "tool_call", "session_id": "s", "seq": 4, "timestamp_ms": 9, "tool_name": "t"}
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), rec)
    ev = serde.decode(buf.getvalue())
    assert (ev.seq, ev.tool_name, ev.latency_ms, ev.metadata, ev.budget) == (4, "t", None, {}, None)
    with pytest.raises(UnknownSchemaError):
        EventSerde().decode(buf.getvalue())  # a serde without the old schema


# -- Confluent framing -----------------------------------------------------------


def test_confluent_framing_with_mock_registry() -> None:
    writer = EventSerde("confluent", registry="mock://serde-test")
    data = writer.encode(FULL)
    (schema_id,) = struct.unpack(">I", data[1:5])
    assert data[0] == 0 and schema_id >= 1
    assert writer.decode(data) == FULL
    reader = EventSerde("confluent", registry=writer.registry)  # cold id cache
    assert reader.decode(data) == FULL
    # a single-object reader also decodes single-object messages from the same serde
    assert reader.decode(EventSerde().encode(FULL)) == FULL


def test_confluent_unknown_id_and_missing_registry() -> None:
    writer = EventSerde("confluent", registry="mock://serde-test-2")
    data = writer.encode(FULL)
    forged = b"\x00" + struct.pack(">I", 424242) + data[5:]
    with pytest.raises(UnknownSchemaError, match="schema id 424242"):
        EventSerde("confluent", registry=writer.registry).decode(forged)
    with pytest.raises(UnknownSchemaError, match="no schema registry is configured"):
        EventSerde().decode(data)
    with pytest.raises(InvalidEventError, match="needs a schema registry"):
        EventSerde("confluent")
    with pytest.raises(InvalidEventError, match="framing"):
        EventSerde("avro-json")


def test_confluent_older_registered_schema_resolves() -> None:
    from confluent_kafka.schema_registry import Schema

    writer = EventSerde("confluent", registry="mock://serde-test-3")
    old = _old_schema()
    old_id = writer.registry.register_schema("old-subject", Schema(json.dumps(old), "AVRO"))
    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", old_id))
    rec = {"type": "error", "session_id": "s", "seq": 1, "timestamp_ms": 2, "error_message": "e"}
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), rec)
    ev = writer.decode(buf.getvalue())
    assert (ev.type, ev.error_message, ev.metadata) == ("error", "e", {})


# -- patterns and assessments -------------------------------------------------------


def test_pattern_round_trip() -> None:
    p = PatternRecord(
        session_id="s",
        seq=12,
        timestamp_ms=1_700_000_000_000,
        pattern_type="doom_loop",
        call_index=6,
        confidence=0.875,
        severity="warning",
        evidence=("bash ls", "bash ls ü"),
        occurrences=3,
        first_seen_ms=1_699_999_999_000,
        details={"sequence": ["bash", "bash"], "length": 2},
    )
    serde = PatternSerde()
    data = serde.encode(p)
    assert struct.unpack("<Q", data[2:10])[0] == fingerprint("pattern_detection")
    assert serde.decode(data) == p
    with pytest.raises(MalformedMessageError):
        PatternSerde().decode(EventSerde().encode(FULL)[:2] + data[2:-1])
    with pytest.raises(UnknownSchemaError):
        PatternSerde().decode(EventSerde().encode(FULL))  # wrong record type's fingerprint
    with pytest.raises(UnserializableError) as info:
        serde.encode(PatternRecord("s", 1, 1, "x", evidence=("ok", 3)))  # type: ignore[arg-type]
    assert info.value.field == "evidence[1]"


def test_assessment_round_trip() -> None:
    a = AssessmentWire(
        session_id="s",
        seq=3,
        timestamp_ms=5,
        trigger="timer",
        call_index=2,
        max_severity="caution",
        rendered="## Assessment\n- ok ✓",
        assessments=[{"observer_name": "resource", "severity": "caution"}],
    )
    serde = AssessmentSerde("confluent", registry="mock://serde-test-4")
    assert serde.decode(serde.encode(a)) == a
    assert AssessmentSerde().decode(AssessmentSerde().encode(a)) == a
    with pytest.raises(UnserializableError, match="trigger"):
        AssessmentSerde().encode(AssessmentWire("s", 1, 1, "cron"))  # type: ignore[arg-type]


def test_the_fast_frame_path_decodes_as_the_general_one() -> None:
    """``decode`` skips ``_frame``'s lookups for bytes framed with the bundled
    writer schema; bytearray/memoryview input takes the general path.  Both give
    the same event, and the size cap and a truncated body fail the same way."""
    serde = EventSerde()
    data = serde.encode(FULL)
    assert serde.decode(data) == serde.decode(bytearray(data)) == FULL
    assert serde.decode(memoryview(data)) == FULL
    capped = EventSerde(max_bytes=len(data) - 1)
    with pytest.raises(OversizedMessageError, match="over the"):
        capped.decode(data)
    with pytest.raises(MalformedMessageError) as fast:
        serde.decode(data[:-3])
    with pytest.raises(MalformedMessageError) as general:
        serde.decode(bytearray(data[:-3]))
    assert str(fast.value) == str(general.value)
