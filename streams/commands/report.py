"""Build an analyst report (one self-contained HTML file, plus JSON) over trajectories.

Input: trajectory files (any format `trajectory analyze` reads), or recorded
sessions from Kafka (--session ID | --sessions GLOB, with the read flags of
`trajectory replay`).  The detector core is re-run over the events (same engine
as the live worker, --config to change it) and the report shows: session
timelines (tool calls coloured by success, detections marked), the fleet's
sessions by severity over time, tool frequency, errors by normalized signature,
the most common action sequences (2- to 4-grams), latency per tool (mean, min,
max, p95), patterns over time and budget burn.  The HTML has inline CSS and
inline SVG only: no script, no network.

Examples:
  trajectory report run.traj.gz --out report.html
  trajectory report trajs/*.traj.gz --out fleet.html --json fleet.json
  trajectory report --sessions 'run-*' --out live.html
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.importers import FORMATS
    from streams.replay.cli_args import add_read_arguments

    parser.add_argument("paths", nargs="*", metavar="PATH", help="trajectory files (gzip ok)")
    parser.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="input file format (default: detect from content)",
    )
    add_read_arguments(parser, required=False)
    parser.add_argument("--config", metavar="FILE", help="engine config, YAML or JSON")
    parser.add_argument("--out", required=True, metavar="report.html", help="HTML file to write")
    parser.add_argument("--json", metavar="report.json", help="also write the data as JSON")
    parser.add_argument("--title", default="Trajectory report", help="page title")


def _events(args: argparse.Namespace) -> tuple[list[Any], Any]:
    from streams.errors import ConfigError

    from_kafka = args.session is not None or args.sessions is not None
    if from_kafka == bool(args.paths):
        raise ConfigError(
            "PATH/--session/--sessions",
            "give trajectory files, or "
            "--session ID / --sessions GLOB to read from Kafka (not both)",
        )
    from streams.replay.cli_args import counted, progress_bar

    if from_kafka:
        from streams.replay.cli_args import reader_from_args

        reader = reader_from_args(args)
        with progress_bar("read", reader.total, force=args.progress) as bar:
            return list(counted(reader, bar)), reader
    from streams.importers import read_events

    events: list[Any] = []
    for path in args.paths:
        events.extend(read_events(path, args.format))
    return events, None


def run(args: argparse.Namespace) -> int:
    import json

    from streams.core.config import EngineConfig, load_config
    from streams.replay.cli_args import report_failures, throughput_line
    from streams.replay.replay import replay_events
    from streams.report.aggregate import aggregate
    from streams.report.html import render_html

    config = load_config(args.config) if args.config else EngineConfig()
    began = time.monotonic()
    events, reader = _events(args)
    result = replay_events(events, config)
    data = aggregate(events, result.records())
    page = render_html(data, title=args.title)
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(page)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False, indent=1)
            handle.write("\n")
    if reader is not None:
        report_failures(reader, "report")
    print(
        throughput_line(
            "reported on",
            len(events),
            time.monotonic() - began,
            f" of {data['summary']['sessions']} session(s) -> {args.out}",
        ),
        file=sys.stderr,
    )
    return 1 if reader is not None and reader.stats.failures else 0
