"""Print AgentV's TraceSummary of every session in trajectory files.

For each session: eventCount (AgentV's five event types; control events are
not counted), toolNames (unique, sorted), toolCallsByName and errorCount
(``error`` events plus failed ``tool_result`` events).  See
``streams.core.summary`` for why.  An empty JSON Lines file is an empty trace
(eventCount 0, as AgentV's ``computeTraceSummary`` gives), not an error.

Examples:
  trajectory summary run.traj.gz
  trajectory summary --json trajs/*.traj.json.gz | jq .errorCount
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.importers import FORMATS

    parser.add_argument("paths", nargs="+", metavar="PATH", help="trajectory files (gzip ok)")
    parser.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="input format (default: detect from content)",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per session (AgentV's keys)"
    )


def is_empty_jsonl(path: str, fmt: str) -> bool:
    """True for an empty (or blank) JSON Lines trace: ``--format jsonl``, or
    ``auto`` with a ``.jsonl``/``.ndjson`` name (gzip ok).  Such a file is a
    trace with no events, as AgentV reads it; an empty file of another format
    stays an error (there is no document to read)."""
    from pathlib import Path

    from streams.importers._common import read_text

    name = Path(path).name.lower().removesuffix(".gz")
    if fmt != "jsonl" and not (fmt == "auto" and name.endswith((".jsonl", ".ndjson"))):
        return False
    try:
        return not read_text(Path(path)).strip()
    except (OSError, UnicodeDecodeError):
        return False  # read_events reports it with the path and the reason


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from streams.core.summary import SummaryBuilder, compute_trace_summary
    from streams.importers import read_events

    out = sys.stdout
    for path in args.paths:
        builder = SummaryBuilder()
        if is_empty_jsonl(path, args.format):
            summaries = [compute_trace_summary(())]
        else:
            for event in read_events(path, args.format):
                builder.add(event)
            summaries = builder.summaries()
        for summary in summaries:
            if args.json:
                record = {"path": str(path), **summary.to_json()}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                continue
            calls = ", ".join(f"{name} x{n}" for name, n in summary.tool_calls_by_name.items())
            out.write(
                f"{summary.session_id or '(empty trace)'}  ({path})\n"
                f"  eventCount {summary.event_count}   errorCount {summary.error_count}   "
                f"toolCalls {sum(summary.tool_calls_by_name.values())}\n"
                f"  toolNames  {', '.join(summary.tool_names) or '-'}\n"
                f"  byName     {calls or '-'}\n"
            )
    return 0
