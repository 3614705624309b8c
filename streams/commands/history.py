"""What the observer detected and assessed, per session or per session tree.

Reads <prefix>.patterns (every fired pattern) and <prefix>.assessment-history
(every assessment the worker made), from near --since up to the end of each
topic as it is when the command starts.  --tree PARENT follows the
parent_session_id links: the parent session and all its sub-agent sessions.
Times are event times (the agent's timestamps), ISO-8601, UTC when no offset is
given.  --limit keeps the NEWEST N matches, printed oldest first.

Examples:
  trajectory history --session run-42
  trajectory history --tree run-42 --kind patterns
  trajectory history --since 2026-01-15T14:00Z --until 2026-01-15T15:00Z --limit 20
  trajectory history --session run-42 --json | jq .rendered
"""

from __future__ import annotations

import argparse
import json
import sys

KIND_CHOICES = {
    "patterns": ("pattern",),
    "assessments": ("assessment",),
    "all": ("pattern", "assessment"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--session", metavar="ID", help="one session")
    who.add_argument(
        "--tree", metavar="PARENT", help="a session and all its descendants (sub-agents)"
    )
    parser.add_argument("--since", metavar="ISO", help="from this event time (inclusive)")
    parser.add_argument("--until", metavar="ISO", help="up to this event time (exclusive)")
    parser.add_argument(
        "--limit", type=int, default=100, metavar="N", help="newest N matches (default 100)"
    )
    parser.add_argument(
        "--kind", choices=tuple(KIND_CHOICES), default="all", help="what to show (default all)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")


def run(args: argparse.Namespace) -> int:
    from streams.core.jsonl import iso_to_ms, ms_to_iso
    from streams.history import item_json, query
    from streams.settings import Settings

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    since = iso_to_ms(args.since, field="--since") if args.since else None
    until = iso_to_ms(args.until, field="--until") if args.until else None
    items = query(
        settings,
        session=args.session,
        tree=args.tree,
        since=since,
        until=until,
        limit=args.limit,
        kinds=KIND_CHOICES[args.kind],
    )
    out = sys.stdout
    if args.json:
        for it in items:
            out.write(json.dumps(item_json(it), sort_keys=True, ensure_ascii=False) + "\n")
        return 0
    if not items:
        out.write("no matching patterns or assessments\n")
        return 0
    for it in items:
        rec = it.record
        head = f"{ms_to_iso(it.timestamp_ms)} {it.session_id} seq {it.seq} #{rec.call_index}"
        if it.kind == "pattern":
            sev = rec.severity or "-"
            out.write(f"{head} pattern {rec.pattern_type} [{sev}] conf {rec.confidence:.2f}\n")
            for line in rec.evidence[:3]:
                out.write(f"    {line}\n")
        else:
            sev = rec.max_severity or "-"
            out.write(f"{head} assessment [{sev}] ({rec.trigger})\n")
            for line in rec.rendered.splitlines():
                out.write(f"    {line}\n")
    return 0
