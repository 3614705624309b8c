"""Run the detector core offline over trajectory files.

Each file is imported (any supported format, gzip ok), every session in it is
fed event by event through the same ``SessionEngine`` the live worker runs, and
the command prints each session's pattern detections and its final rendered
assessment.  With ``--json``: one JSON object per line for every pattern
detection and every assessment, with ``session_id``, ``call_index`` (1-based
number of tool calls made when it fired), ``kind`` (``pattern`` | ``assessment``),
``pattern_type`` or ``observer``, ``severity`` and the rendered ``text``.

A progress bar over files is drawn on stderr when stderr is a terminal (or with
``--progress``); stdout stays clean for pipes.

Examples:
  trajectory analyze run.traj.gz
  trajectory analyze --json trajs/*.traj.gz > detections.jsonl
  trajectory analyze --config observers.yaml --format openhands output.jsonl.gz
"""

from __future__ import annotations

import argparse
from typing import Any


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
        "--config", metavar="FILE", help="engine config, YAML or JSON (default: spec defaults)"
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per detection/assessment"
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar on stderr even when it is not a terminal",
    )


def _text_report(out: Any, analyzer: Any, sid: str, records: list[dict[str, Any]]) -> None:
    patterns = [r for r in records if r["kind"] == "pattern"]
    assessments = [r for r in records if r["kind"] == "assessment"]
    analysis = analyzer.engine(sid).analysis
    analysis = analysis() if callable(analysis) else analysis  # method in the engine contract
    out.write(f"== {sid}: {analysis.tool_call_count} tool calls, ")
    out.write(f"{len(patterns)} pattern detections, {len(assessments)} assessments\n")
    for r in patterns:
        first, _, rest = r["text"].partition("\n")
        out.write(f"  #{r['call_index']:<4} [{r['severity']}] {first}\n")
        if rest:
            out.write("".join(f"      {line}\n" for line in rest.splitlines()))
    final = analyzer.final(sid)
    if final is not None and final.assessments:
        out.write("\n" + final.render().rstrip() + "\n")
    else:
        out.write("  (no assessment)\n")
    out.write("\n")


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from contextlib import nullcontext

    from streams.core.config import EngineConfig, load_config
    from streams.importers import read_events
    from streams.importers.offline import OfflineAnalyzer

    config = load_config(args.config) if args.config else EngineConfig()
    out = sys.stdout
    show_progress = args.progress or sys.stderr.isatty()
    progress_cm: Any = nullcontext(None)
    if show_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        progress_cm = Progress(
            TextColumn("analyze"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[name]}"),
            console=Console(stderr=True, force_terminal=args.progress or None),
            transient=False,
        )
    with progress_cm as progress:
        task = (
            progress.add_task("files", total=len(args.paths), name="")
            if progress is not None
            else None
        )
        for path in args.paths:
            if progress is not None:
                progress.update(task, name=str(path)[-60:])
            analyzer = OfflineAnalyzer(config)
            per_session: dict[str, list[dict[str, Any]]] = {}
            for event in read_events(path, args.format):
                per_session.setdefault(event.session_id, [])
                for record in analyzer.feed(event):
                    if args.json:
                        out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    else:
                        per_session[event.session_id].append(record)
            if not args.json:
                for sid, records in per_session.items():
                    _text_report(out, analyzer, sid, records)
            if progress is not None:
                progress.advance(task)
    return 0
