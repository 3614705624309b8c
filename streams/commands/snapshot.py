"""Snapshots of a session's observer state: create, list, show, restore.

A snapshot is a restore point of what the observer knows about one session:
its trajectory window, observer counters, budget and current assessment.  The
worker stores each one on the compacted <prefix>.snapshots topic (key
"<session>/<snapshot id>"); `restore` makes the observer go back to it, and the
session's later events continue from there.

Agents normally do this themselves through the SDK (Session.snapshot() /
Session.restore()).  `create` and `restore` here publish the same control event
from outside: they take the session's next seq from the last record of its
topic, so use them on a PAUSED session (an agent publishing at the same moment
could take the same seq; the observer then drops one of the two as a duplicate).

Examples:
  trajectory snapshot create --session run-42 --id before-refactor
  trajectory snapshot list                          # every stored snapshot
  trajectory snapshot list --session run-42 --json
  trajectory snapshot show --session run-42 --id before-refactor
  trajectory snapshot show --session run-42 --id before-refactor --json   # canonical state
  trajectory snapshot restore --session run-42 --id before-refactor
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("create", "list", "show", "restore"),
        help="create: ask for a snapshot; list: stored snapshots; show: one snapshot's "
        "state; restore: go back to one",
    )
    parser.add_argument("--session", metavar="ID", help="session id (required but for list)")
    parser.add_argument(
        "--id",
        dest="snapshot_id",
        metavar="SNAP",
        help="snapshot id (create: default snap-<seq>; required for show and restore)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="machine output: list -> one JSON object per line; show -> the raw canonical state",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="restore: do not require the snapshot to be on <prefix>.snapshots first",
    )
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")


def _need(args: argparse.Namespace, name: str, flag: str) -> str:
    from streams.errors import ConfigError

    value = getattr(args, name)
    if not value:
        raise ConfigError(flag, f"`trajectory snapshot {args.action}` needs {flag}")
    return str(value)


def run(args: argparse.Namespace) -> int:
    from streams.core.jsonl import ms_to_iso
    from streams.settings import Settings
    from streams.snapshots import (
        decode_snapshot,
        get_snapshot,
        list_snapshots,
        request_restore,
        request_snapshot,
        state_summary,
    )

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    out = sys.stdout
    if args.action == "create":
        session = _need(args, "session", "--session")
        ev = request_snapshot(settings, session, args.snapshot_id)
        snap = ev.metadata["snapshot_id"]
        out.write(
            f"requested snapshot {snap!r} of {session} at seq {ev.seq}; the worker stores it "
            f"on {settings.snapshots_topic}\n"
        )
        return 0
    if args.action == "restore":
        session = _need(args, "session", "--session")
        snap = _need(args, "snapshot_id", "--id")
        ev = request_restore(settings, session, snap, check=not args.no_check)
        out.write(f"requested restore of {snap!r} in {session} at seq {ev.seq}\n")
        return 0
    if args.action == "list":
        infos = list_snapshots(settings, args.session)
        if args.json:
            for i in infos:
                out.write(
                    json.dumps(
                        {
                            "session_id": i.session_id,
                            "snapshot_id": i.snapshot_id,
                            "seq": i.seq,
                            "timestamp_ms": i.timestamp_ms,
                            "size": i.size,
                        },
                        sort_keys=True,
                    )
                    + "\n"
                )
            return 0
        if not infos:
            out.write(f"no snapshots on {settings.snapshots_topic}\n")
            return 0
        out.write(f"{'SESSION':<30} {'SNAPSHOT':<24} {'SEQ':>6} {'TIME':<24} {'BYTES':>8}\n")
        for i in infos:
            when = ms_to_iso(i.timestamp_ms) if i.timestamp_ms is not None else "-"
            seq = "-" if i.seq is None else str(i.seq)
            out.write(f"{i.session_id:<30} {i.snapshot_id:<24} {seq:>6} {when:<24} {i.size:>8}\n")
        return 0
    # show
    session = _need(args, "session", "--session")
    snap = _need(args, "snapshot_id", "--id")
    data = get_snapshot(settings, session, snap)
    if args.json:
        out.write(data.decode("utf-8") + "\n")
        return 0
    summary = state_summary(decode_snapshot(data))
    rendered = summary.pop("current_assessment")
    out.write(f"snapshot {snap!r} of {session}\n")
    for key, value in summary.items():
        if isinstance(value, dict):
            out.write(f"  {key}:\n")
            for k, v in value.items():
                out.write(f"    {k}: {v}\n")
        else:
            out.write(f"  {key}: {value}\n")
    out.write("current assessment:\n")
    out.write((rendered or "  (none)") + "\n")
    return 0
