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

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_worker.py \\
        --events 100000 --sessions 1000 --mode engine --mode no-engine
"""

from __future__ import annotations

import argparse
import json
import pstats
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streams.broker import free_port  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.sim.events import fleet_events  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "bench"))
from procs import cpu_seconds, spawn, stop, worker_args  # noqa: E402


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
    args = ap.parse_args()

    from streams.topics import ensure_worker_topics

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
        print(json.dumps(res), flush=True)
        if prof is not None and prof.exists():
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(35)
            pstats.Stats(str(prof)).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
