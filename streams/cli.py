"""``trajectory``: the command line.  Thin: each subcommand lives in
``streams/commands/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes (:mod:`streams.errors`, docs/errors.md): 0 ok; 1 the command ran and found
a failure (e.g. ``eval`` verdict fail), or an internal error; 2 bad usage or input (a
:class:`~streams.errors.UsageError`, or an argparse error); 3 a router's or worker's
stop ran out of its grace after SIGTERM; 4 Kafka I/O failed (a
:class:`~streams.errors.KafkaIOError`: broker down or unreachable, a write not
acknowledged, a read that failed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from streams import security

#: (subcommand, module under streams.commands, one-line help). Order is --help order.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("broker", "broker", "obtain and run a local single-node Kafka (KRaft) on 127.0.0.1"),
    ("router", "router", "route per-session topics into <prefix>.events (DLQ for bad input)"),
    ("worker", "worker", "run the Faust worker: session tables, detectors, assessments"),
    ("simulate", "simulate", "drive a simulated fleet of agents through the publisher SDK"),
    ("publish", "publish", "publish trajectory files as live sessions through the SDK"),
    ("analyze", "analyze", "run the detector core offline over trajectory files"),
    ("summary", "summary", "print AgentV's TraceSummary of trajectory files"),
    ("eval", "eval", "run AgentV's tool_trajectory evaluator over a trajectory"),
    ("replay", "replay", "re-run the core over recorded Kafka sessions, or re-publish them"),
    ("export", "export", "export recorded Kafka sessions to Avro, JSONL or Parquet files"),
    ("report", "report", "one self-contained HTML (+JSON) analyst report over trajectories"),
    ("watch", "watch", "live view of sessions' assessments and patterns as they are published"),
    ("demo", "demo", "start broker, router and worker, run a simulated fleet, show state live"),
    ("snapshot", "snapshot", "create, list, show and restore snapshots of a session's state"),
    ("history", "history", "query detected patterns and assessments by session, tree and time"),
    ("topics", "topics", "list session topics; archive and delete idle ones (gc)"),
    ("otlp", "otlp", "OTLP/HTTP receiver: OpenTelemetry agent traces/logs -> session topics"),
    ("acl", "acl", "tenants and credentials on a secured cluster: SCRAM users and Kafka ACLs"),
)

#: Commands that talk to Kafka: they take the shared security flags (streams.security).
SECURED_COMMANDS: frozenset[str] = frozenset(
    {
        "router",
        "worker",
        "simulate",
        "publish",
        "replay",
        "export",
        "watch",
        "snapshot",
        "history",
        "topics",
        "acl",
        "otlp",
    }
)

EPILOG = """\
Typical flow:
  trajectory broker start                 # local Kafka on 127.0.0.1:9092
  trajectory router &                     # per-session topics -> traj.events
  trajectory worker &                     # tables, detectors, assessments
  trajectory simulate --sessions 20       # a fleet, some of it pathological
  trajectory analyze run.traj.gz          # the same detectors, offline

Settings come from flags or the environment: KAFKA_BOOTSTRAP, TRAJECTORY_PREFIX,
TRAJECTORY_SCHEMA_REGISTRY_URL, TRAJECTORY_PRIVACY (full|summary).  TLS/SASL:
--security-protocol, --sasl-*, --ssl-*, --kafka-properties (TRAJECTORY_SECURITY_PROTOCOL,
...; docs/security.md has the table).
Run `trajectory COMMAND --help` for each command's options and examples.

Exit codes: 0 ok; 1 the command found a failure (eval verdict, broker status down)
or an internal error; 2 bad usage or input (flag, config, event, file); 3 a router's
or worker's stop ran out of its grace after SIGTERM; 4 Kafka I/O failed (broker down or unreachable,
a write not acknowledged): retrying later may help.  docs/errors.md has the tree.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trajectory",
        description="A Kafka-native trajectory observer for fleets of AI agents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in COMMANDS:
        module = importlib.import_module(f"streams.commands.{module_name}")
        p = sub.add_parser(
            name,
            help=help_text,
            description=(module.__doc__ or help_text).strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        if name in SECURED_COMMANDS:
            security.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from streams.errors import TrajectoryError, exit_code

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        if args.command in SECURED_COMMANDS:
            # flags > TRAJECTORY_* variables > --kafka-properties; every client reads it
            config = security.from_args(args)
            security.configure(config)
            bootstrap = getattr(args, "bootstrap", None) or os.environ.get("KAFKA_BOOTSTRAP")
            if config.protocol != "PLAINTEXT" and bootstrap:
                security.verify_connection(bootstrap, config)  # wrong password: fail fast
        return int(args._run(args) or 0)
    except TrajectoryError as exc:
        print(f"trajectory {args.command}: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as Unix tools do,
        # and keep the interpreter's final flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
