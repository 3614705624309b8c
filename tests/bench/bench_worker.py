"""Worker throughput: max sustained events/s of ONE Faust worker (a script, no assertions).

1. Builds N simulator-shaped events (``streams.sim`` fleet: healthy, looping,
   stalled and budget-burning sessions, S at a time) with synthetic event times,
   encodes them with ``streams.serde.EventSerde`` and produces them into
   ``<prefix>.events`` with a plain confluent producer and the ``murmur2_random``
   partitioner (keys land where Faust/aiokafka would put them);
2. starts ``python -m streams.commands.worker`` (RocksDB store, fresh data dir) on
   that backlog, with all default detectors or ``--no-engine``;
3. polls the worker's ``/stats`` view and prints events/s from the first applied
   event to the last (so group join and table recovery are excluded), plus the
   worker's CPU seconds over that span.

``--profile`` runs the worker under cProfile and prints the top functions.

``--rate R --duration D`` (paced mode) measures the other end: the worker's CPU
per event when events trickle in, as from a live fleet (at 1,000 events/s over
1,000 sessions each event is the only one of its session in a commit interval, so
each pays a whole state flush).  The worker starts first; a warm-up of one event
per session is produced and awaited (group join, table creation: not timed); then
R events/s (``--sessions`` sessions, round-robin) are produced straight into
``<prefix>.events`` for D seconds.  It prints the worker's CPU µs per event over
the paced span (from the first paced event until one commit interval after all of
them were applied, so the flush of the last events counts), the changelog
records written per event (end offsets of the changelog topics), the worker's CPU
per second when idle (measured before the paced span), and ``uptime`` load.
``--py-spy`` samples the worker with py-spy over the paced span (``--format raw``
collapsed stacks next to the worker log), by default only the thread holding the
GIL (``--gil``): that is close to where the CPU goes.  ``--py-spy wall`` samples
every thread whatever it does; there a thread waiting to take the GIL back after
a socket write looks like time spent writing (aiokafka's fetch requests looked
about twice their CPU; docs/faust-notes.md "Avro decode, compiled").

Examples::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_worker.py \\
        --events 100000 --sessions 1000 --mode engine --mode no-engine
    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_worker.py \\
        --sessions 1000 --rate 1000 --duration 20 --mode engine
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pstats
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streams.broker import free_port  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.sim.events import fleet_events  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "bench"))
from procs import PySpy, cpu_seconds, spawn, stop, worker_args  # noqa: E402


def sim_events(n: int, sessions: int, seed: int = 0, prefix: str = "sim") -> list[TraceEvent]:
    """About ``n`` events of a simulated fleet with ``sessions`` sessions open at a time."""
    return fleet_events(n, sessions, seed=seed, prefix=prefix)


def produce(settings: Settings, events: list[TraceEvent]) -> float:
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    p = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    t0 = time.perf_counter()
    for ev in events:
        while True:
            try:
                p.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    return time.perf_counter() - t0


def _stats(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data
    except OSError:
        return None


def run_worker(
    settings: Settings, n: int, mode: str, profile: Path | None, timeout_s: float
) -> dict[str, Any]:
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    extra = ["--worker-id", f"bench-{mode}"] + (["--no-engine"] if mode == "no-engine" else [])
    proc = spawn(
        [*worker_args(settings.bootstrap, settings.prefix, data_dir, port), *extra],
        data_dir / "worker.log",
        profile=profile,
    )
    first: tuple[float, float, int] | None = None
    last: tuple[float, float, int] = (0.0, 0.0, 0)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}; see {data_dir}/worker.log")
            st = _stats(port)
            if st is not None:
                done = int(st["applied"]) + int(st["duplicates"])
                now, cpu = time.monotonic(), cpu_seconds(proc.pid)
                if done and first is None:
                    first = (now, cpu, done)
                last = (now, cpu, done)
                if done >= n:
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"timed out at {last[2]}/{n} events; see {data_dir}/worker.log")
    finally:
        stop(proc)
    assert first is not None
    span = last[0] - first[0]
    counted = last[2] - first[2]
    return {
        "mode": mode,
        "events": n,
        "timed_events": counted,
        "wall_s": round(span, 2),
        "events_per_s": round(counted / span) if span > 0 else None,
        "worker_cpu_s": round(last[1] - first[1], 2),
        "log": str(data_dir / "worker.log"),
    }


def paced_events(sessions: int, seed: int = 0) -> Iterator[TraceEvent]:
    """Endless events of ``sessions`` simulated sessions (the four kinds in turn),
    round-robin: one event of each session, then the next of each, and so on; a
    session whose script ends is replaced by a new one (a new id) in its slot."""
    from streams.sim.events import session_events
    from streams.sim.scenarios import SESSION_KINDS

    def new(slot: int, gen: int) -> Iterator[TraceEvent]:
        kind = SESSION_KINDS[slot % len(SESSION_KINDS)]
        return session_events(kind, seed + slot + gen, f"paced-{seed}-{slot:05d}-{gen}")

    streams = [new(i, 0) for i in range(sessions)]
    gens = [0] * sessions
    while True:
        for i in range(sessions):
            try:
                yield next(streams[i])
            except StopIteration:
                gens[i] += 1
                streams[i] = new(i, gens[i])
                yield next(streams[i])


def changelog_records(settings: Settings, tables: tuple[str, ...]) -> int:
    """Records in the changelog topics of ``settings`` so far (sum of high watermarks:
    the worker writes them without transactions, from offset 0 on a fresh prefix)."""
    from confluent_kafka import Consumer, TopicPartition

    from streams.topics import changelog_topic

    c = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "bench-watermarks"})
    try:
        total = 0
        for table in tables:
            topic = changelog_topic(settings, table)
            md = c.list_topics(topic, timeout=30).topics[topic]
            for p in md.partitions:
                total += c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        return total
    finally:
        c.close()


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of ``pid`` so far (tid -> user + system)."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_paced(
    settings: Settings,
    mode: str,
    sessions: int,
    rate: float,
    duration_s: float,
    commit_interval_s: float,
    py_spy: str | None,
    timeout_s: float,
) -> dict[str, Any]:
    """The paced run (module docstring): warm-up, idle CPU, then ``rate`` events/s."""
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="bench-worker-paced-"))
    extra = ["--worker-id", f"bench-{mode}", "--commit-interval", str(commit_interval_s)]
    extra += ["--no-engine"] if mode == "no-engine" else []
    proc = spawn(
        [*worker_args(settings.bootstrap, settings.prefix, data_dir, port), *extra],
        data_dir / "worker.log",
    )
    serde = EventSerde()
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "partitioner": "murmur2_random",
            # like the router's --batch-ms 20 transactions: the worker's fetches see
            # about 50 batches/s, not one per event
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    events = paced_events(sessions)

    def send(ev: TraceEvent) -> None:
        ev = dataclasses.replace(ev, timestamp_ms=time.time_ns() // 1_000_000)
        producer.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))

    def applied() -> int:
        st = _stats(port)
        return 0 if st is None else int(st["applied"]) + int(st["duplicates"])

    def wait_applied(target: int) -> None:
        deadline = time.monotonic() + timeout_s
        while applied() < target:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}; see {data_dir}/worker.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out at {applied()}/{target}; see {data_dir}/worker.log")
            time.sleep(0.05)

    spy: PySpy | None = None
    tables = ("sessions", "budgets", "minutes") + (("engines",) if mode == "engine" else ())
    try:
        for ev in itertools.islice(events, sessions):  # warm-up: one event per session
            send(ev)
        producer.flush(60)
        wait_applied(sessions)
        time.sleep(2 * commit_interval_s + 1)  # its flush and commit are done
        idle_cpu0, idle_t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(3.0)
        idle_cpu_per_s = (cpu_seconds(proc.pid) - idle_cpu0) / (time.monotonic() - idle_t0)
        log0 = changelog_records(settings, tables)
        if py_spy:
            spy = PySpy(proc.pid, data_dir / "worker.pyspy.txt", py_spy)
            spy.start()
        load_before = load_average()
        n = int(rate * duration_s)
        batches0 = int((_stats(port) or {}).get("batches", 0))
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        threads0 = thread_cpu(proc.pid)
        for i, ev in enumerate(itertools.islice(events, n)):
            due = t0 + i / rate
            wait = due - time.monotonic()
            if wait > 0:
                producer.poll(0)
                time.sleep(wait)
            while True:
                try:
                    send(ev)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(60)
        sent_s = time.monotonic() - t0
        wait_applied(sessions + n)
        applied_s = time.monotonic() - t0
        time.sleep(commit_interval_s + 0.5)  # the flush of the last events counts
        cpu = cpu_seconds(proc.pid) - cpu0
        threads = {t: c - threads0.get(t, 0.0) for t, c in thread_cpu(proc.pid).items()}
        main_thread = threads.pop(proc.pid, 0.0)
        busiest = sorted(threads.values(), reverse=True)[:3]
        span = time.monotonic() - t0
        if spy is not None:
            print("\n".join(spy.stop()), flush=True)
        records = changelog_records(settings, tables) - log0
        handled_batches = int((_stats(port) or {}).get("batches", 0)) - batches0
    finally:
        stop(proc)
        if spy is not None:
            spy.stop()  # (an exception before the span's end: still reaped)
    return {
        "mode": mode,
        "sessions": sessions,
        "rate": rate,
        "events": n,
        "produce_s": round(sent_s, 2),
        "applied_s": round(applied_s, 2),
        "span_s": round(span, 2),
        "worker_cpu_s": round(cpu, 2),
        "worker_cpu_us_per_event": round(1e6 * cpu / n, 1),
        "worker_cpu_us_per_event_minus_idle": round(1e6 * (cpu - idle_cpu_per_s * span) / n, 1),
        "idle_cpu_per_s": round(idle_cpu_per_s, 3),
        # the event loop thread; the others are Faust's consumer thread (aiokafka
        # fetches), RocksDB's and the web server's
        "main_thread_us_per_event": round(1e6 * main_thread / n, 1),
        "other_threads_us_per_event": [round(1e6 * c / n, 1) for c in busiest],
        "changelog_records_per_event": round(records / n, 2),
        # fetched partition batches the worker handled (one EventBatchHandler.handle each)
        "events_per_handled_batch": round(n / handled_batches, 1) if handled_batches else None,
        "load_before": load_before,
        "load_after": load_average(),
        "log": str(data_dir / "worker.log"),
        **({"py_spy": str(data_dir / "worker.pyspy.txt")} if py_spy else {}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=1_000, help="sessions open at a time")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument(
        "--mode", action="append", choices=("engine", "no-engine"), help="default: both"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile the worker, print the top")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--rate", type=float, help="paced mode: events/s (module docstring)")
    ap.add_argument("--duration", type=float, default=20.0, help="paced mode: seconds")
    ap.add_argument("--commit-interval", type=float, default=1.0, help="paced mode: worker's")
    ap.add_argument("--repeat", type=int, default=1, help="paced mode: runs per mode")
    ap.add_argument(
        "--py-spy",
        nargs="?",
        const="gil",
        choices=("gil", "wall"),
        help="paced mode: sample the worker with py-spy, the GIL holder only (default) "
        "or every thread (wall)",
    )
    ap.add_argument(
        "--json",
        metavar="PATH",
        help="also write every result printed as a JSON line to PATH, as a JSON list "
        "(bench_aims.py reads it)",
    )
    args = ap.parse_args()
    results: list[dict[str, Any]] = []

    def report(res: dict[str, Any]) -> None:
        print(json.dumps(res), flush=True)
        results.append(res)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))

    from streams.topics import ensure_worker_topics

    if args.rate:
        for _ in range(args.repeat):
            for mode in args.mode or ["engine"]:
                prefix = f"benchp-{uuid.uuid4().hex[:8]}"
                settings = Settings().with_(prefix=prefix).with_(events_partitions=args.partitions)
                ensure_worker_topics(settings)
                res = run_paced(
                    settings,
                    mode,
                    args.sessions,
                    args.rate,
                    args.duration,
                    args.commit_interval,
                    args.py_spy,
                    args.timeout,
                )
                report(res)
        return

    t0 = time.perf_counter()
    events = sim_events(args.events, args.sessions)
    gen_s = time.perf_counter() - t0
    n = len(events)
    for mode in args.mode or ["engine", "no-engine"]:
        # a fresh prefix (= consumer group and changelogs) per mode: a second worker in
        # the same group would start from the first one's committed offsets
        prefix = f"benchw-{uuid.uuid4().hex[:8]}"
        settings = Settings().with_(prefix=prefix).with_(events_partitions=args.partitions)
        ensure_worker_topics(settings)
        prod_s = produce(settings, events)
        print(
            f"prefix {prefix}: {n} events, {len({e.session_id for e in events})} sessions, "
            f"{args.partitions} partitions (generated {gen_s:.1f}s, produced {prod_s:.1f}s)",
            flush=True,
        )
        prof = Path(tempfile.mkdtemp()) / f"worker-{mode}.prof" if args.profile else None
        res = run_worker(settings, n, mode, prof, args.timeout)
        report(res)
        if prof is not None and prof.exists():
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(35)
            pstats.Stats(str(prof)).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
