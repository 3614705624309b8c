"""What routing per-session topics costs in CPU: one process added at a time.

A script, not a test (prints figures, asserts nothing).  For each ``--stage``,
on a fresh topic prefix of the broker at ``$KAFKA_BOOTSTRAP`` (default
127.0.0.1:9092; started locally if none answers):

1. creates ``--sessions`` session topics through the SDK and starts every session;
2. starts the stage's processes: ``publisher`` none, ``router`` a router
   (``--router-args``, at-least-once unless they say otherwise), ``worker`` a
   router and a worker, and waits until the router group has every topic assigned
   (the steady state, not the burst of topic creations);
3. publishes ``--rate`` events/s of simulated pathological agents for
   ``--duration`` s and prints the CPU cores each process used over the part after
   ``--warmup`` s: the broker JVM, the router, the worker;
4. stops the processes and deletes the prefix's topics.

The publisher runs in this process and is not counted.  Comparing the stages
says what the router adds to the broker and to the machine (docs/kafka-notes.md).

``--option`` (repeatable, fan-in of issue #12) runs the ``router`` stage once per
named router set-up, side by side in one run: ``default``, ``fetch-25ms`` (fetch
min bytes 64 KiB, wait 25 ms), ``fetch-5ms``, ``shard2`` (two router processes in
one group: each fetch lists half of the topics), ``static2`` (two static shards,
``--shard 0/2`` and ``--shard 1/2``: no group, no rebalance), ``static1`` (one
router as the only shard, ``--shard 0/1``), ``no-pause`` (ended sessions'
topics never paused).  ``--active N`` keeps only N sessions publishing and ends
the others right after their start (their topics stay: gc has not run).
``--churn R`` starts R new sessions per second while publishing (a topic, an
announcement and a start each), each ending the oldest live one: a fleet whose
sessions come and go, where every new topic makes the router group rejoin.  For
each run it prints broker + router CPU cores, the same per 1,000 events/s, and
publish -> routed latency p50/p99 (the SDK's record timestamp to this process
reading ``<prefix>.events`` read_committed, after the warm-up), and each router's
totals at its stop (transactions and aborts, or offset commits), and the
aborts for an old group generation (``ILLEGAL_GENERATION``) in its log.  Before
it stops the routers it waits (up to 60 s) until the router group has committed
every event of every session topic, and says whether it had ("drained" or "NOT
drained: N event(s)"), so a router total short of what was published is a loss,
not events still waiting in their topics.

Example::

    python tests/bench/bench_routing_cost.py --stage publisher --stage router --stage worker
    python tests/bench/bench_routing_cost.py --stage router \\
        --router-args='--fetch-min-bytes 65536 --fetch-wait-ms 25'
    python tests/bench/bench_routing_cost.py --stage router --option default \\
        --option shard2 --option fetch-25ms --active 1000
    python tests/bench/bench_routing_cost.py --stage router --sessions 200 --rate 500 \\
        --churn 2 --guarantee exactly-once --option default --option shard2
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_latency import KINDS, Agent, delete_prefix_topics  # noqa: E402
from procs import (  # noqa: E402
    broker_pid,
    broker_unless_running,
    spawn,
    stop,
    tree_cpu_seconds,
    worker_args,
)

from streams.broker import free_port, parse_bootstrap  # noqa: E402
from streams.router import RouterConfig  # noqa: E402
from streams.router.router import ensure_topics  # noqa: E402
from streams.sdk import Publisher  # noqa: E402
from streams.settings import Settings  # noqa: E402

STAGES = ("publisher", "router", "worker")
#: --option name -> extra flags of each router process (one list per process).
OPTIONS: dict[str, list[list[str]]] = {
    "default": [[]],
    "fetch-25ms": [["--fetch-min-bytes", "65536", "--fetch-wait-ms", "25"]],
    "fetch-5ms": [["--fetch-min-bytes", "65536", "--fetch-wait-ms", "5"]],
    "shard2": [
        ["--transactional-id", "{prefix}.router.0"],
        ["--transactional-id", "{prefix}.router.1"],
    ],
    "static1": [["--shard", "0/1"]],
    "static2": [["--shard", "0/2"], ["--shard", "1/2"]],
    "no-pause": [["--paused-check-s", "0"]],
}


def wait_assigned(bootstrap: str, group: str, topics: int, timeout_s: float = 300.0) -> None:
    """Wait until the router group has every session topic assigned to some member."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
            owned = {
                tp.topic
                for m in desc.members or ()
                for tp in (m.assignment.topic_partitions if m.assignment else None) or ()
                if ".session." in tp.topic
            }
            if len(owned) >= topics:
                print(
                    f"  {group}: {len(owned)} topics assigned after {time.monotonic() - t0:.0f} s",
                    flush=True,
                )
                return
        except Exception:  # the group does not exist yet
            pass
        time.sleep(1)
    raise SystemExit(f"{group}: not every session topic assigned after {timeout_s:.0f} s")


