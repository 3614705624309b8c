"""Per-commit state flush cost of the worker's engine table, without Kafka (a
script, no assertions): snapshot(), canonical encode, deflate, per session per commit.

It replays what the paced worker bench does to the core (``bench_worker.py --rate
R --sessions S``): S simulated sessions (``bench_worker.paced_events``: the four
kinds in turn, round-robin, one event of each session per round), and after each
round every session the round touched is flushed the way the worker flushes it
(``SessionEngine.snapshot()``, then ``encode_state``, then the codec's deflate at
level 1, ISA-L's or else zlib's, as ``encode_state(..., compress=True)`` does).
The worker's GC thresholds are set (streams/commands/worker.py), as a long-lived
heap of S sessions makes the collector part of the cost.  The first ``--warmup``
rounds are not timed.

``--flush-every N`` flushes each session every N rounds instead, staggered
(the worker's ``--engine-flush-interval`` of 30 s at one event per session per
second is 30); ``--workload closed-loop`` runs ``bench_latency.py``'s sessions
instead (looping, stalled and budget-burning ones that never end, so their
windows stay full); ``--no-memo`` encodes without the per-session codec memo the
worker keeps (``statecodec.EncodeMemo``), through the shared cache alone.

It prints process CPU µs per session-commit for each step, the state's size
(canonical JSON and deflated bytes), which parts of a state hold its bytes, the
peak RSS and ``uptime`` load.  Examples::

    python tests/bench/bench_statecodec.py --sessions 1000 --rounds 30
    python tests/bench/bench_statecodec.py --workload closed-loop --sessions 1000 \
        --warmup 180 --rounds 240 --flush-every 30 [--no-memo]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_worker import paced_events

from streams.commands.worker import WORKER_GC_THRESHOLDS
from streams.core.config import EngineConfig
from streams.core.engine import SessionEngine, SessionState
from streams.core.events import TraceEvent
from streams.core.statecodec import EncodeMemo, deflate, encode_state, to_canonical
from streams.sim.events import session_events

#: ``bench_latency.py``'s session kinds (its ``KINDS``): long-running, full windows.
CLOSED_LOOP_KINDS = ("looping", "stalled", "budget_burner")


def closed_loop_events(sessions: int) -> Iterator[TraceEvent]:
    """One event of each of ``sessions`` endless sessions per round, round-robin."""
    streams = [
        session_events(CLOSED_LOOP_KINDS[i % 3], i, f"lat-{i}")  # type: ignore[arg-type]
        for i in range(sessions)
    ]
    while True:
        for stream in streams:
            yield next(stream)


def parts(states: list[SessionState]) -> dict[str, int]:
    """Mean canonical bytes of the biggest parts of ``states`` (analysis fields and
    each detector's snapshot separately)."""
    sizes: Counter[str] = Counter()
    for st in states:
        for name in ("history", "current", "observer_states", "budget"):
            sizes[name] += len(to_canonical(getattr(st, name)))
        analysis = st.analysis
        for name in analysis.__dataclass_fields__:
            if name != "detectors":
                sizes[f"analysis.{name}"] += len(to_canonical(getattr(analysis, name)))
        for name, snap in analysis.detectors:
            sizes[f"detector.{name}"] += len(to_canonical(snap))
    return {k: v // len(states) for k, v in sizes.most_common(10)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=30, help="commits per session")
    ap.add_argument("--warmup", type=int, default=5, help="untimed rounds first")
    ap.add_argument(
        "--flush-every",
        type=int,
        default=1,
        help="rounds between two flushes of a session, staggered (30: the worker's 30 s "
        "flush interval at one event per session per second; default 1)",
    )
    ap.add_argument(
        "--workload",
        choices=("paced", "closed-loop"),
        default="paced",
        help="paced: bench_worker.py --rate's sessions (the four kinds, ending and "
        "restarting); closed-loop: bench_latency.py's never-ending sessions",
    )
    ap.add_argument(
        "--memo",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a codec memo per session, as the worker keeps (default); --no-memo: "
        "the shared cache alone",
    )
    args = ap.parse_args()
    if args.flush_every < 1:
        ap.error(f"--flush-every {args.flush_every}: give 1 or more rounds")
    if args.rounds <= args.warmup:
        ap.error(
            f"--rounds {args.rounds} with --warmup {args.warmup}: the warm-up rounds are "
            "part of --rounds, so nothing would be timed; give more rounds than warm-up ones"
        )
    gc.set_threshold(*WORKER_GC_THRESHOLDS)  # as the worker does
    cfg = EngineConfig()
    engines: dict[str, SessionEngine] = {}
    memos: dict[str, EncodeMemo] = {}
    events = (
        paced_events(args.sessions)
        if args.workload == "paced"
        else closed_loop_events(args.sessions)
    )
    spent = {"snapshot": 0.0, "encode": 0.0, "deflate": 0.0}
    json_sizes: list[int] = []
    deflated: list[int] = []
    flushes = 0
    clock = time.process_time
    for rnd in range(args.rounds):
        touched: dict[str, SessionEngine] = {}
        for i in range(args.sessions):
            ev = next(events)
            engine = engines.get(ev.session_id)
            if engine is None:
                engine = engines[ev.session_id] = SessionEngine.create(ev.session_id, cfg)
            engine.on_event(ev)
            if (rnd + i) % args.flush_every == 0:
                touched[ev.session_id] = engine
        timed = rnd >= args.warmup
        for sid, engine in touched.items():
            memo = memos.setdefault(sid, EncodeMemo()) if args.memo else None
            t0 = clock()
            state = engine.snapshot()
            t1 = clock()
            data = encode_state(state, memo=memo)
            t2 = clock()
            packed = deflate(data, 1)
            t3 = clock()
            if timed:
                spent["snapshot"] += t1 - t0
                spent["encode"] += t2 - t1
                spent["deflate"] += t3 - t2
                json_sizes.append(len(data))
                deflated.append(len(packed) + 1)
                flushes += 1
    live = [e.snapshot() for e in engines.values() if e.last_seq >= 0][:2000]
    report = {
        "workload": args.workload,
        "sessions": args.sessions,
        "rounds": args.rounds,
        "flush_every": args.flush_every,
        "memo": args.memo,
        "flushes": flushes,
        **{f"{k}_us": round(v / flushes * 1e6, 1) for k, v in spent.items()},
        "flush_us": round(sum(spent.values()) / flushes * 1e6, 1),
        "json_bytes_mean": round(statistics.mean(json_sizes)),
        "json_bytes_max": max(json_sizes),
        "deflated_bytes_mean": round(statistics.mean(deflated)),
        "parts_bytes_mean": parts(live),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
