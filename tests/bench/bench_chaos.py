"""Fault and abuse run of issue #15: prints the figures table.

One dedicated Kafka broker (free ports, temp dir), one router, one worker
(``--max-sessions-in-memory`` small), a steady SDK load, generated malformed
inputs, seeded SIGKILLs of router and worker (each restarted) and one broker
restart; then valid events lost, sessions regressed, repeated outputs, recovery
time after each kill, the DLQ share and the ``replay --compare-live`` verdict.
See tests/chaos/chaos_driver.py and docs/chaos.md.

    python tests/bench/bench_chaos.py                 # small (the CI size)
    python tests/bench/bench_chaos.py --full          # >= 20 kills, >= 10,000 inputs
    python tests/bench/bench_chaos.py --kills 6 --malformed 2000 --seed 7
    python tests/bench/bench_chaos.py --fleet         # 2 workers, wiped stores, joins/leaves

Exit status 0 when every correctness outcome holds, 1 otherwise (figures are
printed either way).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "chaos"))

from chaos_driver import ChaosConfig, format_figures, run_chaos  # noqa: E402
from chaos_outcomes import failed_outcomes  # noqa: E402


def _interrupted(signum: int, _frame: object) -> None:
    # SIGTERM (a timeout, a killed shell): end like Ctrl-C, so the run's `finally`
    # stops the router, the workers and the broker it started (they run in their
    # own sessions and would otherwise outlive it).
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="issue #15's full size")
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="partitions on the move: 2 workers, two thirds of the kills on them, every "
        "third of those restarted with an empty data dir, 4 extra workers joining and leaving",
    )
    parser.add_argument("--workers", type=int, help="worker processes (default 1)")
    parser.add_argument(
        "--routers", type=int, help="router processes, each its own --transactional-id (default 1)"
    )
    parser.add_argument(
        "--static-shards",
        action="store_true",
        help="run the routers as static shards (--shard I/N each: no router group)",
    )
    parser.add_argument("--partitions", type=int, help="partitions of <prefix>.events (default 3)")
    parser.add_argument(
        "--wipe-every",
        type=int,
        help="restart the first and every N-th killed worker with an emptied data dir "
        "(default 0: never)",
    )
    parser.add_argument(
        "--router-share",
        type=float,
        help="share of the kills that hit the router (default 0.5; --fleet 0.34)",
    )
    parser.add_argument(
        "--joins", type=int, help="extra workers that join and leave again (default 0)"
    )
    parser.add_argument("--kills", type=int, help="SIGKILLs of router/worker (default 3)")
    parser.add_argument("--sessions", type=int, help="concurrent SDK sessions (default 6)")
    parser.add_argument("--rate", type=float, help="valid events/s in total (default 120)")
    parser.add_argument("--malformed", type=int, help="generated bad inputs (default 500)")
    parser.add_argument("--seed", type=int, help="seed of every random choice (default 15)")
    parser.add_argument("--no-broker-restart", action="store_true")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="CLASS",
        help="leave an input class out (diagnosis only; repeatable), e.g. deep_nesting",
    )
    parser.add_argument(
        "--guarantee",
        choices=("exactly-once", "at-least-once"),
        help="the router's --guarantee (default exactly-once, the router's default)",
    )
    parser.add_argument(
        "--router-args",
        default="",
        help="more router arguments, one string (diagnosis), e.g. '--client-debug cgrp'",
    )
    parser.add_argument("--workdir", help="keep logs and data here (default: a temp dir)")
    args = parser.parse_args(argv)
    changes = {
        k: v
        for k, v in {
            "kills": args.kills,
            "sessions": args.sessions,
            "rate": args.rate,
            "malformed": args.malformed,
            "seed": args.seed,
            "guarantee": args.guarantee,
            "workers": args.workers,
            "routers": args.routers,
            "wipe_every": args.wipe_every,
            "joins": args.joins,
            "partitions": args.partitions,
            "router_share": args.router_share,
        }.items()
        if v is not None
    }
    if args.router_args:
        changes["router_args"] = tuple(args.router_args.split())
    if args.exclude:
        changes["exclude"] = tuple(args.exclude)
    if args.static_shards:
        changes["static_shards"] = True
    if args.no_broker_restart:
        changes["broker_restart"] = False
    if args.full and args.fleet:
        parser.error("--full and --fleet are two sizes: give one")
    if args.full:
        cfg = ChaosConfig.full(**changes)
    elif args.fleet:
        cfg = ChaosConfig.fleet(**changes)
    else:
        cfg = ChaosConfig(**changes)
    if args.workdir:
        workdir = Path(args.workdir)
        result = run_chaos(cfg, workdir, log=lambda s: print(s, file=sys.stderr, flush=True))
    else:
        with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
            result = run_chaos(cfg, Path(tmp), log=lambda s: print(s, file=sys.stderr, flush=True))
    print(format_figures(result))
    failed = failed_outcomes(result)
    print()
    if failed:
        print(f"outcomes NOT met ({len(failed)}):")
        for line in failed:
            print(f"  - {line}")
        return 1
    print("all outcomes met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
