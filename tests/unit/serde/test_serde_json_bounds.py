"""Bounded, total decoding of the ``*_json`` fields (issue #15, defects 2 and 3).

Whatever JSON text an Avro event carries, ``EventSerde.decode`` either returns a
value the worker's state codec can encode, or raises ``MalformedMessageError``
naming the field; never ``RecursionError``, never a NaN that blows up later.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_strategies import json_values

from streams.core.engine import SessionEngine
from streams.core.events import TraceEvent
from streams.core.statecodec import decode_state, encode_state, from_canonical, to_canonical
from streams.errors import MalformedMessageError, UnserializableError
from streams.serde import AssessmentSerde, EventSerde, PatternSerde, fingerprint
from streams.serde.jsontext import (
    MAX_JSON_DEPTH,
    check_json,
    dumps_json,
    json_depth_exceeds,
    loads_json,
)
from streams.serde.schemas import codec_schema
from streams.worker.state import SessionCounters


def _raw(schema: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fingerprint(schema)))
    fastavro.schemaless_writer(buf, codec_schema(schema), record)
    return buf.getvalue()


def _event(**changes: Any) -> bytes:
    record = {"type": "tool_call", "session_id": "s", "seq": 0, "timestamp_ms": 0, "metadata": {}}
    return _raw("trace_event", record | changes)


def _nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


BAD_TEXTS = [
    (_nested(200_000), "nested deeper than 64 levels"),
    (_nested(MAX_JSON_DEPTH + 1), "nested deeper than 64 levels"),
    ('{"a":' * 70 + "1" + "}" * 70, "nested deeper than 64 levels"),
    ('{"x": NaN}', "NaN is not valid JSON"),
    ("[Infinity]", "Infinity is not valid JSON"),
    ("[-Infinity]", "-Infinity is not valid JSON"),
    ("[1e400]", "does not fit a finite double"),
    ('"\\ud800"', "lone UTF-16 surrogate"),
    ('{"k\\udc00": 1}', "lone UTF-16 surrogate"),
    ("1" * 5000, "not valid JSON text"),
    ("{not json", "not valid JSON text"),
    ("", "not valid JSON text"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_TEXTS)
@pytest.mark.parametrize("field", ["input_json", "output_json"])
def test_event_json_fields_reject_with_the_field_named(text: str, field: str, reason: str) -> None:
    with pytest.raises(MalformedMessageError) as info:
        EventSerde().decode(_event(**{field: text}))
    message = str(info.value)
    assert reason in message
    assert f"{field}: " in message or f"{field} is not valid JSON text" in message


def test_pattern_and_assessment_json_fields_are_bounded_too() -> None:
    pattern = {
        "session_id": "s",
        "seq": 0,
        "call_index": 0,
        "timestamp_ms": 0,
        "pattern_type": "p",
        "confidence": 0.5,
        "evidence": [],
        "occurrences": 1,
        "details_json": '{"x": NaN}',
    }
    with pytest.raises(MalformedMessageError, match="details_json is not valid JSON text: NaN"):
        PatternSerde().decode(_raw("pattern_detection", pattern))
    assessment = {
        "session_id": "s",
        "seq": 0,
        "call_index": 0,
        "timestamp_ms": 0,
        "trigger": "event",
        "rendered": "",
        "assessments_json": _nested(100_000),
    }
    with pytest.raises(MalformedMessageError, match="assessments_json: nested deeper than 64"):
        AssessmentSerde().decode(_raw("assessment_record", assessment))


def test_depth_limit_is_exact_and_ignores_brackets_in_strings() -> None:
    assert loads_json(_nested(MAX_JSON_DEPTH), "f") is not None
    assert not json_depth_exceeds(_nested(MAX_JSON_DEPTH))
    assert json_depth_exceeds(_nested(MAX_JSON_DEPTH + 1))
    # 1,000 brackets, all inside strings (escaped quotes too): depth 1.
    text = "[" + ",".join(['"[[{{\\"]]"'] * 250) + "]"
    assert not json_depth_exceeds(text)
    assert len(loads_json(text, "f")) == 250
    # Many shallow containers are fine: depth, not count.
    wide = "[" + ",".join(["[{}]"] * 10_000) + "]"
    assert not json_depth_exceeds(wide)


def test_paired_surrogate_escape_is_a_character() -> None:
    assert loads_json('"\\ud83d\\ude00"', "f") == "\N{GRINNING FACE}"
    assert loads_json('"\\\\ud800"', "f") == "\\ud800"  # an escaped backslash, not an escape


def _deep_value(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_sdk_side_rejects_what_the_decoder_rejects() -> None:
    with pytest.raises(UnserializableError, match="nested deeper than 64 levels") as info:
        check_json({"a": _deep_value(MAX_JSON_DEPTH)}, "input")
    assert info.value.field.startswith("input.a")
    check_json(_deep_value(MAX_JSON_DEPTH), "input")
    # ... and what the SDK writes at the limit, the decoder takes back.
    text = dumps_json(_deep_value(MAX_JSON_DEPTH), "input")
    assert loads_json(text, "input_json") == _deep_value(MAX_JSON_DEPTH)


def test_accepted_extremes_survive_the_worker_state_codec() -> None:
    """What decode accepts at the limit, the worker's session state can encode."""
    deep = _nested(MAX_JSON_DEPTH)
    deep_obj = '{"a":' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH
    serde = EventSerde()
    engine = SessionEngine.create("s")
    call = serde.decode(_event(seq=0, call_id="c1", tool_name="bash", input_json=deep))
    result = serde.decode(
        _event(type="tool_result", seq=1, call_id="c1", tool_name="bash", output_json=deep_obj)
    )
    assert isinstance(call, TraceEvent)
    engine.on_event(call)
    engine.on_event(result)
    state = engine.snapshot()
    for compress in (False, True):
        assert decode_state(encode_state(state, compress=compress)) == state


# NaN and infinities included: they must be rejected by name
json_texts = json_values(non_finite=True, key_size=None, max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(value=json_texts, depth=st.integers(0, 80))
def test_decode_is_total(value: Any, depth: int) -> None:
    """Any text Python's json would write: accepted and re-encodable, or named."""
    import json

    text = "[" * depth + json.dumps(value) + "]" * depth
    try:
        got = loads_json(text, "input_json")
    except MalformedMessageError as exc:
        assert str(exc).startswith("input_json")
        return
    check_json(got, "input")  # what passed is plain, bounded JSON
    # what the worker stores: engine states hold such values through the canonical
    # codec, the session counters keep the event itself in their recent window
    assert from_canonical(to_canonical(got)) == got
    event = TraceEvent(type="tool_call", session_id="s", seq=0, timestamp_ms=0, input=got)
    counters = SessionCounters(session_id="s").apply(event)
    assert counters is not None
    assert SessionCounters.decode(counters.encode()) == counters
