"""``RoutingCheck``: the router's cached per-message form of ``check_routing`` (issue #12).

Its invariant is that it answers exactly what :func:`check_routing` answers, whatever
it has cached; these tests feed one checker every kind of message, twice and in
varying order (so the fast path is warm), and compare verdicts one by one.
"""

from __future__ import annotations

import io
import struct

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import EVENT_TYPES, TraceEvent
from streams.router.validate import Accepted, Rejected, RoutingCheck, check_routing
from streams.serde import EventSerde, load_schema
from streams.serde.schemas import parse_codec_schema

PREFIX = "tp"
CAP = 1 << 16
CRAFTED = 97 * 64  # see test_a_long_session_id_whose_length_varint_looks_like_the_topics


def ev(sid: str, etype: str = "tool_call", seq: int = 0) -> TraceEvent:
    return TraceEvent(
        type=etype,  # type: ignore[arg-type]
        session_id=sid,
        seq=seq,
        timestamp_ms=1_700_000_000_000,
        tool_name="bash",
        input={"cmd": "ls"},
    )


def topic(sid: str) -> str:
    return f"{PREFIX}.session.{sid}"


def _older_writer(serde: EventSerde, sid: str) -> bytes:
    """An event written with another known writer schema (fields 0 and 1 swapped)."""
    schema = load_schema("trace_event")
    older = dict(schema, fields=[schema["fields"][1], schema["fields"][0], *schema["fields"][2:]])
    fp = serde.add_writer_schema(older)
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fp))
    fastavro.schemaless_writer(buf, parse_codec_schema(older), serde.to_record(ev(sid)))
    return buf.getvalue()


def corpus(serde: EventSerde) -> list[tuple[bytes | None, str]]:
    long64, crafted = "a" * 64, "a" * CRAFTED
    good = serde.encode(ev("s-1"))
    cases: list[tuple[bytes | None, str]] = [
        *((serde.encode(ev("s-1", t)), topic("s-1")) for t in EVENT_TYPES),
        (serde.encode(ev("s-2")), topic("s-1")),  # same length, other session
        (serde.encode(ev("s-10")), topic("s-1")),  # the topic's session is a prefix
        (serde.encode(ev("s")), topic("s-1")),
        (serde.encode(ev(long64)), topic(long64)),  # two-byte length varint
        (serde.encode(ev(crafted)), topic(long64)),
        (serde.encode(ev("a" * 128)), topic(long64)),
        (serde.encode(ev("x" * 63)), topic("x" * 63)),
        (good, "tp.other"),
        (good, topic("s-1")),
        (None, topic("s-1")),
        (b"", topic("s-1")),
        (b"\xff\x00 not avro", topic("s-1")),
        (b"\xc3\x02" + bytes(20), topic("s-1")),
        (b"\xc3\x01\x00", topic("s-1")),
        (good + b"x" * CAP, topic("s-1")),
        (_older_writer(serde, "s-1"), topic("s-1")),
        (_older_writer(serde, "s-2"), topic("s-1")),
        (serde.encode(ev("s-1", seq=-1)), topic("s-1")),  # left to the worker
    ]
    cases += [(good[:cut], topic("s-1")) for cut in range(9, 16)]
    unknown = bytearray(good)
    unknown[2:10] = struct.pack("<Q", 0xDEAD_BEEF_DEAD_BEEF)
    cases.append((bytes(unknown), topic("s-1")))
    bad_index = bytearray(good)
    bad_index[10] = 2 * len(EVENT_TYPES)  # 'unknown'
    cases.append((bytes(bad_index), topic("s-1")))
    odd = bytearray(good)
    odd[10] = 1  # zig-zag -1
    cases.append((bytes(odd), topic("s-1")))
    return cases


def test_every_verdict_equals_check_routing_cold_and_warm() -> None:
    serde = EventSerde()
    cases = corpus(serde)
    check = RoutingCheck(prefix=PREFIX, decoder=serde, max_message_bytes=CAP)
    for order in (cases, cases[::-1], cases):
        for value, tp in order:
            expected = check_routing(value, tp, prefix=PREFIX, decoder=serde, max_message_bytes=CAP)
            assert check(value, tp) == expected, (value, tp)


def test_a_long_session_id_whose_length_varint_looks_like_the_topics_is_refused() -> None:
    """Regression: a one-byte-varint shortcut must not read 0x80 (= 2 * 64) as a length.

    A session id of 97 * 64 ``a`` is encoded with the length varint ``80 61``, and
    0x61 is ``a``: read as a one-byte length 64 the body looks like the 64-``a``
    topic's session id.
    """
    serde = EventSerde()
    check = RoutingCheck(prefix=PREFIX, decoder=serde, max_message_bytes=CAP)
    check(serde.encode(ev("a" * 64)), topic("a" * 64))  # warm: header known
    value = serde.encode(ev("a" * CRAFTED))
    assert value[11:13] == b"\x80\x61"
    verdict = check(value, topic("a" * 64))
    assert isinstance(verdict, Rejected) and verdict.error_class == "InvalidEventError"


def test_accepted_verdicts_are_shared_per_session_and_type() -> None:
    serde = EventSerde()
    check = RoutingCheck(prefix=PREFIX, decoder=serde, max_message_bytes=CAP)
    check(serde.encode(ev("s-1", seq=0)), topic("s-1"))  # learns the header
    a = check(serde.encode(ev("s-1", seq=1)), topic("s-1"))
    b = check(serde.encode(ev("s-1", seq=2)), topic("s-1"))
    assert a == Accepted(session_id="s-1", seq=-1, type="tool_call") and a is b


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=40), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["s-1", "s-2", "a" * 64]),
)
def test_mutated_bytes_get_the_same_verdict(edits: list[tuple[int, int]], sid: str) -> None:
    serde = EventSerde()
    check = RoutingCheck(prefix=PREFIX, decoder=serde, max_message_bytes=CAP)
    good = serde.encode(ev(sid))
    check(good, topic(sid))  # warm
    data = bytearray(good)
    for pos, byte in edits:
        data[pos % len(data)] = byte
    for tp in (topic(sid), topic("s-1")):
        expected = check_routing(
            bytes(data), tp, prefix=PREFIX, decoder=serde, max_message_bytes=CAP
        )
        assert check(bytes(data), tp) == expected
