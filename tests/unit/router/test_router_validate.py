"""Router validation rules, against the real EventSerde (no Kafka needed)."""

from __future__ import annotations

import struct

import pytest

from streams.core.events import TraceEvent
from streams.errors import MalformedMessageError
from streams.router.validate import (
    DLQ_ERROR_CLASS,
    DLQ_ORIGINAL_SIZE,
    DLQ_REASON,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
    DLQ_SOURCE_TOPIC,
    Accepted,
    Rejected,
    check_event,
    check_message,
    dlq_headers,
    forwarded_from,
    session_id_of_topic,
)
from streams.serde import EventSerde

SERDE = EventSerde()
PREFIX = "tp"


def ev(sid: str = "s-1", seq: int = 0, **kw: object) -> TraceEvent:
    return TraceEvent(
        type="tool_call",
        session_id=sid,
        seq=seq,
        timestamp_ms=1_700_000_000_000,
        tool_name="bash",
        input={"cmd": "ls"},
        **kw,
    )  # type: ignore[arg-type]


def check(value: bytes | None, topic: str = "tp.session.s-1", cap: int = 1 << 20):
    return check_message(value, topic, prefix=PREFIX, decoder=SERDE, max_message_bytes=cap)


def test_valid_event_is_accepted_with_its_session() -> None:
    v = check(SERDE.encode(ev(seq=7)))
    assert v == Accepted(session_id="s-1", seq=7, type="tool_call")


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("tp.session.abc", "abc"),
        ("tp.session.a.b_c-9", "a.b_c-9"),
        ("tp.session.", None),
        ("tp.events", None),
        ("other.session.abc", None),
        ("tp.session.bad/slash", None),
    ],
)
def test_session_id_of_topic(topic: str, expected: str | None) -> None:
    assert session_id_of_topic(PREFIX, topic) == expected


def test_garbage_bytes_rejected_as_malformed() -> None:
    v = check(b"\xffnot avro at all")
    assert isinstance(v, Rejected)
    assert v.error_class == "MalformedMessageError"
    assert "0xff" in v.reason


def test_truncated_avro_rejected() -> None:
    data = SERDE.encode(ev())
    v = check(data[: len(data) - 5])
    assert isinstance(v, Rejected)
    assert v.error_class == "MalformedMessageError"


def test_unknown_fingerprint_rejected() -> None:
    data = bytearray(SERDE.encode(ev()))
    data[2:10] = struct.pack("<Q", 0x1234_5678_9ABC_DEF0)
    v = check(bytes(data))
    assert isinstance(v, Rejected)
    assert v.error_class == "UnknownSchemaError"
    assert "0x123456789abcdef0" in v.reason


def test_wrong_session_for_topic_rejected_naming_field() -> None:
    v = check(SERDE.encode(ev(sid="intruder")))
    assert isinstance(v, Rejected)
    assert v.error_class == "InvalidEventError"
    assert v.reason.startswith("session_id:")
    assert "intruder" in v.reason and "tp.session.s-1" in v.reason


def test_oversized_rejected_before_decoding() -> None:
    data = SERDE.encode(ev(text="x" * 5000))

    class Exploding:
        def decode(self, data: bytes) -> TraceEvent:
            raise AssertionError("must not decode an oversized message")

    v = check_message(
        data, "tp.session.s-1", prefix=PREFIX, decoder=Exploding(), max_message_bytes=1000
    )
    assert isinstance(v, Rejected)
    assert v.error_class == "OversizedMessageError"
    assert f"{len(data)} bytes" in v.reason and "1000-byte cap" in v.reason


def test_exactly_at_cap_is_fine() -> None:
    data = SERDE.encode(ev())
    assert isinstance(check(data, cap=len(data)), Accepted)
    assert isinstance(check(data, cap=len(data) - 1), Rejected)


@pytest.mark.parametrize("value", [None, b""])
def test_tombstone_rejected(value: bytes | None) -> None:
    v = check(value)
    assert isinstance(v, Rejected) and v.error_class == "MalformedMessageError"


def test_negative_seq_rejected() -> None:
    # The serde happily encodes a negative long; the router's semantic check catches it.
    v = check(SERDE.encode(ev(seq=-3)))
    assert isinstance(v, Rejected)
    assert v.reason.startswith("seq:")


