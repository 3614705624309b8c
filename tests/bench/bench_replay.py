"""Replay throughput: events/s from Kafka through decode and the core.

Run: ``KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_replay.py [--events 100000]
[--sessions 4] [--profile]``

Produces ``--events`` synthetic events (tool calls/results with JSON payloads,
model steps with tokens, some failing runs so detectors fire) pre-encoded with
``EventSerde`` into ``--sessions`` session topics of a fresh prefix with a plain
confluent-kafka producer, then measures three passes over the same topics with
:class:`streams.replay.reader.TopicReader`:

* ``fetch``: consume only (no decode): the Kafka client's share;
* ``fetch+decode``: ``EventSerde.decode`` of every value;
* ``fetch+decode+core``: :func:`streams.replay.replay.replay_events` (the
  ``OfflineAnalyzer`` engines), i.e. ``trajectory replay``'s work minus output;
* the same with :class:`streams.replay.parallel.ParallelReplay` in 2 and
  ``--jobs`` processes (``trajectory replay --jobs N``), process start-up included.

The core passes run what ``trajectory replay`` runs by default: the live-ingest
checks (``IngestCheck``) on every record and no ``analyze --json`` records
(``--records`` builds them, as ``--output jsonl`` does).

Each line also prints CPU seconds per event (this process plus its reaped
children): on the shared machine wall-clock rates move with the load average
(printed first), CPU time per event much less.  A parallel line also says how
much of it the parent spent (merging the workers' outputs) and how busy the
``N`` cores were on average (CPU time / wall time / N: below 100 % is start-up,
the merge's tail, a worker waiting, or other processes on the machine).

``--ahead-rounds K`` then runs the ``fetch+decode+core`` pass K more times with
the reader decoding each record just before its event is handed on
(``TopicReader.DECODE_AHEAD = 1``, as before 2026-11-29) and K times with the
default slice, alternating in this one process, so the two are compared on the
same machine state (docs/replay.md "Decode ahead").

With ``--profile`` the last pass runs under cProfile and the top functions by
cumulative and own time are printed.  The topics are deleted at the end.
Not a test (pytest does not collect ``bench_*.py``); no assertion, it prints figures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from streams.core.events import Budget, TraceEvent  # noqa: E402

T0 = 1_700_000_000_000
TOOLS = ("bash", "read_file", "edit", "search", "run_tests")


def make_events(session_id: str, n: int, *, seed: int = 0) -> list[TraceEvent]:
    """``n`` events of one session: start, budget, then call/result/model-step cycles.

    Deterministic; every 7th cycle repeats a failing ``run_tests`` so error and
    loop detectors fire now and then, like real traffic.
    """
    out: list[TraceEvent] = [
        TraceEvent(
            "session_start",
            session_id,
            0,
            T0,
            agent_id="bench",
            metadata={"task": "fix src/app/core.py and its tests"},
        ),
        TraceEvent("budget", session_id, 1, T0, budget=Budget(max_tokens=50_000_000)),
    ]
    t = T0
    i = seed
    while len(out) < n:
        i += 1
        t += 700 + (i * 37) % 900
        failing = i % 7 in (0, 1)
        tool = "run_tests" if failing else TOOLS[(i * 3) % len(TOOLS)]
        cid = f"c{i}"
        out.append(
            TraceEvent(
                "tool_call",
                session_id,
                len(out),
                t,
                agent_id="bench",
                tool_name=tool,
                call_id=cid,
                input={"path": f"src/app/mod{i % 40}.py", "args": ["-x", str(i % 13)]},
            )
        )
        if len(out) >= n:
            break
        out.append(
            TraceEvent(
                "tool_result",
                session_id,
                len(out),
                t + 150,
                agent_id="bench",
                call_id=cid,
                is_error=failing,
                error_message=f"AssertionError at line {i % 97}" if failing else None,
                output={"rc": 1 if failing else 0, "stdout": f"ok {i}"},
                latency_ms=150,
            )
        )
        if len(out) >= n:
            break
        out.append(
            TraceEvent(
                "model_step",
                session_id,
                len(out),
                t + 300,
                agent_id="bench",
                input_tokens=1200 + i % 300,
                output_tokens=80,
                text="next step",
            )
        )
    return out[:n]


def produce_encoded(bootstrap: str, prefix: str, events_total: int, sessions: int) -> list[str]:
    """Create ``sessions`` topics and fill them with pre-encoded events; their names."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from streams.serde import EventSerde

    serde = EventSerde()
    per = events_total // sessions
    sids = [f"bench-{k}" for k in range(sessions)]
    topics = [f"{prefix}.session.{sid}" for sid in sids]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        fut.result(60)
    payloads = [
        [
            serde.encode(ev)
            for ev in make_events(sid, per + (1 if k < events_total % sessions else 0), seed=k)
        ]
        for k, sid in enumerate(sids)
    ]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for topic, sid, values in zip(topics, sids, payloads, strict=True):
        key = sid.encode()
        for value in values:
            while True:
                try:
                    producer.produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("bench: events not delivered")
    return topics


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(topics, operation_timeout=30).values():
        fut.result(60)


