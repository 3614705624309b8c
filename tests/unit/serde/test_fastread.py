"""The compiled Avro reader (streams.serde.fastread) against fastavro, its contract:
for any bytes, fastavro's exact value and end offset, or None."""

from __future__ import annotations

import io
import random
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest

from streams.core.events import Budget, TraceEvent
from streams.errors import MalformedMessageError
from streams.serde import EventSerde
from streams.serde.avro import (
    SINGLE_OBJECT_HEADER_LEN,
    AssessmentSerde,
    AssessmentWire,
    PatternRecord,
    PatternSerde,
)
from streams.serde.fastread import compile_reader, read_long
from streams.serde.schemas import SCHEMA_FILES, codec_schema, compiled_reader

HEADER = SINGLE_OBJECT_HEADER_LEN


def fastavro_read(schema: Any, data: bytes, pos: int) -> tuple[Any, int]:
    buf = io.BytesIO(data)
    buf.seek(pos)
    value = fastavro.schemaless_reader(buf, schema, None)
    return value, buf.tell()


def typed(value: Any) -> Any:
    """``value`` with every leaf's type next to it: True == 1 and 1 == 1.0 must not
    pass for equal."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


_READERS: dict[int, Any] = {}  # id(schema) -> its reader (the schemas live as long)


def assert_same_or_fallback(schema: Any, data: bytes, pos: int) -> str:
    """The contract on one input; returns which way it went."""
    reader = _READERS.get(id(schema))
    if reader is None:
        reader = _READERS[id(schema)] = compile_reader(schema)
    assert reader is not None
    try:
        expected: tuple[Any, int] | None = fastavro_read(schema, data, pos)
    except Exception:
        expected = None
    got = reader(data, pos)
    if got is None:
        return "fallback"
    assert expected is not None, f"fastavro refused {data!r}, the compiled reader read {got!r}"
    assert typed(got[0]) == typed(expected[0])
    assert got[1] == expected[1]
    return "same"


def sample_events() -> list[TraceEvent]:
    budget = Budget(deadline_ms=1_700_000_900_000, max_tokens=2**40, tokens_used=0)
    return [
        TraceEvent("session_start", "s-1", 0, 1_700_000_000_000, metadata={"task": "fix it"}),
        TraceEvent(
            "tool_call",
            "s-1",
            1,
            1_700_000_000_001,
            agent_id="agent-ü",
            parent_session_id="p",
            call_id="c1",
            tool_name="bash",
            input={"command": "ls -la 🚀", "n": [1, 2.5, None, True], "deep": {"a": {"b": []}}},
            params_summary="ls -la",
        ),
        TraceEvent(
            "tool_result",
            "s-1",
            2,
            1_700_000_000_002,
            call_id="c1",
            tool_name="bash",
            output="x" * 5000,
            is_error=True,
            error_message="exit 2: no such file",
            latency_ms=0,
            input_tokens=-(2**63),
            output_tokens=2**63 - 1,
        ),
        TraceEvent(
            "model_step", "s-1", 3, -5, text="", metadata={str(i): "v" * i for i in range(70)}
        ),
        TraceEvent("budget", "s-1", 4, 1_700_000_000_004, budget=budget),
        TraceEvent("session_end", "s-1", 2**62, 0, budget=Budget()),
    ]


def test_every_bundled_schema_compiles() -> None:
    """A schema change that drops the fast path must be noticed here, not in a bench."""
    for name in SCHEMA_FILES:
        assert compiled_reader(name) is not None, name
    assert EventSerde()._fast is not None


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_events_read_exactly_as_fastavro_reads_them(event: TraceEvent) -> None:
    serde = EventSerde()
    data = serde.encode(event)
    assert assert_same_or_fallback(codec_schema("trace_event"), data, HEADER) == "same"
    assert serde.decode(data) == event


def test_patterns_and_assessments_read_exactly_as_fastavro_reads_them() -> None:
    pattern = PatternRecord(
        "s",
        3,
        1_700_000_000_000,
        "doom_loop",
        call_index=2,
        confidence=0.875,
        severity="high",
        evidence=("a", "b"),
        occurrences=4,
        first_seen_ms=-1,
        details={"k": [1, 2]},
        agent_id="ag",
    )
    assessment = AssessmentWire(
        "s", 4, 1_700_000_000_001, "timer", max_severity=None, rendered="## ü", assessments=[{}]
    )
    for serde, value, name in (
        (PatternSerde(), pattern, "pattern_detection"),
        (AssessmentSerde(), assessment, "assessment_record"),
    ):
        data = serde.encode(value)
        assert assert_same_or_fallback(codec_schema(name), data, HEADER) == "same"
        assert serde.decode(data) == value


def test_real_trajectories_read_exactly_as_fastavro_reads_them(trajdata_dir: Path) -> None:
    from streams.importers import read_events

    files = sorted((trajdata_dir / "mini-swe-agent" / "trajs").glob("*.traj.json.gz"))[:2]
    files += sorted(trajdata_dir.glob("swe-agent/*/trajs/*.traj.gz"))[:2]
    serde = EventSerde()
    schema = codec_schema("trace_event")
    events = [ev for f in files for ev in read_events(f)]
    assert events
    for ev in events:
        data = serde.encode(ev)
        assert assert_same_or_fallback(schema, data, HEADER) == "same"


def test_mutated_and_cut_messages_read_as_fastavro_or_fall_back() -> None:
    """Random byte flips, insertions and cuts of valid events: never a value fastavro
    would not give."""
    rng = random.Random(12)
    serde = EventSerde()
    schema = codec_schema("trace_event")
    bodies = [serde.encode(ev) for ev in sample_events()]
    ways: dict[str, int] = {}
    for _ in range(20000):
        data = bytearray(rng.choice(bodies))
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            at = rng.randrange(HEADER, len(data))
            if op < 0.6:
                data[at] = rng.randrange(256)
            elif op < 0.8:
                del data[at:]
            else:
                data[at:at] = bytes([rng.randrange(256)])
            if len(data) <= HEADER:
                break
        if len(data) <= HEADER:
            continue
        way = assert_same_or_fallback(schema, bytes(data), HEADER)
        ways[way] = ways.get(way, 0) + 1
    assert ways.get("same", 0) > 100 and ways.get("fallback", 0) > 100, ways


def _zz(n: int) -> bytes:
    """Avro zigzag varint of ``n``."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if u < 0x80:
            out.append(u)
            return bytes(out)
        out.append((u & 0x7F) | 0x80)
        u >>= 7


