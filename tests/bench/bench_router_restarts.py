"""Router recovery after broker restarts under session-topic churn (a script, not a test).

What it reproduces: the chaos suite's one "router hangs after a broker restart"
case (docs/chaos.md, "Open"): a router SIGKILLed and restarted, then the broker
stopped and started a few seconds later, while new session topics keep appearing
(each new topic is a rebalance of the router's group).  Each cycle:

1. SIGKILL the router, restart it after 0-1 s (same ``group.instance.id`` and
   ``transactional.id``, as a supervisor would);
2. after ``--gap`` s (uniform), stop the broker for ``--down`` s (uniform), start
   it again on the same ports and data;
3. time from the broker's start to the first event the router commits to
   ``<prefix>.events`` (read_committed), up to ``--timeout`` s.

It prints one line per cycle (recovery seconds, and how many transactions the
router's log shows refused with ILLEGAL_GENERATION in that cycle) and a summary
(median, max, cycles over ``--bound`` s).  All choices come from ``--seed``.
Logs stay in ``--workdir`` (router.log; ``--client-debug cgrp`` adds
librdkafka's group debug lines).

    python tests/bench/bench_router_restarts.py --cycles 8 --seed 1
    python tests/bench/bench_router_restarts.py --cycles 4 --client-debug cgrp --workdir /tmp/rr

Exit status 0 when every cycle recovered within ``--bound`` s, 1 otherwise.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "chaos"))

from chaos_driver import (  # noqa: E402
    PARTITIONS,
    PREFIX,
    ArrivalMonitor,
    ChaosConfig,
    Load,
    Proc,
    router_command,
)


def _refusals(log: Path, since: int) -> tuple[int, int]:
    """(ILLEGAL_GENERATION refusals in the router log after byte ``since``, log size)."""
    data = log.read_bytes()
    return data[since:].count(b"ILLEGAL_GENERATION"), len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=6, help="kill + broker restart cycles")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    parser.add_argument("--sessions", type=int, default=6, help="concurrent SDK sessions")
    parser.add_argument("--rate", type=float, default=120.0, help="events/s in total")
    parser.add_argument(
        "--events-per-session",
        type=int,
        default=60,
        help="events per session (fewer: more new topics per second, more rebalances)",
    )
    parser.add_argument("--gap", type=float, nargs=2, default=(2.0, 9.0), metavar=("MIN", "MAX"))
    parser.add_argument("--down", type=float, nargs=2, default=(5.0, 14.0), metavar=("MIN", "MAX"))
    parser.add_argument("--timeout", type=float, default=90.0, help="give up a cycle after this")
    parser.add_argument("--bound", type=float, default=45.0, help="the chaos suite's bound")
    parser.add_argument(
        "--guarantee",
        choices=("exactly-once", "at-least-once"),
        default="exactly-once",
        help="the router's --guarantee (default exactly-once, the router's default)",
    )
    parser.add_argument("--client-debug", help="librdkafka debug contexts for the router")
    parser.add_argument(
        "--router-args",
        default="",
        help="more `trajectory router` arguments, one string (e.g. '--batch-idle-ms 0')",
    )
    parser.add_argument("--workdir", help="keep logs and data here (default: a temp dir)")
    args = parser.parse_args(argv)

    from streams.broker import LocalBroker, ensure_jars, free_ports
    from streams.settings import Settings
    from streams.topics import ensure_worker_topics

    rng = random.Random(args.seed)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="router-restarts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ensure_jars()
    port, controller = free_ports(2)
    broker = LocalBroker(workdir / "broker", port=port, controller_port=controller, heap="768m")
    broker.start()
    settings = Settings(bootstrap=broker.bootstrap, prefix=PREFIX, events_partitions=PARTITIONS)
    ensure_worker_topics(settings)
    router_args = router_command(broker.bootstrap, args.guarantee)
    router_args += args.router_args.split()
    if args.client_debug:
        router_args += ["--client-debug", args.client_debug]
    router_log = workdir / "router.log"
    router = Proc("router", router_args, router_log)
    cfg = ChaosConfig(
        sessions=args.sessions, rate=args.rate, events_per_session=args.events_per_session
    )
    load = Load(settings, cfg, random.Random(rng.getrandbits(64)))
    monitor = ArrivalMonitor(broker.bootstrap, settings.events_topic)
    print(f"workdir {workdir}; broker {broker.bootstrap}", flush=True)
    results: list[float | None] = []
    try:
        router.start()
        monitor.start()
        load.start()
        first = monitor.first_after(time.monotonic() - 1, args.timeout)
        print(f"routing after {first}s", flush=True)
        for cycle in range(args.cycles):
            router.kill()
            time.sleep(rng.uniform(0.0, 1.0))
            router.start()
            gap, down = rng.uniform(*args.gap), rng.uniform(*args.down)
            time.sleep(gap)
            _, mark = _refusals(router_log, 0)
            broker.stop()
            time.sleep(down)
            broker.start()
            up = time.monotonic()
            rec = monitor.first_after(up, args.timeout)
            refused, _ = _refusals(router_log, mark)
            results.append(rec)
            shown = "none" if rec is None else f"{rec:.1f}s"
            print(
                f"cycle {cycle + 1}: restart {gap:.1f}s after the router's, down {down:.1f}s: "
                f"first commit after {shown}; ILLEGAL_GENERATION refusals {refused}",
                flush=True,
            )
            if rec is None:
                # let it clear (or not) before the next cycle, and say when it did
                late = monitor.first_after(up, 240.0)
                print(f"  ... it cleared {late and round(late, 1)}s after the restart", flush=True)
    finally:
        load.stopping.set()
        monitor.stop_event.set()
        router.stop()
        broker.stop()
        monitor.join(10)
    got = [r for r in results if r is not None]
    over = sum(1 for r in results if r is None or r > args.bound)
    if got:
        print(
            f"recovery after the broker restart: median {statistics.median(got):.1f}s, "
            f"max {max(got):.1f}s, {len(results) - len(got)} of {len(results)} over "
            f"{args.timeout:.0f}s, {over} over the {args.bound:.0f}s bound"
        )
    return 0 if over == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
