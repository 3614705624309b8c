"""Events to files: Avro object container, our JSONL form, or Parquet.

* ``avro``: fastavro ``writer`` with the bundled ``TraceEvent`` schema; each datum
  is exactly :meth:`EventSerde.to_record` of the event (``input``/``output`` as
  JSON text), so ``EventSerde().from_record(datum)`` gives the event back.
* ``jsonl``: :func:`streams.core.jsonl.dumps_event` per line; any importer (and
  ``trajectory analyze``) reads it back to equal events.
* ``parquet``: pyarrow, one row per event with the Avro record's columns
  (``budget`` as a struct, ``metadata`` as a map); needs the optional pyarrow.

Writers stream: nothing but the current batch is held in memory (Parquet writes
row groups of ``batch`` events).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

from streams.core.events import TraceEvent
from streams.errors import ConfigError

EXPORT_FORMATS: Final[tuple[str, ...]] = ("avro", "jsonl", "parquet")


def export_events(events: Iterable[TraceEvent], path: str, fmt: str, *, batch: int = 10_000) -> int:
    """Write ``events`` to ``path`` in ``fmt``; the number of events written."""
    if fmt == "jsonl":
        return _jsonl(events, path)
    if fmt == "avro":
        return _avro(events, path)
    if fmt == "parquet":
        return _parquet(events, path, batch)
    raise ConfigError("--format", f"{fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")


def _jsonl(events: Iterable[TraceEvent], path: str) -> int:
    from streams.core.jsonl import dumps_event

    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for ev in events:
            out.write(dumps_event(ev) + "\n")
            n += 1
    return n


def _avro(events: Iterable[TraceEvent], path: str) -> int:
    import fastavro

    from streams.serde import EventSerde, load_schema

    serde = EventSerde()
    schema = fastavro.parse_schema(load_schema("trace_event"))
    count = 0

    def records() -> Iterable[dict[str, Any]]:
        nonlocal count
        for ev in events:
            count += 1
            yield serde.to_record(ev)

    with open(path, "wb") as out:
        fastavro.writer(out, schema, records(), codec="deflate")
    return count


def read_avro_events(path: str) -> list[TraceEvent]:
    """Events back from an ``avro`` export (the round trip the tests check)."""
    import fastavro

    from streams.serde import EventSerde

    serde = EventSerde()
    with open(path, "rb") as handle:
        return [
            serde.from_record(avro_millis(cast(dict[str, Any], r))) for r in fastavro.reader(handle)
        ]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def avro_millis(record: dict[str, Any]) -> dict[str, Any]:
    """Top-level ``timestamp-millis`` values back to int epoch ms.

    The container files keep the schema's ``logicalType`` (so Spark, DuckDB ...
    see timestamps) and fastavro's reader then returns ``datetime``; our values
    use int milliseconds.  Exact: no float round trip.
    """
    for key, value in record.items():
        if isinstance(value, datetime):
            record[key] = (value - _EPOCH) // _MS
    return record


def _parquet(events: Iterable[TraceEvent], path: str, batch: int) -> int:
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError(
            "--format", "parquet needs pyarrow: pip install 'pyarrow>=15' (or use avro/jsonl)"
        ) from exc
    from streams.serde import EventSerde

    serde = EventSerde()
    budget_t = pa.struct(
        [
            ("deadline_ms", pa.int64()),
            ("max_tokens", pa.int64()),
            ("tokens_used", pa.int64()),
            ("max_tool_calls", pa.int64()),
        ]
    )
    schema = pa.schema(
        [
            ("type", pa.string()),
            ("session_id", pa.string()),
            ("seq", pa.int64()),
            ("timestamp_ms", pa.int64()),
            ("agent_id", pa.string()),
            ("parent_session_id", pa.string()),
            ("call_id", pa.string()),
            ("tool_name", pa.string()),
            ("input_json", pa.string()),
            ("output_json", pa.string()),
            ("params_summary", pa.string()),
            ("is_error", pa.bool_()),
            ("error_message", pa.string()),
            ("text", pa.string()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("latency_ms", pa.int64()),
            ("metadata", pa.map_(pa.string(), pa.string())),
            ("budget", budget_t),
        ]
    )
    names = schema.names
    count = 0
    rows: list[dict[str, Any]] = []
    with pq.ParquetWriter(path, schema) as writer:
        for ev in events:
            rec = serde.to_record(ev)
            rows.append({k: rec.get(k) for k in names})
            count += 1
            if len(rows) >= batch:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows = []
        if rows or count == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return count


__all__ = ["EXPORT_FORMATS", "avro_millis", "export_events", "read_avro_events"]