def wait_routed(bootstrap: str, settings: Settings, timeout_s: float = 300.0) -> None:
    """Wait until the router group has committed every event of every session topic
    (static shards: they join no group, so there is no assignment to describe)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if unrouted(bootstrap, settings) == 0:
            print(f"  every session topic routed after {time.monotonic() - t0:.0f} s", flush=True)
            return
        time.sleep(1)
    raise SystemExit(f"not every session topic routed after {timeout_s:.0f} s")


def unrouted(bootstrap: str, settings: Settings) -> int:
    """Events in the session topics that the router group has not committed yet."""
    group = RouterConfig().resolved_group_id(settings.prefix)  # the routers' (default) group
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        md = consumer.list_topics(timeout=30)
        tps = [
            TopicPartition(name, p)
            for name, meta in md.topics.items()
            if name.startswith(f"{settings.prefix}.session.")
            for p in meta.partitions
        ]
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, 30)}
        left = 0
        for tp in tps:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            done = committed.get((tp.topic, tp.partition), -1)
            left += high - (done if done >= 0 else low)
        return left
    finally:
        consumer.close()


def wait_drained(bootstrap: str, settings: Settings, timeout_s: float = 60.0) -> str:
    """Wait until the routers committed every published event (or ``timeout_s``), and
    say which: a router total short of what was published is then a loss, not
    events still in their topics when the routers were stopped."""
    t0 = time.monotonic()
    while True:
        left = unrouted(bootstrap, settings)
        waited = time.monotonic() - t0
        if left == 0:
            return f"drained: every event routed and committed {waited:.1f} s after publishing"
        if waited >= timeout_s:
            return (
                f"NOT drained: {left} event(s) not committed by the routers "
                f"{waited:.0f} s after publishing"
            )
        time.sleep(1)


class RoutedProbe:
    """publish -> routed latency: reads ``<prefix>.events`` read_committed from its end
    and keeps now - the record's timestamp (the SDK's, which the router forwards)."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": f"{settings.prefix}.probe",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                "enable.auto.commit": False,
            }
        )
        md = self._consumer.list_topics(settings.events_topic, timeout=30)
        parts = md.topics[settings.events_topic].partitions
        self._consumer.assign([TopicPartition(settings.events_topic, p, OFFSET_END) for p in parts])
        self.measuring = False
        self.latencies_ms: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(500, timeout=0.1):
                if m.error() is None and self.measuring:
                    self.latencies_ms.append(time.time_ns() // 1_000_000 - m.timestamp()[1])

    def close(self) -> tuple[float, float, int]:
        """Stop; (p50, p99, count) of the latencies seen while measuring."""
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()
        xs = sorted(self.latencies_ms)
        if not xs:
            return float("nan"), float("nan"), 0
        return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))], len(xs)


def router_totals(log: Path) -> str:
    """The router log's own totals (its ``stopped:`` line) and its aborts for an old
    group generation (the cost of rejoins under session churn)."""
    lines = log.read_text(errors="replace").splitlines()
    stopped = [line for line in lines if "stopped: routed" in line]
    refused = sum(
        1 for line in lines if "aborting transaction" in line and "ILLEGAL_GENERATION" in line
    )
    total = stopped[-1].split("stopped: ", 1)[1] if stopped else "no stopped: line"
    return f"{total}; {refused} abort(s) for an old generation"


