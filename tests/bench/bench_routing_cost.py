"""What routing per-session topics costs in CPU: one process added at a time.

A script, not a test (prints figures, asserts nothing).  For each ``--stage``,
on a fresh topic prefix of the broker at ``$KAFKA_BOOTSTRAP`` (default
127.0.0.1:9092; started locally if none answers):

1. starts the stage's processes: ``publisher`` none, ``router`` a router
   (``--router-args``, at-least-once unless they say otherwise), ``worker`` a
   router and a worker;
2. creates ``--sessions`` session topics through the SDK and starts every session;
3. publishes ``--rate`` events/s of simulated pathological agents for
   ``--duration`` s and prints the CPU cores each process used over the part after
   ``--warmup`` s: the broker JVM, the router, the worker;
4. stops the processes and deletes the prefix's topics.

The publisher runs in this process and is not counted.  Comparing the stages
says what the router adds to the broker and to the machine (docs/kafka-notes.md).

Example::

    python tests/bench/bench_routing_cost.py --stage publisher --stage router --stage worker
    python tests/bench/bench_routing_cost.py --stage router \\
        --router-args='--fetch-min-bytes 65536 --fetch-wait-ms 25'
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_latency import KINDS, Agent, delete_prefix_topics  # noqa: E402
from procs import broker_pid, cpu_seconds, spawn, stop, worker_args  # noqa: E402

from streams.broker import LocalBroker, free_port, kafka_ready, parse_bootstrap  # noqa: E402
from streams.sdk import Publisher  # noqa: E402
from streams.settings import Settings  # noqa: E402

STAGES = ("publisher", "router", "worker")


def run_stage(stage: str, bootstrap: str, args: argparse.Namespace) -> dict[str, float]:
    """CPU cores per process over the measured part of one stage."""
    prefix = "rc" + uuid.uuid4().hex[:10]
    settings = Settings(bootstrap=bootstrap, prefix=prefix)
    work = Path(tempfile.mkdtemp(prefix=f"bench-routing-{prefix}-"))
    procs = {}
    try:
        if stage == "worker":
            procs["worker"] = spawn(
                worker_args(bootstrap, prefix, work / "worker", free_port()), work / "worker.log"
            )
        if stage in ("router", "worker"):
            router_args = shlex.split(args.router_args)
            if "--guarantee" not in router_args:
                router_args = ["--guarantee", "at-least-once", *router_args]
            procs["router"] = spawn(
                [
                    "streams.commands.router",
                    "--bootstrap",
                    bootstrap,
                    "--prefix",
                    prefix,
                    "--status-every",
                    "0",
                    *router_args,
                ],
                work / "router.log",
            )
        time.sleep(8 if procs else 0)  # let them join their groups
        bpid = broker_pid(parse_bootstrap(bootstrap)[1])
        with Publisher(settings) as pub:
            sids = [f"s{i}" for i in range(args.sessions)]
            pub.ensure_session_topics(sids)
            agents = []
            for i, sid in enumerate(sids):
                s = pub.session(sid, flush_on_exit=False)
                s.start()
                agents.append(Agent(s, KINDS[i % len(KINDS)], f"{args.seed}:{i}"))
            pub.flush()
            time.sleep(3)
            order = itertools.cycle(agents)
            pids = {"broker": bpid, **{k: p.pid for k, p in procs.items()}}
            t0 = time.monotonic()
            n = 0
            before: dict[str, float] | None = None
            measured_from = t0
            while (now := time.monotonic()) - t0 < args.duration:
                if before is None and now - t0 >= args.warmup:
                    before = {k: cpu_seconds(v) for k, v in pids.items() if v is not None}
                    measured_from = now
                due = int((now - t0) * args.rate)
                while n < due:
                    next(order).step()
                    n += 1
                time.sleep(0.001)
            assert before is not None, "--warmup must be shorter than --duration"
            span = time.monotonic() - measured_from
            cores = {k: (cpu_seconds(pids[k]) - v) / span for k, v in before.items()}
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited early; see {work}/{name}.log")
            pub.flush(60)
        return cores
    finally:
        for proc in procs.values():
            stop(proc)
        delete_prefix_topics(bootstrap, prefix)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--stage", action="append", choices=STAGES, help="repeatable; default all")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1000.0, help="events/s")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds not measured")
    ap.add_argument("--router-args", default="", help="extra router flags")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    host, port = parse_bootstrap(bootstrap)
    broker = None
    if not kafka_ready(host, port):
        broker = LocalBroker(
            Path(tempfile.mkdtemp(prefix="bench-routing-broker-")),
            port=port,
            controller_port=free_port(),
        )
        print(f"starting a local broker on {bootstrap}", flush=True)
        broker.start()
    try:
        for stage in args.stage or list(STAGES):
            cores = run_stage(stage, bootstrap, args)
            extra = (
                f", router {args.router_args}" if args.router_args and stage != "publisher" else ""
            )
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
            print(
                f"stage {stage:9s} ({args.sessions} session topics, {args.rate:.0f} events/s"
                f"{extra}): CPU cores {cpu}",
                flush=True,
            )
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
