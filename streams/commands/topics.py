"""Session topic lifecycle: list them, and collect the idle ones.

Every agent session has its own topic (<prefix>.session.<id>).  Retention
empties old ones but never removes them; `gc` does.

  list   session topics with their message count, newest event and record time
         (sizes in bytes are not shown: this Kafka client cannot describe log dirs)
  gc     topics whose newest record is older than --idle-for (default: the
         session retention, $TRAJECTORY_SESSION_RETENTION_MS, 7 days).  With
         --archive DIR each topic is first written to DIR/<topic>.jsonl (or .avro),
         read back and compared event for event; a topic whose archive failed is
         never deleted.  Deleting needs --yes; --dry-run only shows the plan.

Idleness uses the Kafka record time of the newest record (when it was sent), so
a replayed old trajectory is not idle.  Topics never written to are left alone.

Examples:
  trajectory topics list
  trajectory topics list --sessions 'run-*' --json
  trajectory topics gc --idle-for 12h --dry-run
  trajectory topics gc --idle-for 7d --archive /backups/traj --archive-format avro --yes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.settings import Settings

#: Bounds the wait for a broker that accepts connections but answers slowly; a
#: bootstrap that refuses every connection fails at once (:func:`require_reachable`).
REACH_TIMEOUT_S = 30.0
#: One metadata request of the probe: librdkafka reports "all brokers down" through
#: ``error_cb``, served only between requests, so they are kept short.
_PROBE_SLICE_S = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=("list", "gc"), help="list session topics, or collect idle ones"
    )
    parser.add_argument(
        "--sessions", metavar="GLOB", help="only session ids matching this glob (e.g. 'run-*')"
    )
    parser.add_argument(
        "--idle-for",
        metavar="DURATION",
        help="gc: idle threshold, e.g. 7d, 12h, 30m, 1d12h (default: session retention)",
    )
    parser.add_argument("--archive", metavar="DIR", help="gc: archive each topic here first")
    parser.add_argument(
        "--archive-format",
        choices=("jsonl", "avro"),
        default="jsonl",
        help="gc: JSON Lines (trajectory analyze reads it) or an Avro container file",
    )
    parser.add_argument("--dry-run", action="store_true", help="gc: show what would be done")
    parser.add_argument("--yes", action="store_true", help="gc: really delete")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")


def _iso(ms: int | None) -> str:
    from streams.core.jsonl import ms_to_iso

    return "-" if ms is None else ms_to_iso(ms)


def require_reachable(settings: Settings, *, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Return once the cluster at ``settings.bootstrap`` answers a metadata request.

    Why: ``list_topics(timeout=30)`` on a dead bootstrap (connection refused) sat out
    its whole timeout, ~32 s, before the command exited 4.  librdkafka knows within
    a second that every bootstrap broker is down (``_ALL_BROKERS_DOWN`` through
    ``error_cb``), so short requests in a loop fail as soon as it says so, while a
    broker that accepts connections but is slow still gets ``timeout_s``.

    Raises :class:`~streams.errors.BrokerError` (exit 4) naming ``--bootstrap`` /
    ``KAFKA_BOOTSTRAP``; a refused login or TLS handshake raises the
    :class:`~streams.security.SecurityError` that names the security setting.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from streams.errors import BrokerError
    from streams.security import client_config, raise_if_security_error

    down: list[str] = []

    def on_error(err: Any) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            down.append(err.str())
        raise_if_security_error(err, settings.security)

    conf: dict[str, Any] = {"bootstrap.servers": settings.bootstrap}
    conf.update(client_config(settings.security))
    conf["error_cb"] = on_error
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=_PROBE_SLICE_S)
            return
        except KafkaException as exc:
            last = exc
        admin.poll(0)  # serves error_cb: fills ``down`` or raises a SecurityError
        if down or time.monotonic() >= deadline:
            why = f"every bootstrap broker is down ({down[0]})" if down else f"{last}"
            raise BrokerError.from_kafka(
                f"cannot reach Kafka at {settings.bootstrap!r} (--bootstrap / KAFKA_BOOTSTRAP): "
                f"{why}: is the broker running (`trajectory broker start`)?",
                last,
                retriable=True,  # a broker that starts later answers the same call
            )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streams.errors import ConfigError
    from streams.lifecycle import gc, list_session_topics, parse_duration, report_json
    from streams.settings import Settings

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    out = sys.stdout
    if args.action == "list":
        require_reachable(settings)
        topics = list_session_topics(settings, args.sessions)
        if args.json:
            for t in topics:
                out.write(json.dumps(asdict(t), sort_keys=True) + "\n")
            return 0
        if not topics:
            out.write(f"no session topics with prefix {settings.prefix!r}\n")
            return 0
        out.write(f"{'SESSION':<36} {'MSGS':>7} {'LAST SEQ':>8}  {'LAST EVENT':<24}  LAST RECORD\n")
        for t in topics:
            seq = "-" if t.last_seq is None else str(t.last_seq)
            note = f"  ({t.decode_error})" if t.decode_error else ""
            out.write(
                f"{t.session_id:<36} {t.messages:>7} {seq:>8}  {_iso(t.last_event_ms):<24}  "
                f"{_iso(t.last_record_ms)}{note}\n"
            )
        return 0
    # gc
    if not args.dry_run and not args.yes:
        raise ConfigError(
            "--yes", "gc deletes topics: add --yes to do it, or --dry-run to see the plan first"
        )
    idle_ms = parse_duration(args.idle_for) if args.idle_for else None
    require_reachable(settings)
    report = gc(
        settings,
        now_ms=time.time_ns() // 1_000_000,
        idle_ms=idle_ms,
        pattern=args.sessions,
        archive_dir=Path(args.archive) if args.archive else None,
        archive_format=args.archive_format,
        dry_run=args.dry_run,
    )
    if args.json:
        out.write(report_json(report) + "\n")
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    out.write(
        f"{report.examined} session topics examined, {len(report.actions)} idle for "
        f">= {report.idle_ms / 3_600_000:g} h\n"
    )
    for a in report.actions:
        if a.skipped:
            out.write(f"  kept {a.topic}: {a.skipped}\n")
            continue
        what = verb if (a.deleted or report.dry_run) else "left"
        arch = ""
        if a.archive:
            arch = (
                f" after archiving to {a.archive}"
                if report.dry_run
                else f" after archiving {a.archived_events} events to {a.archive}"
            )
        out.write(f"  {what} {a.topic} ({a.messages} msgs, last {_iso(a.last_record_ms)}){arch}\n")
    return 0