def run_stage(
    stage: str, bootstrap: str, args: argparse.Namespace, option: str = "default"
) -> tuple[dict[str, float], tuple[float, float, int]]:
    """CPU cores per process over the measured part of one stage, and the publish ->
    routed latency (p50 ms, p99 ms, count; NaN without a router)."""
    prefix = "rc" + uuid.uuid4().hex[:10]
    settings = Settings(bootstrap=bootstrap, prefix=prefix)
    work = Path(tempfile.mkdtemp(prefix=f"bench-routing-{prefix}-"))
    procs = {}
    probe: RoutedProbe | None = None
    try:
        bpid = broker_pid(parse_bootstrap(bootstrap)[1])
        # Topics and session starts first, then the processes: the measured part is the
        # steady state, not a burst of 1,000 topic creations (a rebalance per batch of
        # new topics); that is what a long-running deployment sees.
        ensure_topics(settings, RouterConfig())  # events, dlq, control (announcements)
        with Publisher(settings) as pub:
            sids = [f"s{i}" for i in range(args.sessions)]
            pub.ensure_session_topics(sids)
            agents = []
            active = args.sessions if args.active is None else args.active
            for i, sid in enumerate(sids):
                s = pub.session(sid, flush_on_exit=False)
                s.start()
                if i < active:
                    agents.append(Agent(s, KINDS[i % len(KINDS)], f"{args.seed}:{i}"))
                else:
                    s.end()  # an ended session: its topic stays until gc
            pub.flush()
            if stage == "worker":
                procs["worker"] = spawn(
                    worker_args(bootstrap, prefix, work / "worker", free_port()),
                    work / "worker.log",
                )
            if stage in ("router", "worker"):
                for k, extra in enumerate(OPTIONS[option]):
                    router_args = [a.format(prefix=prefix) for a in extra]
                    router_args += shlex.split(args.router_args)
                    if "--guarantee" not in router_args:
                        router_args = ["--guarantee", args.guarantee, *router_args]
                    name = "router" if k == 0 else f"router{k}"
                    procs[name] = spawn(
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
                        work / f"{name}.log",
                    )
                if option.startswith("static"):
                    wait_routed(bootstrap, settings)  # static shards join no group
                else:
                    wait_assigned(
                        bootstrap, RouterConfig().resolved_group_id(prefix), args.sessions
                    )
                probe = RoutedProbe(settings)
            time.sleep(8 if procs else 0)  # the worker's join; the backlog of starts
            pids = {"broker": bpid, **{k: p.pid for k, p in procs.items()}}
            t0 = time.monotonic()
            n = 0
            turn = 0
            churned = 0
            before: dict[str, float] | None = None
            measured_from = t0
            while (now := time.monotonic()) - t0 < args.duration:
                if before is None and now - t0 >= args.warmup:
                    before = {k: tree_cpu_seconds(v) for k, v in pids.items() if v is not None}
                    measured_from = now
                    if probe is not None:
                        probe.measuring = True
                if args.churn and churned < int((now - t0) * args.churn):
                    # session churn: a new session (its topic, its start) takes the
                    # place of the oldest one, which ends
                    sid = f"c{churned}"
                    churned += 1
                    pub.ensure_session_topics([sid])
                    fresh = pub.session(sid, flush_on_exit=False)
                    fresh.start()
                    if agents:  # (--active 0: no live session to end)
                        agents.pop(0).session.end()
                    agents.append(Agent(fresh, KINDS[churned % len(KINDS)], f"{args.seed}:{sid}"))
                due = int((now - t0) * args.rate)
                while n < due:
                    agents[turn % len(agents)].step()
                    turn += 1
                    n += 1
                time.sleep(0.001)
            assert before is not None, "--warmup must be shorter than --duration"
            span = time.monotonic() - measured_from
            cores = {k: (tree_cpu_seconds(pids[k]) - v) / span for k, v in before.items()}
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited early; see {work}/{name}.log")
            pub.flush(60)
        if probe is not None:
            print(f"  {wait_drained(bootstrap, settings)}", flush=True)
            latency = probe.close()
            probe = None
        else:
            latency = (float("nan"), float("nan"), 0)
        for name, proc in procs.items():
            if name.startswith("router"):
                stop(proc)
                print(f"  {name}: {router_totals(work / f'{name}.log')}", flush=True)
        return cores, latency
    finally:
        if probe is not None:
            probe.close()
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
    ap.add_argument(
        "--option",
        action="append",
        choices=tuple(OPTIONS),
        help="router set-up(s) to compare in the router/worker stages (repeatable; default: "
        "default)",
    )
    ap.add_argument(
        "--active",
        type=int,
        help="only this many sessions publish; the others end right after their start "
        "(default: all)",
    )
    ap.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="new sessions per second while publishing, each taking the place of the "
        "oldest, which ends (a fleet whose sessions come and go; default 0)",
    )
    ap.add_argument(
        "--guarantee",
        default="at-least-once",
        choices=("at-least-once", "exactly-once"),
        help="the routers' guarantee unless --router-args names one (default at-least-once)",
    )
    args = ap.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    broker = broker_unless_running(bootstrap, "routing")
    try:
        active = args.sessions if args.active is None else args.active
        for stage in args.stage or list(STAGES):
            for option in ["default"] if stage == "publisher" else args.option or ["default"]:
                cores, (p50, p99, n) = run_stage(stage, bootstrap, args, option)
                extra = (
                    f", router {args.router_args}"
                    if args.router_args and stage != "publisher"
                    else ""
                )
                cpu = ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
                churn = f", {args.churn:g} new sessions/s" if args.churn else ""
                routers = sum(v for k, v in cores.items() if k.startswith("router"))
                per_k = 1000.0 / args.rate
                line = (
                    f"stage {stage:9s} option {option:10s} ({args.sessions} session topics, "
                    f"{active} active, {args.rate:.0f} events/s{churn}{extra}): CPU cores {cpu}"
                )
                if stage != "publisher":
                    line += (
                        f"; broker+router per 1,000 events/s "
                        f"{(cores.get('broker', 0.0) + routers) * per_k:.2f} cores; "
                        f"publish->routed p50 {p50:.0f} ms p99 {p99:.0f} ms ({n} events)"
                    )
                print(line, flush=True)
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