def _s(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _zz(len(raw)) + raw


MAP_SCHEMA: Any = fastavro.parse_schema(
    {
        "type": "record",
        "name": "M",
        "fields": [
            {"name": "m", "type": {"type": "map", "values": "string"}},
            {"name": "a", "type": {"type": "array", "items": ["null", "long", "double"]}},
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "f", "type": "float"},
        ],
    }
)


def test_blocks_with_negative_counts_and_repeated_keys() -> None:
    """Avro lets a writer give a block's byte size (a negative count): read like fastavro."""
    data = (
        _zz(-2)
        + _zz(12)
        + _s("k")
        + _s("v1")
        + _s("k")
        + _s("v2")
        + _zz(1)
        + _s("é")
        + _s("")
        + _zz(0)
        + _zz(3)
        + _zz(0)
        + _zz(1)
        + _zz(-7)
        + _zz(2)
        + struct.pack("<d", 2.5)
        + _zz(0)
        + b"\x01"
        + _zz(-(2**31))
        + struct.pack("<f", 0.1)
    )
    assert assert_same_or_fallback(MAP_SCHEMA, data, 0) == "same"
    value, end = compile_reader(MAP_SCHEMA)(data, 0)  # type: ignore[misc]
    assert value == {
        "m": {"k": "v2", "é": ""},
        "a": [None, -7, 2.5],
        "b": True,
        "i": -(2**31),
        "f": value["f"],
    }
    assert end == len(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_zz(0) + _zz(0) + b"\x02" + _zz(0) + b"\0" * 4, id="boolean byte 2"),
        pytest.param(_zz(0) + _zz(0) + b"\x01" + _zz(2**31) + b"\0" * 4, id="int beyond 32 bits"),
        pytest.param(
            _zz(0) + _zz(1) + _zz(5) + _zz(0) + b"\x01" + _zz(0) + b"\0" * 4, id="union index 5"
        ),
        pytest.param(
            _zz(0) + _zz(0) + b"\x01" + b"\xff" * 10 + b"\x01" + b"\0" * 4, id="11-byte varint"
        ),
        pytest.param(
            _zz(0) + _zz(0) + b"\x01" + b"\xff" * 9 + b"\x02" + b"\0" * 4, id="65-bit varint"
        ),
        pytest.param(_zz(1) + _zz(-3), id="negative length"),
        pytest.param(_zz(2**40) + _s("k") + _s("v"), id="map count beyond the bytes left"),
        pytest.param(_zz(-(2**40)) + _zz(4) + _s("k") + _s("v"), id="block count beyond the bytes"),
        pytest.param(_zz(1) + _s("k") + b"\x04\xff\xfe", id="not UTF-8"),
        pytest.param(_zz(0) + _zz(0) + b"\x01" + _zz(1) + b"\0\0", id="float cut short"),
    ],
)
def test_what_it_does_not_take_falls_back(data: bytes) -> None:
    reader = compile_reader(MAP_SCHEMA)
    assert reader is not None
    assert reader(data, 0) is None
    assert_same_or_fallback(MAP_SCHEMA, data, 0)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "B", "fields": [{"name": "x", "type": "bytes"}]},
        {
            "type": "record",
            "name": "F",
            "fields": [{"name": "x", "type": {"type": "fixed", "name": "X", "size": 2}}],
        },
        {
            "type": "record",
            "name": "L",
            "fields": [{"name": "x", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        },
        {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        },
    ],
    ids=["bytes", "fixed", "logical type", "recursive"],
)
def test_unsupported_schemas_keep_fastavro(schema: dict[str, Any]) -> None:
    assert compile_reader(fastavro.parse_schema(schema)) is None


