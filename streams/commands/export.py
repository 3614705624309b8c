"""Export recorded sessions from Kafka to files: Avro, JSONL or Parquet.

Reads like `trajectory replay` (--session ID | --sessions GLOB, --source
sessions|events, --from/--to as offsets or ISO record times, up to the high
watermark at start) and writes every event:

  avro     an Avro object container file with the bundled TraceEvent schema
  jsonl    our JSON Lines form (what `trajectory analyze` / `publish` read)
  parquet  one row per event, Avro columns (needs pyarrow)
  atif     Harbor's ATIF v1.8 trajectory JSON (sub-agent sessions embedded in their
           parent's; several root sessions: one trajectory per line)

Undecodable records are reported with topic/partition/offset (--strict: fail).

Examples:
  trajectory export --session run-42 --format jsonl --out run-42.jsonl
  trajectory export --sessions 'swe-*' --format parquet --out swe.parquet
  trajectory export --sessions "*" --source events --to 2026-11-21T12:00:00Z \
      --format avro --out day.avro
"""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.replay.cli_args import add_read_arguments

    add_read_arguments(parser)
    parser.add_argument(
        "--format", required=True, choices=("avro", "jsonl", "parquet", "atif"), help="file format"
    )
    parser.add_argument("--out", required=True, metavar="PATH", help="output file")


def run(args: argparse.Namespace) -> int:
    from streams.importers.atif import write_atif
    from streams.replay.cli_args import (
        counted,
        progress_bar,
        reader_from_args,
        report_failures,
        throughput_line,
    )
    from streams.replay.export import export_events

    reader = reader_from_args(args)
    began = time.monotonic()
    with progress_bar("export", reader.total, force=args.progress) as bar:
        if args.format == "atif":
            n = write_atif(counted(reader, bar), args.out)
        else:
            n = export_events(counted(reader, bar), args.out, args.format)
    elapsed = time.monotonic() - began
    report_failures(reader, "export")
    print(
        throughput_line("exported", n, elapsed, f" to {args.out} ({args.format})"), file=sys.stderr
    )
    return 1 if reader.stats.failures else 0
