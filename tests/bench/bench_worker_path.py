"""The worker's per-event path in one process, no broker: CPU microseconds per stage.

A script, not a test (prints figures, asserts nothing).  ``bench_worker.py``
measures the real worker on a broker, but on a shared machine its events/s moves
with the load; this runs the same code (``EventBatchHandler`` over
``EventProcessor`` with dict tables and an ``OutputEncoder``) on the same
simulator workload (``streams.sim``: looping, stalled, budget-burning and healthy
sessions, S open at a time), so a change to the hot path shows as CPU us/event:

* ``handler``: ``EventBatchHandler.handle`` on fetched-size batches (decode, the
  router's event checks, ``check_storable``, the engine, table values, output
  encoding, metrics), with a send that only collects the records;
* ``flush``: what a commit does with the write-behind state every
  ``--commit-every`` events (plan which engines are due, ``--engine-wait``
  commits; take the dirty values, snapshot the due engines, encode them; writes
  into dicts);
* ``flush:`` the same flush split into its stages (taking the dirty values, the
  engine snapshots, the canonical engine-state encode, its deflate, the
  counters/budgets/minutes values) and how many engine states were written per
  event (1.0 when every event lands in a session the last flush already wrote:
  the low-rate case, ``--commit-every`` about the number of open sessions);
* then each stage alone over the same events, so the handler total is
  attributed: decode, event checks, ``check_storable``, the processor's tables
  without the engine (counters, budget, minute, lineage; includes
  ``check_storable``), engine alone (``SessionEngine.on_event``, all default
  detectors), output encoding, and what is left of the handler total.

What it leaves out (see bench_worker.py and bench_latency.py): aiokafka's fetch,
the producer's send of outputs and changelogs, RocksDB writes and the commit.

Example::

    python tests/bench/bench_worker_path.py --events 50000 --sessions 1000 [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streams.commands.worker import WORKER_GC_THRESHOLDS  # noqa: E402
from streams.core.config import EngineConfig  # noqa: E402
from streams.core.engine import SessionEngine  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.router.validate import event_error  # noqa: E402
from streams.serde import EventSerde  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.sim.events import fleet_events  # noqa: E402
from streams.topics import worker_output_topics  # noqa: E402
from streams.worker.batch import EventBatchHandler  # noqa: E402
from streams.worker.metrics import WorkerMetrics  # noqa: E402
from streams.worker.outputs import OutputEncoder  # noqa: E402
from streams.worker.processor import (  # noqa: E402
    BytesTable,
    EventProcessor,
    TableName,
    check_storable,
    write_all,
)

PARTITIONS = 3


@dataclass(frozen=True, slots=True)
class Rec:
    """A fetched record as the handler reads it (aiokafka's ConsumerRecord has these)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def records(events: list[TraceEvent], topic: str) -> list[Rec]:
    serde = EventSerde()
    out = []
    for i, ev in enumerate(events):
        key = ev.session_id.encode()
        # crc32, not hash(): str hashes are salted per process, which made the
        # batches (and so each flush's values and the output order) differ per run
        out.append(Rec(topic, zlib.crc32(key) % PARTITIONS, i, key, serde.encode(ev)))
    return out


def batches(recs: list[Rec], size: int) -> list[list[Rec]]:
    """Per-partition batches of about ``size`` records, in arrival order (as a fetch gives)."""
    out: list[list[Rec]] = []
    for start in range(0, len(recs), size * PARTITIONS):
        chunk = recs[start : start + size * PARTITIONS]
        for p in range(PARTITIONS):
            b = [r for r in chunk if r.partition == p]
            if b:
                out.append(b)
    return out


def cpu_us(fn: Callable[[], Any], n: int) -> float:
    gc.collect()
    t0 = time.process_time()
    fn()
    return 1e6 * (time.process_time() - t0) / n


def make_handler(
    processor: EventProcessor, cfg: EngineConfig, sent: list[Any] | None
) -> EventBatchHandler:
    """The worker's batch handler with an in-memory send (kept in ``sent`` if given)."""
    settings = Settings()

    async def send(topic: str, key: bytes | None, value: bytes, headers: Any) -> None:
        if sent is not None:
            sent.append((topic, key, value, headers))

    return EventBatchHandler(
        topic=settings.events_topic,
        processor=processor,
        decoder=EventSerde().decode,
        send=send,
        output_topics=worker_output_topics(settings),
        dlq_topic=settings.dlq_topic,
        encoder=OutputEncoder(settings, cfg),
        metrics=WorkerMetrics(),
    )


def run_handler(
    recs: list[Rec], batch: int, commit_every: int, engine_wait: float = 0.0
) -> tuple[float, float, int]:
    """(handler us/event, flush us/event, outputs) over ``recs``; each flush takes
    the engines ``plan_engines`` makes due (``engine_wait`` commits, one unit of its
    clock per commit), as the worker's commit does."""
    tables: dict[str, dict[bytes, bytes]] = {k: {} for k in ("s", "b", "m", "e")}
    cfg = EngineConfig()
    processor = EventProcessor(tables["s"], tables["b"], tables["m"], tables["e"], cfg)
    sent: list[Any] = []
    handler = make_handler(processor, cfg, sent)
    loop = asyncio.new_event_loop()
    named: dict[TableName, BytesTable] = {
        "sessions": tables["s"],
        "budgets": tables["b"],
        "minutes": tables["m"],
        "engines": tables["e"],
    }
    handle_s = flush_s = 0.0
    since = commits = 0
    gc.collect()
    for b in batches(recs, batch):
        t0 = time.process_time()
        loop.run_until_complete(handler.handle(b))
        handle_s += time.process_time() - t0
        since += len(b)
        if since >= commit_every:
            since = 0
            commits += 1
            t0 = time.process_time()
            due = processor.plan_engines(float(commits), engine_wait).due
            pending = processor.take_dirty(engines=False, later=due)
            pending += processor.take_engines(due)
            write_all([w.encode() for w in pending], named)
            processor.written(pending)
            processor.evict()
            flush_s += time.process_time() - t0
    t0 = time.process_time()
    processor.flush()
    flush_s += time.process_time() - t0
    loop.close()
    n = len(recs)
    return 1e6 * handle_s / n, 1e6 * flush_s / n, len(sent)


def flush_stages(
    recs: list[Rec], batch: int, commit_every: int, engine_wait: float = 0.0
) -> dict[str, float]:
    """Where the flush's CPU goes (us per event): the handler runs as in
    :func:`run_handler`, and every ``commit_every`` events the dirty values are taken
    and encoded stage by stage as the worker's commit does (``plan_engines`` with
    ``engine_wait`` commits, each commit one unit of its clock; ``take_dirty``
    without the due engines, then ``take_engines``: the engine snapshots; then
    ``PendingWrite.encode`` split into the canonical engine-state encode, its
    deflate and the small table values)."""
    from streams.core.engine import SessionState
    from streams.core.statecodec import deflate, encode_state

    cfg = EngineConfig()
    processor = EventProcessor({}, {}, {}, {}, cfg)
    handler = make_handler(processor, cfg, None)
    loop = asyncio.new_event_loop()
    cost = dict.fromkeys(("take", "snapshot", "encode", "compress", "small"), 0.0)
    sessions = 0
    commits = 0

    def flush(wait: float) -> None:
        nonlocal sessions, commits
        commits += 1
        clock = time.process_time
        t0 = clock()
        ids = list(processor.plan_engines(float(commits), wait).due)
        pending = processor.take_dirty(engines=False, later=ids)
        t1 = clock()
        pending += processor.take_engines(ids)
        t2 = clock()
        cost["take"] += t1 - t0
        cost["snapshot"] += t2 - t1
        sessions += len(ids)
        for p in pending:
            t0 = clock()
            if isinstance(p.value, SessionState):
                raw = encode_state(p.value)
                t1 = clock()
                deflate(raw, 1)
                cost["encode"] += t1 - t0
                cost["compress"] += clock() - t1
            else:
                p.value.encode()
                cost["small"] += clock() - t0
        processor.written(pending)
        processor.evict()

    since = 0
    gc.collect()
    for b in batches(recs, batch):
        loop.run_until_complete(handler.handle(b))
        since += len(b)
        if since >= commit_every:
            since = 0
            flush(engine_wait)
    flush(0.0)  # the stop: every engine
    loop.close()
    n = len(recs)
    out = {f"flush: {k}": 1e6 * v / n for k, v in cost.items()}
    out["flush: engines written per event"] = sessions / n
    return out


#: The processor's own per-event work: session counters (with the event's canonical
#: JSON text, check_storable), budget, minute, lineage and recency bookkeeping.
TABLES = "tables (EventProcessor.apply, no engine)"
#: The stages the handler total is split into (the rest is printed as not attributed).
TOP_STAGES = (
    "avro decode (EventSerde.decode)",
    "event checks (event_error)",
    TABLES,
    "engine alone (SessionEngine.on_event)",
    "output encoding (OutputEncoder.records)",
)


def stages(events: list[TraceEvent], recs: list[Rec]) -> dict[str, float]:
    """Each stage of the handler alone over the same events (CPU us/event)."""
    n = len(events)
    serde = EventSerde()
    values = [r.value for r in recs]
    out: dict[str, float] = {}
    out["avro decode (EventSerde.decode)"] = cpu_us(
        lambda: [serde.decode(v) for v in values if v is not None], n
    )
    out["event checks (event_error)"] = cpu_us(
        lambda: [event_error(e, e.session_id, "t") for e in events], n
    )
    out["check_storable"] = cpu_us(lambda: [check_storable(e) for e in events], n)
    no_engine = EventProcessor({}, {}, {}, None, EngineConfig())
    out[TABLES] = cpu_us(lambda: [no_engine.apply(e, 0) for e in events], n)
    cfg = EngineConfig()
    engines: dict[str, SessionEngine] = {}
    outs: list[Any] = []

    def engine() -> None:
        for e in events:
            eng = engines.get(e.session_id)
            if eng is None:
                eng = engines[e.session_id] = SessionEngine.create(e.session_id, cfg)
            outs.append(eng.on_event(e))

    out["engine alone (SessionEngine.on_event)"] = cpu_us(engine, n)
    out["  of which engine creation"] = cpu_us(
        lambda: [SessionEngine.create(s, cfg) for s in {e.session_id for e in events}], n
    )
    encoder = OutputEncoder(Settings(), cfg)

    def encode() -> None:
        for e, o in zip(events, outs, strict=True):
            encoder.records(e, o, lambda sid=e.session_id: engines[sid].snapshot())

    out["output encoding (OutputEncoder.records)"] = cpu_us(encode, n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--sessions", type=int, default=1_000, help="sessions open at a time")
    ap.add_argument("--batch", type=int, default=500, help="records per fetched batch")
    ap.add_argument(
        "--commit-every", type=int, default=20_000, help="events between flushes (~1 s)"
    )
    ap.add_argument(
        "--engine-wait",
        type=float,
        default=5.0,
        help="commits an engine waits (the worker's --engine-flush-interval "
        "over its 1 s commit; default 5; 0: every engine at every commit, as before)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the handler run")
    ap.add_argument("--profile", action="store_true", help="cProfile one handler run")
    args = ap.parse_args()
    # the worker's collector settings (streams/commands/worker.py): with CPython's
    # defaults, full collections over the engines' objects cost more than decoding
    gc.set_threshold(*WORKER_GC_THRESHOLDS)  # as the worker does
    events = fleet_events(args.events, args.sessions, seed=0, prefix="sim")
    recs = records(events, Settings().events_topic)
    n = len(events)
    print(f"{n} events, {len({e.session_id for e in events})} sessions, batches of {args.batch}")
    best: tuple[float, float, int] | None = None
    for _ in range(args.repeat):
        res = run_handler(recs, args.batch, args.commit_every, args.engine_wait)
        if best is None or res[0] + res[1] < best[0] + best[1]:
            best = res
    assert best is not None
    print(f"  {'handler (EventBatchHandler.handle)':<42} {best[0]:8.1f} us/event")
    print(f"  {'flush (take + snapshot + encode)':<42} {best[1]:8.1f} us/event")
    print(f"  {'handler + flush':<42} {best[0] + best[1]:8.1f} us/event ({best[2]} outputs)")
    for name, value in flush_stages(recs, args.batch, args.commit_every, args.engine_wait).items():
        if name.endswith("per event"):
            print(f"  {name:<42} {value:8.2f}")
        else:
            print(f"  {name:<42} {value:8.1f} us/event")
    split = stages(events, recs)
    for name, us in split.items():
        print(f"  {name:<42} {us:8.1f} us/event")
    rest = best[0] - sum(split[k] for k in TOP_STAGES)
    print(f"  {'handler not attributed to a stage':<42} {rest:8.1f} us/event")
    print(
        "    (the handler's own loop, metrics, send tuples; and each stage costing more\n"
        "     on fresh, cache-cold objects than alone over the same warm events)"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run_handler(recs, args.batch, args.commit_every)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()
