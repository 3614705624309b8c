"""Drive a simulated fleet of coding agents through the publisher SDK.

N concurrent sessions publish R events per second in total for S seconds, each
session to its own topic <prefix>.session.<id> (the router funnels them into
<prefix>.events for the worker).  A share of the sessions is pathological:

  looping        repeats the same failing test run with the same error
  stalled        keeps searching, nothing ever succeeds or comes back new
  budget_burner  sets a token budget, then burns through it with huge model steps

The rest are healthy: read files, edit, run tests (maybe fix once), pass, submit;
a finished healthy session is replaced by a new one, so the fleet stays N strong.
Session ids are <id-prefix>-<slot>-<generation>-<kind>, so you can tell what
each session is meant to be.  Same --seed, same sessions and contents (event
times are live).

Examples:
  trajectory simulate --sessions 20 --rate 50 --duration 60
  trajectory simulate --sessions 4 --pathological-share 0.75 --seed 7 --duration 10
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env KAFKA_BOOTSTRAP)")
    parser.add_argument("--prefix", help="topic prefix (env TRAJECTORY_PREFIX, default traj)")
    parser.add_argument("--sessions", type=int, default=10, help="concurrent sessions (default 10)")
    parser.add_argument(
        "--rate", type=float, default=20.0, help="events per second across the fleet (default 20)"
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds to run (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--pathological-share",
        type=float,
        default=0.25,
        help="fraction of sessions that are pathological, 0..1 (default 0.25)",
    )
    parser.add_argument("--id-prefix", default="sim", help="session id prefix (default sim)")
    parser.add_argument("--quiet", action="store_true", help="no per-second progress line")


def run(args: argparse.Namespace) -> int:
    from streams.sdk import Publisher
    from streams.settings import Settings
    from streams.sim.driver import DriveReport, drive
    from streams.sim.fleet import FleetConfig

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    cfg = FleetConfig(
        sessions=args.sessions,
        seed=args.seed,
        pathological_share=args.pathological_share,
        id_prefix=args.id_prefix,
    )

    def progress(r: DriveReport) -> None:
        open_ = r.started - r.ended
        print(
            f"simulate: {r.elapsed_s:6.1f}s {r.events:7d} events ({r.rate:7.1f}/s) "
            f"sessions open {open_}, ended {r.ended}",
            file=sys.stderr,
            flush=True,
        )

    with Publisher(settings) as publisher:
        report = drive(
            publisher,
            cfg,
            rate=args.rate,
            duration_s=args.duration,
            progress=None if args.quiet else progress,
        )
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.kinds.items()))
    print(
        f"simulate: published {report.events} events in {report.elapsed_s:.1f}s "
        f"({report.rate:.1f}/s) across {report.started} sessions ({kinds}) "
        f"to {settings.prefix}.session.*",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="trajectory simulate", description=__doc__)
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