def test_decode_errors_are_fastavros_whatever_the_reader_does() -> None:
    """A cut body and trailing bytes still get the serde's named errors."""
    serde = EventSerde()
    data = serde.encode(sample_events()[1])
    with pytest.raises(MalformedMessageError, match="invalid Avro body"):
        serde.decode(data[:-3])
    with pytest.raises(MalformedMessageError, match="1 trailing byte"):
        serde.decode(data + b"\0")


@pytest.mark.parametrize("framing", ["single-object", "confluent"])
def test_decode_reads_the_bundled_schema_with_the_compiled_reader(framing: str) -> None:
    """Both framings of the bundled writer schema go through it (counted), and a
    body it does not take is still decoded (by fastavro)."""
    serde = EventSerde(framing, registry="mock://fastread-test" if framing == "confluent" else None)
    calls: list[int] = []
    compiled = serde._fast
    assert compiled is not None

    def counting(data: bytes, pos: int) -> tuple[Any, int] | None:
        calls.append(pos)
        return compiled(data, pos)

    serde._fast = counting
    event = sample_events()[1]
    data = serde.encode(event)
    assert serde.decode(data) == event
    assert calls == [HEADER if framing == "single-object" else 5]
    serde._fast = lambda data, pos: None  # a reader that takes nothing: fastavro decodes
    assert serde.decode(data) == event


def test_read_long_is_the_compiled_readers_long() -> None:
    """The router's partial read of an event uses it: fastavro's value, or None past
    the end or past 64 bits."""
    rng = random.Random(7)
    values = [0, -1, 1, 63, -64, 64, 2**63 - 1, -(2**63)]
    values += [rng.randrange(-(2**63), 2**63) for _ in range(500)]
    for v in values:
        data = b"\x07" + _zz(v) + b"\x05"
        assert read_long(data, 1) == (fastavro_read("long", data, 1)[0], len(data) - 1)
    assert read_long(_zz(2**40)[:-1], 0) is None  # cut short
    assert read_long(b"", 0) is None
    assert read_long(b"\xff" * 9 + b"\x02", 0) is None  # 65 bits
    assert read_long(b"\xff" * 10 + b"\x01", 0) is None  # 11 bytes
