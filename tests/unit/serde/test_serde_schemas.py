"""The bundled .avsc files: parse in fastavro and avro, mirror the event model, fingerprint."""

from __future__ import annotations

import dataclasses
import io
import json
import struct

import avro.io
import avro.schema
import fastavro
import fastavro.schema
import pytest

from streams.core.events import EVENT_TYPES, Budget, TraceEvent
from streams.errors import ConfigError
from streams.serde import EventSerde, crc64_avro, fingerprint, load_schema
from streams.serde.schemas import SCHEMA_FILES, canonical_form, schema_dir


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_schema_parses_in_fastavro_and_avro(name: str) -> None:
    text = (schema_dir() / SCHEMA_FILES[name]).read_text(encoding="utf-8")
    fastavro.parse_schema(json.loads(text))
    parsed = avro.schema.parse(text)
    assert parsed.fullname == f"io.trajectory.v1.{load_schema(name)['name']}"


def _all_fields(node: object) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if isinstance(node, dict):
        if node.get("type") == "record":
            out.extend(node["fields"])  # type: ignore[arg-type]
        for value in node.values():
            out.extend(_all_fields(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_all_fields(value))
    return out


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_every_field_has_doc_and_optional_fields_have_defaults(name: str) -> None:
    for f in _all_fields(load_schema(name)):
        assert isinstance(f.get("doc"), str) and f["doc"], f"{name}.{f['name']} has no doc"
        if isinstance(f["type"], list):
            assert f["type"][0] == "null" and f.get("default", "missing") is None, f["name"]


def test_trace_event_schema_mirrors_the_dataclass_field_for_field() -> None:
    avro_names = [f["name"] for f in load_schema("trace_event")["fields"]]
    wire = {"input": "input_json", "output": "output_json"}
    assert avro_names == [wire.get(f.name, f.name) for f in dataclasses.fields(TraceEvent)]
    enum = load_schema("trace_event")["fields"][0]["type"]
    assert enum["symbols"][: len(EVENT_TYPES)] == list(EVENT_TYPES)
    assert enum["default"] in enum["symbols"]


def test_inline_budget_is_the_standalone_budget_schema() -> None:
    budget_field = next(f for f in load_schema("trace_event")["fields"] if f["name"] == "budget")
    assert budget_field["type"][1] == load_schema("budget")
    names = [f["name"] for f in load_schema("budget")["fields"]]
    assert names == [f.name for f in dataclasses.fields(Budget)]


def test_load_schema_accepts_short_record_and_full_names_and_rejects_unknown() -> None:
    assert load_schema("trace_event") == load_schema("TraceEvent")
    assert load_schema("io.trajectory.v1.PatternDetection")["name"] == "PatternDetection"
    with pytest.raises(ConfigError, match="unknown schema 'nope'"):
        load_schema("nope")


def test_crc64_avro_matches_the_spec_vector_and_both_libraries() -> None:
    # Test vector from the Avro distribution (share/test/data/schema-tests.txt).
    assert crc64_avro(b'"null"') == 7195948357588979594
    for name in SCHEMA_FILES:
        canon = canonical_form(load_schema(name))
        ours = crc64_avro(canon.encode())
        # fastavro renders the fingerprint as hex of the little-endian bytes.
        assert fastavro.schema.fingerprint(canon, "CRC-64-AVRO") == struct.pack("<Q", ours).hex()
        assert avro.schema._crc_64_fingerprint(canon.encode()) == struct.pack("<Q", ours)
        assert fingerprint(name) == ours


def test_canonical_form_agrees_with_avro_once_logical_types_are_dropped() -> None:
    # avro-python keeps {"type":"long"} for logical types in its canonical form (it
    # skips the spec's [PRIMITIVES] step there); without them the two agree.
    def strip(node: object) -> object:
        if isinstance(node, dict):
            if node.get("logicalType"):
                return node["type"]
            return {k: strip(v) for k, v in node.items()}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    for name in SCHEMA_FILES:
        schema = load_schema(name)
        ours = canonical_form(schema)
        theirs = avro.schema.parse(json.dumps(strip(schema))).canonical_form
        assert ours == theirs


def test_avro_package_reads_fastavro_bytes() -> None:
    ev = TraceEvent(
        type="tool_result",
        session_id="s-1",
        seq=7,
        timestamp_ms=1_700_000_000_123,
        call_id="c1",
        output={"ok": True},
        metadata={"k": "v"},
        budget=Budget(max_tokens=10),
    )
    data = EventSerde().encode(ev)
    reader = avro.io.DatumReader(avro.schema.parse(json.dumps(load_schema("trace_event"))))
    rec = reader.read(avro.io.BinaryDecoder(io.BytesIO(data[10:])))
    assert rec["type"] == "tool_result" and rec["seq"] == 7 and rec["call_id"] == "c1"
    assert json.loads(rec["output_json"]) == {"ok": True}
    assert rec["budget"]["max_tokens"] == 10 and rec["metadata"] == {"k": "v"}
