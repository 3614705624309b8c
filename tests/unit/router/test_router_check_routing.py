"""``check_routing``: the router's framing-only check (decode once, issue #12).

Against the real EventSerde, no Kafka.  Every message :func:`check_message`
refuses for its framing, size, schema or session is refused the same way here
without a full decode; what only a full decode finds (a truncated tail, a bad
``seq``) is accepted here and refused by the worker (tests/unit/worker/test_batch.py).
"""

from __future__ import annotations

import struct

import pytest

from streams.core.events import EVENT_TYPES, TraceEvent
from streams.router.validate import Accepted, Rejected, check_message, check_routing
from streams.serde import EventSerde, load_schema

SERDE = EventSerde()
PREFIX = "tp"
TOPIC = "tp.session.s-1"


def ev(sid: str = "s-1", seq: int = 0, etype: str = "tool_call") -> TraceEvent:
    return TraceEvent(
        type=etype,  # type: ignore[arg-type]
        session_id=sid,
        seq=seq,
        timestamp_ms=1_700_000_000_000,
        tool_name="bash",
        input={"cmd": "ls"},
    )


def both(value: bytes | None, topic: str = TOPIC, cap: int = 1 << 20) -> tuple[object, object]:
    kw = {"prefix": PREFIX, "decoder": SERDE, "max_message_bytes": cap}
    return check_routing(value, topic, **kw), check_message(value, topic, **kw)  # type: ignore[arg-type]


def test_the_schema_starts_with_type_then_session_id_in_event_types_order() -> None:
    """What check_routing reads by hand; a schema change must change it too."""
    fields = load_schema("trace_event")["fields"]
    assert [f["name"] for f in fields[:2]] == ["type", "session_id"]
    assert fields[1]["type"] == "string"
    assert tuple(fields[0]["type"]["symbols"]) == (*EVENT_TYPES, "unknown")


@pytest.mark.parametrize("etype", EVENT_TYPES)
def test_valid_events_are_accepted_with_session_and_type(etype: str) -> None:
    fast, full = both(SERDE.encode(ev(etype=etype)))
    assert fast == Accepted(session_id="s-1", seq=-1, type=etype)
    assert isinstance(full, Accepted) and full.type == etype


def _unknown_fp() -> bytes:
    data = bytearray(SERDE.encode(ev()))
    data[2:10] = struct.pack("<Q", 0xDEAD_BEEF_DEAD_BEEF)
    return bytes(data)


@pytest.mark.parametrize(
    ("value", "topic", "cls", "text"),
    [
        (b"\xff\x00 not avro", TOPIC, "MalformedMessageError", "neither the Avro single-object"),
        (b"\xc3\x02" + bytes(20), TOPIC, "MalformedMessageError", "bad single-object marker"),
        (b"\xc3\x01\x00", TOPIC, "MalformedMessageError", "shorter than the 10-byte"),
        (_unknown_fp(), TOPIC, "UnknownSchemaError", "0xdeadbeefdeadbeef"),
        (SERDE.encode(ev("s-2")), TOPIC, "InvalidEventError", "session_id: event says 's-2'"),
        (SERDE.encode(ev("s-10")), TOPIC, "InvalidEventError", "session_id: event says 's-10'"),
        (SERDE.encode(ev("s")), TOPIC, "InvalidEventError", "session_id: event says 's'"),
        (None, TOPIC, "MalformedMessageError", "tombstone"),
        (b"", TOPIC, "MalformedMessageError", "tombstone"),
        (SERDE.encode(ev()), "tp.other", "InvalidEventError", "not a per-session topic"),
    ],
)
def test_refused_like_the_full_check(value: bytes | None, topic: str, cls: str, text: str) -> None:
    fast, full = both(value, topic)
    assert isinstance(fast, Rejected), fast
    assert fast.error_class == cls and text in fast.reason, fast
    assert isinstance(full, Rejected) and full.error_class == cls


def test_oversized_is_refused_before_anything_else() -> None:
    fast, full = both(SERDE.encode(ev()) + b"x" * 100, cap=64)
    assert isinstance(fast, Rejected) and fast == full
    assert fast.error_class == "OversizedMessageError"


@pytest.mark.parametrize("cut", [10, 11, 12, 13])
def test_a_body_cut_inside_type_or_session_id_is_refused(cut: int) -> None:
    fast, _ = both(SERDE.encode(ev())[:cut])
    assert isinstance(fast, Rejected) and fast.error_class == "MalformedMessageError", fast
    assert "invalid Avro body" in fast.reason


def test_an_unknown_enum_index_is_refused() -> None:
    data = bytearray(SERDE.encode(ev()))
    data[10] = 2 * len(EVENT_TYPES)  # zig-zag: index len(EVENT_TYPES) = 'unknown'
    fast, full = both(bytes(data))
    assert isinstance(fast, Rejected) and fast.error_class == "MalformedMessageError"
    assert isinstance(full, Rejected)


def test_what_only_a_full_decode_finds_is_left_to_the_worker() -> None:
    """Truncated after session_id, negative seq: forwarded (the worker refuses them)."""
    good = SERDE.encode(ev())
    for value in (good[:-6], SERDE.encode(ev(seq=-1)), good + b"\x00"):
        fast, full = both(value)
        assert isinstance(fast, Accepted), fast
        assert isinstance(full, Rejected), full


def test_another_known_writer_schema_is_decoded_fully() -> None:
    serde = EventSerde()
    schema = load_schema("trace_event")
    older = dict(schema, fields=[schema["fields"][1], schema["fields"][0], *schema["fields"][2:]])
    fp = serde.add_writer_schema(older)
    import io

    import fastavro

    from streams.serde.schemas import parse_codec_schema

    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fp))
    record = serde.to_record(ev("s-2"))
    fastavro.schemaless_writer(buf, parse_codec_schema(older), record)
    kw = {"prefix": PREFIX, "decoder": serde, "max_message_bytes": 1 << 20}
    verdict = check_routing(buf.getvalue(), TOPIC, **kw)  # type: ignore[arg-type]
    assert isinstance(verdict, Rejected) and "event says 's-2'" in verdict.reason
    buf2 = io.BytesIO()
    buf2.write(b"\xc3\x01" + struct.pack("<Q", fp))
    fastavro.schemaless_writer(buf2, parse_codec_schema(older), serde.to_record(ev()))
    ok = check_routing(buf2.getvalue(), TOPIC, **kw)  # type: ignore[arg-type]
    assert isinstance(ok, Accepted) and ok.seq == 0  # fully decoded: seq known