def test_check_event_rejects_unknown_type_and_bad_timestamp() -> None:
    bad_type = TraceEvent(type="bogus", session_id="s", seq=0, timestamp_ms=0)  # type: ignore[arg-type]
    v = check_event(bad_type, "s", "tp.session.s")
    assert isinstance(v, Rejected) and v.reason.startswith("type:")
    bad_ts = TraceEvent(type="message", session_id="s", seq=0, timestamp_ms=-1)
    v = check_event(bad_ts, "s", "tp.session.s")
    assert isinstance(v, Rejected) and v.reason.startswith("timestamp_ms:")


def test_non_topic_rejected() -> None:
    v = check(SERDE.encode(ev()), topic="tp.events")
    assert isinstance(v, Rejected) and v.reason.startswith("topic:")


def test_decoder_bugs_propagate_not_dead_lettered() -> None:
    class Buggy:
        def decode(self, data: bytes) -> TraceEvent:
            raise KeyError("internal bug")

    with pytest.raises(KeyError):
        check_message(b"x", "tp.session.s", prefix=PREFIX, decoder=Buggy(), max_message_bytes=10)


def test_serde_errors_become_rejections() -> None:
    class Strict:
        def decode(self, data: bytes) -> TraceEvent:
            raise MalformedMessageError("nope: field foo")

    v = check_message(b"x", "tp.session.s", prefix=PREFIX, decoder=Strict(), max_message_bytes=10)
    assert v == Rejected(reason="nope: field foo", error_class="MalformedMessageError")


def test_dlq_headers() -> None:
    h = dict(dlq_headers(Rejected("seq: bad ✓", "InvalidEventError"), "tp.session.s", 3, 42))
    assert h == {
        DLQ_REASON: "seq: bad ✓".encode(),
        DLQ_ERROR_CLASS: b"InvalidEventError",
        DLQ_SOURCE_TOPIC: b"tp.session.s",
        DLQ_SOURCE_PARTITION: b"3",
        DLQ_SOURCE_OFFSET: b"42",
    }
    h2 = dict(dlq_headers(Rejected("r", "OversizedMessageError"), "t", 0, 0, original_size=99))
    assert h2[DLQ_ORIGINAL_SIZE] == b"99"


def test_a_forwarded_record_names_its_source_from_one_header_and_its_key() -> None:
    """The router writes src.offset (src.partition only when not 0); the topic is
    <prefix>.session.<key>, the prefix the one of <prefix>.events."""
    off = [("ct", b"1"), ("src.offset", b"41")]
    assert forwarded_from("tp.events", b"s1", off) == (b"tp.session.s1", b"0", b"41", b"s1")
    part = [("src.partition", b"3"), ("src.offset", b"7")]
    assert forwarded_from("a.b.events", b"x-1", part) == (b"a.b.session.x-1", b"3", b"7", b"x-1")
    # the publisher's own key travels in src.key; an empty one means it sent none
    keyed = [*off, ("src.key", b"label")]
    assert forwarded_from("tp.events", b"s1", keyed) == (b"tp.session.s1", b"0", b"41", b"label")
    unkeyed = [*off, ("src.key", b"")]
    assert forwarded_from("tp.events", b"s1", unkeyed) == (b"tp.session.s1", b"0", b"41", None)


def test_an_older_routers_src_topic_wins_and_a_record_without_an_offset_is_not_forwarded() -> None:
    legacy = [("src.topic", b"tp.session.s1"), ("src.partition", b"0"), ("src.offset", b"9")]
    assert forwarded_from("other.events", b"zz", legacy) == (b"tp.session.s1", b"0", b"9", b"zz")
    assert forwarded_from("tp.events", b"s1", None) is None
    assert forwarded_from("tp.events", b"s1", [("src.topic", b"tp.session.s1")]) is None
    # no topic to derive it from: no key, or not an <prefix>.events record
    assert forwarded_from("tp.events", None, [("src.offset", b"1")]) is None
    assert forwarded_from("tp.other", b"s1", [("src.offset", b"1")]) is None