def _cpu_with_children() -> float:
    """CPU seconds of this process plus its reaped children (user + system)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--records",
        action="store_true",
        help="also build the analyze --json records (what --output jsonl does)",
    )
    parser.add_argument(
        "--ahead-rounds",
        type=int,
        default=0,
        metavar="K",
        help="also alternate the core pass K times each with DECODE_AHEAD 1 and the "
        "default (0: not)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=4,
        help="also run the replay in N processes (2 always runs; 0 adds nothing)",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write each pass's events/s and CPU us per event to PATH as JSON "
        "(bench_aims.py reads it)",
    )
    args = parser.parse_args()
    summary: dict[str, Any] = {"events": args.events, "load": os.getloadavg()[0], "passes": {}}

    from streams.replay.reader import IngestCheck, TopicReader
    from streams.replay.replay import replay_events
    from streams.serde import EventSerde
    from streams.settings import Settings

    prefix = "bench" + uuid.uuid4().hex[:10]
    began = time.monotonic()
    topics = produce_encoded(args.bootstrap, prefix, args.events, args.sessions)
    print(
        f"produced {args.events} events into {len(topics)} topics in "
        f"{time.monotonic() - began:.1f} s (prefix {prefix})"
    )
    try:

        def fetch_only() -> Any:
            r = TopicReader(args.bootstrap, topics, lambda b: b)
            n = sum(1 for _ in r.raw())
            return n, r

        def fetch_decode() -> Any:
            r = TopicReader(args.bootstrap, topics, EventSerde().decode)
            n = sum(1 for _ in r)
            return n, r

        # what ``trajectory replay`` (terminal output) runs: the live-ingest checks
        # on every record, no ``analyze --json`` records (only --output jsonl)
        check = IngestCheck(prefix, Settings().max_message_bytes)

        def fetch_decode_core() -> Any:
            r = TopicReader(args.bootstrap, topics, EventSerde().decode, check=check)
            result = replay_events(r, keep_records=args.records, prechecked=r.prechecked)
            return result.events, result

        rows = []
        print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        for name, fn in (
            ("fetch", fetch_only),
            ("fetch+decode", fetch_decode),
            ("fetch+decode+core", fetch_decode_core),
        ):
            t, c = time.perf_counter(), time.process_time()
            n, extra = fn()
            dt, cpu = time.perf_counter() - t, time.process_time() - c
            rows.append((name, n, cpu))
            summary["passes"][name] = {"events_per_s": n / dt, "cpu_us": cpu / n * 1e6}
            print(
                f"{name:<20} {n:>8} events  {dt:6.2f} s  {n / dt:>10,.0f} events/s  "
                f"cpu {cpu / n * 1e6:5.1f} us/event"
            )
            if name == "fetch+decode+core":
                det = sum(len(s.patterns) for s in extra.sessions.values())
                ass = sum(len(s.assessments) for s in extra.sessions.values())
                print(f"{'':<20} {det} pattern detections, {ass} assessments")
        default_ahead = TopicReader.DECODE_AHEAD
        for _ in range(args.ahead_rounds):
            for ahead in (1, default_ahead):
                TopicReader.DECODE_AHEAD = ahead
                c = time.process_time()
                n, _ = fetch_decode_core()
                cpu = time.process_time() - c
                label = f"  decode ahead {ahead}"
                print(f"{label:<20} {n:>8} events  cpu {cpu / n * 1e6:5.1f} us/event")
        TopicReader.DECODE_AHEAD = default_ahead
        from streams.replay.parallel import ParallelReplay, start_method

        plan = TopicReader(args.bootstrap, topics, lambda b: b).plan()
        for jobs in sorted({2, args.jobs} - {0}):
            method = start_method()  # what trajectory replay --jobs picks here
            t, c, own = time.perf_counter(), _cpu_with_children(), time.process_time()
            run = ParallelReplay(
                args.bootstrap, plan, jobs=jobs, check=check, keep_records=args.records
            )
            run.start()
            merged, _, _ = run.wait()
            dt, cpu = time.perf_counter() - t, _cpu_with_children() - c
            own = time.process_time() - own
            n = merged.events
            name = f"... {jobs} processes"
            summary["passes"][f"jobs{jobs}"] = {"events_per_s": n / dt, "cpu_us": cpu / n * 1e6}
            print(
                f"{name:<20} {n:>8} events  {dt:6.2f} s  "
                f"{n / dt:>10,.0f} events/s  cpu {cpu / n * 1e6:5.1f} "
                f"us/event  ({method}, incl. process start-up; parent {own / n * 1e6:.1f} "
                f"us/event, cores busy {cpu / dt / jobs:.0%})"
            )
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1))
        f, d, c = (r[2] for r in rows)
        print(
            f"share of cpu time: fetch {f / c:.0%}, decode {(d - f) / c:.0%}, "
            f"core {(c - d) / c:.0%}"
        )
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            fetch_decode_core()
            prof.disable()
            for key in ("cumulative", "tottime"):
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(18)
                print(f"--- cProfile by {key} ---")
                print("\n".join(buf.getvalue().splitlines()[6:30]))
    finally:
        delete_topics(args.bootstrap, topics)


if __name__ == "__main__":
    main()
