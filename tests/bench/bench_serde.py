"""Serde throughput: fastavro (what we ship) vs the ``avro`` package, same records, same bytes.

Run: ``python tests/bench/bench_serde.py [--seconds 1.0] [--events 2000]``

The events are real ones (the first mini-swe-agent and SWE-agent runs of the
shared corpus, ``$TRAJDATA_DIR`` or ``../shared/trajdata``) when available, else a
synthetic mix of tool calls/results with JSON payloads.  Each measurement runs for
about ``--seconds`` over the whole event list and reports events per second:

* ``EventSerde.encode`` / ``decode``: the full path (validation, JSON text of
  input/output, single-object framing, fastavro body);
* ``fastavro body write`` / ``read``: ``schemaless_writer`` / ``schemaless_reader``
  on the Avro record dicts (no JSON conversion, no framing);
* ``compiled body read``: the reader ``EventSerde.decode`` uses first
  (``streams.serde.fastread``, compiled from the same schema; same dicts);
* ``avro body write`` / ``read``: ``avro.io.DatumWriter`` / ``DatumReader`` on the
  same record dicts / the same body bytes.

Not a test (pytest does not collect ``bench_*.py``); it loops only for the
requested time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import avro.io  # noqa: E402
import avro.schema  # noqa: E402
import fastavro  # noqa: E402

from streams.core.events import TraceEvent  # noqa: E402
from streams.serde import EventSerde, load_schema  # noqa: E402
from streams.serde.schemas import codec_schema, compiled_reader  # noqa: E402


def real_events(limit: int) -> tuple[list[TraceEvent], str]:
    env = os.environ.get("TRAJDATA_DIR")
    root = Path(env) if env else REPO / ".." / "shared" / "trajdata"
    if not root.is_dir():
        return [], ""
    from streams.importers import read_events

    files = sorted((root / "mini-swe-agent" / "trajs").glob("*.traj.json.gz"))[:3]
    files += sorted(root.glob("swe-agent/*/trajs/*.traj.gz"))[:3]
    events: list[TraceEvent] = []
    for f in files:
        events.extend(read_events(f))
        if len(events) >= limit:
            break
    return events[:limit], f"real: {len(files)} trajdata files"


def synthetic_events(n: int) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    for i in range(n):
        if i % 2 == 0:
            out.append(
                TraceEvent(
                    "tool_call",
                    "bench",
                    i,
                    1_700_000_000_000 + i,
                    call_id=f"c{i}",
                    tool_name="bash",
                    input={"command": f"grep -rn foo src/{i}.py", "timeout": 30},
                    params_summary=f"grep -rn foo src/{i}.py",
                )
            )
        else:
            out.append(
                TraceEvent(
                    "tool_result",
                    "bench",
                    i,
                    1_700_000_000_000 + i,
                    call_id=f"c{i - 1}",
                    tool_name="bash",
                    output={"stdout": "line\n" * 40, "exit_code": 0},
                    latency_ms=12,
                )
            )
    return out


def rate(fn: Callable[[], Any], items: int, seconds: float) -> float:
    fn()  # warm up
    done = 0
    start = time.perf_counter()
    while True:
        fn()
        done += items
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement (default 1)")
    parser.add_argument("--events", type=int, default=2000, help="events in the set (default 2000)")
    args = parser.parse_args(argv)

    events, origin = real_events(args.events)
    if not events:
        events, origin = synthetic_events(args.events), "synthetic"
    serde = EventSerde()
    framed = [serde.encode(e) for e in events]
    bodies = [b[10:] for b in framed]
    records = [serde.to_record(e) for e in events]
    fa_schema = codec_schema("trace_event")
    compiled = compiled_reader("trace_event")
    assert compiled is not None
    av_schema = avro.schema.parse(json.dumps(load_schema("trace_event")))
    # avro-python converts timestamp-millis to datetime: give it what it expects
    # so it writes the very same bytes.
    av_writer = avro.io.DatumWriter(av_schema)
    av_reader = avro.io.DatumReader(av_schema)

    def av_record(rec: dict[str, Any]) -> dict[str, Any]:
        from datetime import UTC, datetime, timedelta

        out = dict(rec)
        out["timestamp_ms"] = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            milliseconds=rec["timestamp_ms"]
        )
        if rec["budget"] is not None and rec["budget"]["deadline_ms"] is not None:
            b = dict(rec["budget"])
            b["deadline_ms"] = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
                milliseconds=b["deadline_ms"]
            )
            out["budget"] = b
        return out

    av_records = [av_record(r) for r in records]

    def av_write_one(rec: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        av_writer.write(rec, avro.io.BinaryEncoder(buf))
        return buf.getvalue()

    def fa_write_one(rec: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fa_schema, rec)
        return buf.getvalue()

    same = sum(av_write_one(a) == b for a, b in zip(av_records, bodies, strict=True))
    total_bytes = sum(len(b) for b in framed)

    n = len(events)
    results = [
        (
            "EventSerde.encode (full path)",
            rate(lambda: [serde.encode(e) for e in events], n, args.seconds),
        ),
        (
            "EventSerde.decode (full path)",
            rate(lambda: [serde.decode(b) for b in framed], n, args.seconds),
        ),
        ("fastavro body write", rate(lambda: [fa_write_one(r) for r in records], n, args.seconds)),
        (
            "fastavro body read",
            rate(
                lambda: [
                    fastavro.schemaless_reader(io.BytesIO(b), fa_schema, None) for b in bodies
                ],
                n,
                args.seconds,
            ),
        ),
        (
            "compiled body read",
            rate(lambda: [compiled(b, 0) for b in bodies], n, args.seconds),
        ),
        ("avro body write", rate(lambda: [av_write_one(r) for r in av_records], n, args.seconds)),
        (
            "avro body read",
            rate(
                lambda: [av_reader.read(avro.io.BinaryDecoder(io.BytesIO(b))) for b in bodies],
                n,
                args.seconds,
            ),
        ),
    ]
    print(
        f"events: {n} ({origin}), mean framed size {total_bytes / n:.0f} B; "
        f"avro wrote byte-identical bodies for {same}/{n}"
    )
    for name, value in results:
        print(f"  {name:32s} {value:>12,.0f} events/s")
    fa_r = dict(results)
    print(
        f"  fastavro/avro: write x{fa_r['fastavro body write'] / fa_r['avro body write']:.1f}, "
        f"read x{fa_r['fastavro body read'] / fa_r['avro body read']:.1f}; "
        f"compiled/fastavro read x{fa_r['compiled body read'] / fa_r['fastavro body read']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
