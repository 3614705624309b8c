"""The decode fast paths equal the plain ones (issue #12 item 4).

``EventSerde.decode`` skips the framing parse for a record whose header is
exactly the bundled schema's and maps the record positionally
(``_from_decoded``); ``loads_json`` calls the JSON scanner directly for a text
that is exactly one value.  Each must give what the plain path gives, value or
error, for every event type and optional field.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import EVENT_TYPES, Budget, TraceEvent
from streams.errors import MalformedMessageError, OversizedMessageError
from streams.serde import EventSerde, fingerprint, load_schema
from streams.serde.jsontext import _DECODER, MAX_JSON_DEPTH, json_depth_exceeds, loads_json

SERDE = EventSerde()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
opt_text = st.none() | st.text(max_size=12)
opt_long = st.none() | st.integers(-(2**63), 2**63 - 1)
budgets = st.none() | st.builds(Budget, opt_long, opt_long, opt_long, opt_long)

events = st.builds(
    TraceEvent,
    type=st.sampled_from(EVENT_TYPES),
    session_id=st.text(max_size=12),
    seq=st.integers(-(2**63), 2**63 - 1),
    timestamp_ms=st.integers(-(2**63), 2**63 - 1),
    agent_id=opt_text,
    parent_session_id=opt_text,
    call_id=opt_text,
    tool_name=opt_text,
    input=json_values,
    output=json_values,
    params_summary=opt_text,
    is_error=st.booleans(),
    error_message=opt_text,
    text=opt_text,
    input_tokens=opt_long,
    output_tokens=opt_long,
    latency_ms=opt_long,
    metadata=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    budget=budgets,
)


def _plain(data: bytes) -> TraceEvent:
    """The plain path: parse the framing, read the body, ``from_record`` (``.get``)."""
    buf = io.BytesIO(data)
    buf.seek(10)
    record = fastavro.schemaless_reader(buf, SERDE._reader, None)
    assert buf.tell() == len(data)
    return SERDE.from_record(record)


@settings(max_examples=300, deadline=None)
@given(events)
def test_the_fast_decode_equals_the_plain_one_for_every_event(event: TraceEvent) -> None:
    data = SERDE.encode(event)
    fast = SERDE.decode(data)
    assert fast == _plain(data) == SERDE.decode(bytearray(data))  # bytearray: via _frame
    # the values an encoder writes come back: the event itself, JSON values included
    assert fast == event
    assert type(fast.is_error) is bool and type(fast.metadata) is dict


def test_bundled_bytes_take_the_fast_path_and_other_input_the_framing_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = SERDE.encode(TraceEvent("tool_call", "s", 1, 5, input={"a": [1]}))
    serde = EventSerde()

    def no_frame(_data: Any) -> Any:
        raise AssertionError("_frame called")

    monkeypatch.setattr(serde, "_frame", no_frame)
    assert serde.decode(data) == SERDE.decode(data)
    with pytest.raises(AssertionError, match="_frame called"):
        serde.decode(bytearray(data))


def test_the_fast_path_keeps_the_size_cap_and_the_trailing_bytes_check() -> None:
    data = SERDE.encode(TraceEvent("tool_call", "s", 1, 5, text="x" * 50))
    with pytest.raises(OversizedMessageError, match="over the 20-byte cap"):
        EventSerde(max_bytes=20).decode(data)
    with pytest.raises(MalformedMessageError, match="1 trailing byte"):
        SERDE.decode(data + b"\x00")
    with pytest.raises(MalformedMessageError, match="invalid Avro body"):
        SERDE.decode(data[:-3])


def test_a_bad_json_text_is_named_on_the_fast_path() -> None:
    record = SERDE.to_record(TraceEvent("tool_call", "s", 1, 5))
    record["output_json"] = '{"x": NaN}'
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fingerprint("trace_event")))
    fastavro.schemaless_writer(buf, SERDE._reader, record)
    with pytest.raises(MalformedMessageError, match="output_json is not valid JSON text: NaN"):
        SERDE.decode(buf.getvalue())


def test_a_type_symbol_unknown_to_this_reader_is_refused_on_the_fast_path() -> None:
    """A record read with the bundled schema cannot carry an unknown symbol, so
    ``_from_decoded`` is fed one directly: the check the schema does not
    guarantee for a newer writer stays, with from_record's message."""
    record = SERDE.to_record(TraceEvent("tool_call", "s", 1, 5))
    record["type"] = "telepathy"
    with pytest.raises(MalformedMessageError, match=r"type 'telepathy' .* upgrade the consumer"):
        SERDE._from_decoded(record)


def test_an_older_writer_schema_is_resolved_not_fast_pathed() -> None:
    """A writer without ``latency_ms``: its fingerprint differs, the body is
    resolved to the reader schema (default None) and mapped by the fast mapper."""
    old = load_schema("trace_event")
    old = {**old, "fields": [f for f in old["fields"] if f["name"] != "latency_ms"]}
    serde = EventSerde()
    fp = serde.add_writer_schema(old)
    record = SERDE.to_record(TraceEvent("model_step", "s", 3, 9, input_tokens=7))
    del record["latency_ms"]
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fp))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), record)
    assert serde.decode(buf.getvalue()) == TraceEvent("model_step", "s", 3, 9, input_tokens=7)


# ---------------------------------------------------------------- loads_json


def _reference_loads(text: str, field: str) -> Any:
    """``loads_json`` as it was before the scanner fast path (``_DECODER.decode``)."""
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise MalformedMessageError(f"{field}: nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except ValueError as exc:
        raise MalformedMessageError(f"{field} is not valid JSON text: {exc}") from exc


def _outcome(fn: Any, text: str) -> tuple[str, Any]:
    try:
        return "ok", fn(text, "input_json")
    except MalformedMessageError as exc:
        return "error", str(exc)


padded_json = st.tuples(
    st.sampled_from(["", " ", "\n", "\t "]),
    json_values.map(json.dumps),
    st.sampled_from(["", " ", "\r\n", "x", ",1", "]"]),
).map("".join)
tricky = st.sampled_from(
    ["", " ", "NaN", "[Infinity]", "[1e400]", '"abc', "[1,]", "1 2", "\ufeff{}", "{} ", " {}"]
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(padded_json, tricky, st.text(max_size=20)))
def test_loads_json_fast_path_equals_the_decoder(text: str) -> None:
    got, want = _outcome(loads_json, text), _outcome(_reference_loads, text)
    assert got == want
