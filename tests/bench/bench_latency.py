"""Live-detection latency: SDK publish -> router -> worker -> assessment subscriber.

A script, not a test (prints figures, asserts nothing).  On a fresh topic prefix:

1. uses the broker at ``$KAFKA_BOOTSTRAP`` (default 127.0.0.1:9092), or starts a
   :class:`~streams.broker.LocalBroker` there if none answers;
2. starts ``python -m streams.commands.worker`` (RocksDB, fresh data dir) and
   creates the session topics of ``--sessions`` sessions up front through the SDK
   (``Publisher.ensure_session_topics``; the time is printed separately);
3. for each ``--batch-ms`` value: starts ``python -m streams.commands.router
   --batch-ms B``, opens an :class:`~streams.sdk.subscriber.AssessmentSubscriber`
   (start=latest), starts every session (warm-up: until the worker applied all
   session_start events, which also proves the router picked up every topic),
   then for each ``--rate``: publishes that many events/s for ``--duration`` s,
   each session a simulated pathological agent (looping / stalled /
   budget_burner scripts from ``streams.sim``, so assessments are produced),
   and waits for the worker to drain;
4. prints per (batch-ms, rate): events published and the rate achieved, the
   worker's applied rate during the phase and its drain time (did it keep up?),
   assessments received, and latency p50/p95/p99/max; then the same latency split
   into hops (``StageProbe``: publish -> routed -> assessed -> delivered) and the
   CPU each process used over the phase (broker, router, worker, this process),
   which tells whether the machine, not a stage, was the limit.

Latency of one assessment = subscriber receive wall time - the assessment's
``timestamp_ms``.  For an event-triggered assessment that is the triggering
event's ``timestamp_ms`` (``SessionEngine``: ``generated_at_ms`` = the event
time, never behind the session's previous event), which the SDK sets from the
wall clock (``time.time_ns() // 1e6``) when the event is published.  Same machine,
same clock.  Timer-triggered assessments are left out (their time is the
worker's clock, not a publish time).

``--age EVENTS`` publishes that many more events per session after the warm-up
and waits for the worker, so the phases measure sessions with full trajectory
windows (a long-running agent's; a flush re-encodes the whole window) instead of
fresh ones.  ``--age 150`` adds ~50 s for 1,000 sessions.  ``--settle SECONDS``
(30) runs each phase's load that long unmeasured first: the warm-up and ``--age``
leave many engine states due at once, and a phase that caught that wave wrote up
to 1.6x the steady number of them (the worker's figure moved by ~100 µs per event).

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_latency.py \\
        --rate 1000 --rate 5000 --sessions 1000 --duration 20 --batch-ms 100 --batch-ms 20

``--broker-jfr DIR`` records the broker JVM with Java Flight Recorder over each
phase and prints its hottest frames (self and inclusive): at 1,000 live session
topics most of the broker's CPU per event is fetch handling per partition
(docs/kafka-notes.md).  The recording's own overhead counts in the broker's CPU
figure of that phase (sampling: a few per cent).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streams.broker import free_port, parse_bootstrap  # noqa: E402
from streams.sdk import Publisher  # noqa: E402
from streams.sdk.subscriber import AssessmentSubscriber  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.sim.driver import apply_action  # noqa: E402
from streams.sim.scenarios import session_script  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "bench"))
from procs import (  # noqa: E402
    BrokerProfile,
    PySpy,
    broker_pid,
    broker_unless_running,
    cpu_seconds,
    peak_rss_mb,
    spawn,
    stop,
    thread_cpu_seconds,
    tree_cpu_seconds,
    worker_args,
)

KINDS = ("looping", "stalled", "budget_burner")


def delete_prefix_topics(bootstrap: str, prefix: str) -> None:
    """Delete this run's topics (its prefix is unique): thousands of leftover session
    topics slow a shared dev broker down for everyone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    mine = [t for t in admin.list_topics(timeout=20).topics if t.startswith(f"{prefix}")]
    mine = [t for t in mine if t.startswith((f"{prefix}.", f"{prefix}-"))]
    for fut in admin.delete_topics(mine, operation_timeout=60).values():
        fut.result(timeout=120)
    print(f"deleted {len(mine)} topics of prefix {prefix}", flush=True)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def scrape(url: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    """The Prometheus samples at ``url`` whose line starts with one of ``prefixes``."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefixes):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def worker_metrics(base: str) -> dict[str, float]:
    """Samples of the worker's metrics: processing sum/count, event-time lag buckets,
    engine flushes and the CPU seconds spent encoding state at flushes."""
    return scrape(
        f"{base}/metrics",
        (
            "trajectory_worker_event_processing_seconds_sum ",
            "trajectory_worker_event_processing_seconds_count ",
            "trajectory_worker_event_time_lag_seconds_bucket{",
            "trajectory_worker_engine_flushes_total ",
            "trajectory_worker_state_encode_cpu_seconds_total ",
        ),
    )


def router_commits(port: int) -> tuple[float, float, float]:
    """(transaction seconds sum, commit seconds sum, commits) of the router; commits are
    transactions (exactly-once) or offset commits (at-least-once, no transactions)."""
    vals = scrape(
        f"http://127.0.0.1:{port}/metrics",
        (
            "trajectory_router_transaction_seconds_sum ",
            "trajectory_router_commit_seconds_sum ",
            "trajectory_router_transactions_total ",
            "trajectory_router_offset_commits_total ",
        ),
    )
    return (
        vals["trajectory_router_transaction_seconds_sum"],
        vals["trajectory_router_commit_seconds_sum"],
        vals["trajectory_router_transactions_total"]
        + vals.get("trajectory_router_offset_commits_total", 0.0),
    )


def lag_quantile(before: dict[str, float], after: dict[str, float], q: float) -> str:
    """Upper bucket bound (ms) under which ``q`` of the phase's events were processed:
    publish -> applied by the worker (its event-time lag histogram)."""
    prefix = 'trajectory_worker_event_time_lag_seconds_bucket{le="'
    rows = []
    for name, v in after.items():
        if name.startswith(prefix):
            le = name[len(prefix) : -2]
            rows.append((float(le), v - before.get(name, 0.0)))
    rows.sort()
    total = rows[-1][1] if rows else 0.0
    for le, cum in rows:
        if total and cum >= q * total:
            return "inf" if le == float("inf") else f"{le * 1000:.0f}"
    return "n/a"


def applied(base: str) -> int:
    return int(get_json(f"{base}/stats")["applied"])


def wait_applied(base: str, target: int, timeout_s: float, proc: subprocess.Popen[bytes]) -> float:
    """Seconds until the worker applied ``target`` events (inf on timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"worker exited with {proc.returncode}")
        try:
            if applied(base) >= target:
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.1)
    return float("inf")


class Agent:
    """One simulated session: its SDK session and its infinite script."""

    def __init__(self, session: Any, kind: str, seed: str) -> None:
        self.session = session
        self.script = session_script(kind, seed)  # type: ignore[arg-type]
        self.call_ids: dict[int, str] = {}

    def step(self) -> None:
        apply_action(self, next(self.script))


@dataclass
class Received:
    """Assessments the subscriber delivered: (receive ms, assessment ms, session, seq)."""

    rows: list[tuple[int, int, str, int]] = field(default_factory=list)
    timer: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, rec: Any) -> None:
        now = time.time_ns() // 1_000_000
        if getattr(rec, "trigger", "event") != "event":
            with self.lock:
                self.timer += 1
            return
        with self.lock:
            self.rows.append((now, int(rec.timestamp_ms), rec.session_id, int(rec.seq)))


class StageProbe:
    """Where the milliseconds go: Kafka append times of each hop, joined per (session, seq).

    Reads ``<prefix>.events`` and ``<prefix>.assessments`` from their ends (read
    uncommitted: the moment a record is appended, before any transaction commits)
    and keeps, per (session, seq), when it saw the routed event (its own receive
    time: the router keeps the SDK's record timestamp, so ``CreateTime`` would not
    tell) and the assessment's ``CreateTime`` (the worker's send).  With the event's
    own ``timestamp_ms`` (the SDK publish) and the subscriber's receive time an
    assessment's latency splits into publish -> routed -> assessed -> delivered;
    "routed" includes this probe's own fetch, like "delivered" includes the
    subscriber's.
    """

    def __init__(self, settings: Any) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        from streams.serde import AssessmentSerde, EventSerde

        self._events_topic = settings.events_topic
        self._event_serde = EventSerde("single-object")
        self._assessment_serde = AssessmentSerde("single-object")
        self.routed: dict[tuple[str, int], int] = {}
        self.assessed: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        #: native id of the probe's thread (its CPU is not part of any stage)
        self.tid: int | None = None
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap,
                "group.id": f"stage-probe-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": 10,
            }
        )
        tps = []
        for topic in (settings.events_topic, settings.assessments_topic):
            md = self._consumer.list_topics(topic, timeout=30).topics[topic]
            tps += [TopicPartition(topic, p, OFFSET_END) for p in md.partitions]
        self._consumer.assign(tps)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        while not self._stop.is_set():
            first = self._consumer.poll(0.1)  # consume(n, t) would wait t for n messages
            if first is None:
                continue
            for msg in [first, *self._consumer.consume(500, 0)]:
                if msg.error() or msg.value() is None:
                    continue
                if msg.topic() == self._events_topic:
                    ev = self._event_serde.decode(msg.value())
                    self.routed[(ev.session_id, ev.seq)] = time.time_ns() // 1_000_000
                else:
                    a = self._assessment_serde.decode(msg.value())
                    if a.trigger == "event":
                        self.assessed[(a.session_id, a.seq)] = msg.timestamp()[1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def split(self, rows: list[tuple[int, int, str, int]]) -> str:
        """p50/p99 of each hop over the delivered assessments both probes saw."""
        hops: tuple[list[int], list[int], list[int]] = ([], [], [])
        for recv, published, sid, seq in rows:
            routed = self.routed.get((sid, seq))
            assessed = self.assessed.get((sid, seq))
            if routed is None or assessed is None:
                continue
            hops[0].append(routed - published)
            hops[1].append(assessed - routed)
            hops[2].append(recv - assessed)
        names = ("publish->routed", "routed->assessed", "assessed->delivered")
        return (
            "; ".join(
                f"{n} p50 {pct(h, 0.5):.0f} p99 {pct(h, 0.99):.0f}"
                for n, h in zip(names, hops, strict=True)
            )
            + f" (ms, {len(hops[0])} joined)"
        )


class CpuSampler:
    """``--trace``: every 100 ms, the cores each process and the whole machine used
    (``/proc``), with the wall time, to a JSON-lines file: a slow assessment can then
    be set against what the CPU did meanwhile (ours, or other processes')."""

    def __init__(self, path: Path, pids: dict[str, int], every_s: float = 0.1) -> None:
        self._file = path.open("a")
        self._pids = pids
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def machine_seconds() -> float:
        """Busy CPU seconds of the whole machine so far (all processes, all users)."""
        f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        busy = sum(int(x) for x in f[:8]) - int(f[3]) - int(f[4])  # minus idle, iowait
        return busy / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def runqueue_wait_seconds(pid: int) -> float:
        """Seconds the threads of ``pid`` were runnable but waiting for a core, so far
        (``/proc/<pid>/task/*/schedstat``, second field): CPU starvation, measured."""
        total = 0
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
        return total / 1e9

    def _sample(self) -> dict[str, float]:
        out = {k: cpu_seconds(p) for k, p in self._pids.items()}
        out["bench"] = cpu_seconds(os.getpid())
        out["machine"] = self.machine_seconds()
        for k, p in self._pids.items():
            out[f"{k}_wait"] = self.runqueue_wait_seconds(p)
        return out

    def _run(self) -> None:
        prev, t_prev = self._sample(), time.time()
        while not self._stop.wait(self._every):
            cur, now = self._sample(), time.time()
            dt = now - t_prev
            row = {k: round((cur[k] - prev[k]) / dt, 2) for k in cur}
            ours = sum(v for k, v in row.items() if k != "machine" and not k.endswith("_wait"))
            row["others"] = round(row["machine"] - ours, 2)
            row["t"] = round(now * 1000)
            self._file.write(json.dumps(row) + "\n")
            prev, t_prev = cur, now

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._file.close()


def tail_report(
    rows: list[tuple[int, int, str, int]],
    probe: StageProbe,
    trace_path: Path,
    cpu_path: Path,
    dump_path: Path,
) -> list[str]:
    """``--trace``: where the slowest 1 % of assessments spent their time.

    Each delivered assessment is joined with the probe (publish -> routed ->
    assessed -> delivered; dumped to ``dump_path`` with its wall times).  For the
    slowest 1 % and for the median half (p25-p75) this prints each hop's mean, and
    over the routed -> assessed window of each assessment the worker's main-thread
    milliseconds in its own commit flushes (wall), in GC, in slow callbacks (>= 5 ms;
    ``(cpu)``: the part the thread was on a core), the worst loop lag, and the
    machine's and other processes' CPU (cores); ``wk-wait`` / ``bk-wait``: the
    worker's / broker's threads runnable but waiting for a core (threads x
    fraction of the time, ``schedstat``).  What is
    much larger for the slow group than for the median is what made them slow.
    """
    joined = []
    with dump_path.open("w") as out:
        for recv, published, sid, seq in rows:
            routed = probe.routed.get((sid, seq))
            assessed = probe.assessed.get((sid, seq))
            out.write(json.dumps([recv, published, routed, assessed, sid, seq]) + "\n")
            if routed is not None and assessed is not None:
                joined.append((recv - published, published, routed, assessed, recv))
    if len(joined) < 100:
        return [f"  tail: only {len(joined)} joined assessments"]
    joined.sort()
    n = len(joined)
    groups = {"slowest 1%": joined[int(0.99 * n) :], "p25-p75": joined[n // 4 : 3 * n // 4]}
    spans: dict[str, list[tuple[float, float]]] = {"flush": [], "gc": [], "slow": []}
    #: the same spans shortened to the thread's CPU share (the rest: waiting for a core)
    cpu_spans: dict[str, list[tuple[float, float]]] = {}
    lags: list[tuple[float, float]] = []
    for line in trace_path.read_text().splitlines():
        e = json.loads(line)
        k, t = e["k"], e["t"]
        if k == "flush":
            total = e["snap_ms"] + e["write_ms"] + e["commit_ms"]
            spans["flush"].append((t - total, t))
        elif k in ("gc", "slow") and e.get("th") == "MainThread":
            spans[k].append((t - e["ms"], t))
            share = min(1.0, e.get("cpu", e["ms"]) / max(e["ms"], 1e-9))
            cpu_spans.setdefault(k, []).append((t - e["ms"] * share, t))
        elif k == "lag":
            lags.append((t - e["ms"] - 10, e["ms"]))
    cpu = [json.loads(x) for x in cpu_path.read_text().splitlines()]

    def overlap(a: float, b: float, sp: list[tuple[float, float]]) -> float:
        return sum(max(0.0, min(b, e) - max(a, s)) for s, e in sp)

    def cpu_in(a: float, b: float, key: str) -> float:
        vals = [c[key] for c in cpu if a - 100 <= c["t"] <= b + 100]
        return sum(vals) / len(vals) if vals else float("nan")

    out = ["  tail attribution (--trace; ms per assessment, means; window = routed->assessed):"]
    out.append(
        f"    {'group':<11} {'n':>4} {'total':>6} {'pub->rt':>7} {'rt->as':>6} {'as->dl':>6} "
        f"{'flush':>6} {'gc':>5} {'slowcb':>6} {'(cpu)':>6} {'maxlag':>6} "
        f"{'machine':>7} {'others':>6} "
        f"{'broker':>6} {'router':>6} {'worker':>6} {'wk-wait':>7} {'bk-wait':>7}"
    )
    for name, g in groups.items():
        cols: dict[str, list[float]] = {}
        for lat, pub, rt, asd, recv in g:
            vals = {
                "total": lat,
                "pr": rt - pub,
                "ra": asd - rt,
                "ad": recv - asd,
                "flush": overlap(rt, asd, spans["flush"]),
                "gc": overlap(rt, asd, spans["gc"]),
                "slow": overlap(rt, asd, spans["slow"]),
                "slowcpu": overlap(rt, asd, cpu_spans.get("slow", [])),
                "lag": max([ms for s, ms in lags if rt <= s <= asd], default=0.0),
                "machine": cpu_in(pub, recv, "machine"),
                "others": cpu_in(pub, recv, "others"),
                "broker": cpu_in(pub, recv, "broker"),
                "router": cpu_in(pub, recv, "router"),
                "worker": cpu_in(pub, recv, "worker"),
                "wwait": cpu_in(rt, asd, "worker_wait"),
                "bwait": cpu_in(pub, recv, "broker_wait"),
            }
            for k, v in vals.items():
                cols.setdefault(k, []).append(v)
        m = {k: sum(v) / len(v) for k, v in cols.items()}
        out.append(
            f"    {name:<11} {len(g):>4} {m['total']:>6.0f} {m['pr']:>7.0f} {m['ra']:>6.0f} "
            f"{m['ad']:>6.0f} {m['flush']:>6.1f} {m['gc']:>5.1f} {m['slow']:>6.1f} "
            f"{m['slowcpu']:>6.1f} "
            f"{m['lag']:>6.1f} {m['machine']:>7.2f} {m['others']:>6.2f} {m['broker']:>6.2f} "
            f"{m['router']:>6.2f} {m['worker']:>6.2f} {m['wwait']:>7.2f} {m['bwait']:>7.2f}"
        )
    if cpu:
        keys = [k for k in cpu[0] if k != "t"]
        means = {k: sum(c[k] for c in cpu) / len(cpu) for k in keys}
        out.append(
            "    phase, cores (mean of 100 ms samples): "
            + ", ".join(f"{k} {v:.2f}" for k, v in means.items())
            + "; *_wait: runnable, waiting for a core"
        )
    out.append(
        f"    (per-assessment rows: {dump_path}; worker trace: {trace_path}; cpu: {cpu_path})"
    )
    return out


def print_cpu_table(proc_cpu: dict[str, float], events: int, p99: float, core_us: float) -> None:
    """CPU microseconds per event for each stage of one phase (issue #12).

    ``sdk`` is this process minus the Python threads of the assessment subscriber
    (``subscriber``) and of the stage probe (``probe``, a measuring instrument, not
    a stage: it decodes every routed event; left out of the total).  The
    librdkafka threads of all three clients stay in ``sdk`` (they cannot be told
    apart), so the SDK figure is an upper bound.  The pipeline (broker + router +
    worker) is what a fleet pays per event on the server side; ``core alone`` is
    the detector engine in memory over sessions like the phase's, as old as they
    are (``core_alone_us``), the floor the worker cannot go below.  Cores busy at
    1,000 events/s = us/event / 1,000.
    """
    if events <= 0:
        return
    names = {
        "sdk": "SDK publish",
        "broker": "broker",
        "router": "router",
        "worker": "worker",
        "subscriber": "subscriber (delivery)",
    }
    print("  CPU per event (us), this phase:")
    total = 0.0
    for key, label in names.items():
        if key in proc_cpu:
            us = 1e6 * proc_cpu[key] / events
            total += us
            print(f"    {label:<28} {us:8.1f}")
    pipeline = sum(
        1e6 * proc_cpu[k] / events for k in ("broker", "router", "worker") if k in proc_cpu
    )
    print(f"    {'broker + router + worker':<28} {pipeline:8.1f}")
    print(f"    {'end to end (all above)':<28} {total:8.1f}")
    print(f"    {'core alone (in memory)':<28} {core_us:8.1f}")
    if "probe" in proc_cpu:
        probe_us = 1e6 * proc_cpu["probe"] / events
        print(f"    {'(stage probe, not counted)':<28} {probe_us:8.1f}")
    print(f"    p99 SDK publish -> assessment delivered: {p99:.0f} ms", flush=True)


_CORE_US: list[float] = []


def core_alone_us(sessions: int, age: int, per_session: int) -> float:
    """CPU us per event of the detector engine alone (all default detectors), in
    memory, over the kind of sessions the phase runs: ``sessions`` simulated sessions
    of the bench's kinds (``KINDS``, ``streams.sim.events.session_events``), each
    ``1 + age`` events in untimed (the warm-up's ``session_start`` and the ``--age``
    events), then ``per_session`` more each, round-robin, timed.  Measured once.

    Why the same sessions: long-running sessions of these pathological kinds cost
    the engine more per event than a churny simulated fleet of fresh ones (~50
    against ~32 us on 2026-11-29), so a fleet figure understated the floor the
    worker cannot go below.

    Under the worker's garbage-collector thresholds (``WORKER_GC_THRESHOLDS``), as
    the engine runs in the worker: with Python's default ones (700, 10, 10), as
    this line ran until 2026-12-03, the collector walked the 1,000 aged sessions'
    objects often enough to add up to ~10 us per event, a cost the worker does
    not pay (this function over 1,000 sessions aged 150, 20 events each, three
    times interleaved: 37-39 us against 41-47 with the defaults)."""
    if not _CORE_US:
        import gc

        from streams.commands.worker import WORKER_GC_THRESHOLDS
        from streams.core.config import EngineConfig
        from streams.core.engine import SessionEngine
        from streams.sim.events import session_events

        before = gc.get_threshold()
        gc.set_threshold(*WORKER_GC_THRESHOLDS)
        try:
            cfg = EngineConfig()
            sids = [f"core-{i}" for i in range(sessions)]
            feeds = [
                session_events(KINDS[i % len(KINDS)], i, sid)  # type: ignore[arg-type]
                for i, sid in enumerate(sids)
            ]
            engines = [SessionEngine.create(sid, cfg) for sid in sids]
            for _ in range(1 + age):
                for engine, feed in zip(engines, feeds, strict=True):
                    engine.on_event(next(feed))
            timed = [[next(feed) for _ in range(per_session)] for feed in feeds]
            cpu0 = time.process_time()
            for k in range(per_session):
                for engine, events in zip(engines, timed, strict=True):
                    engine.on_event(events[k])
            _CORE_US.append(1e6 * (time.process_time() - cpu0) / (sessions * per_session))
        finally:
            gc.set_threshold(*before)
    return _CORE_US[0]


def write_json(path: str, data: dict[str, Any]) -> None:
    """``data`` as JSON at ``path``; NaN (a phase without assessments) as null."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    Path(path).write_text(json.dumps(clean(data), indent=1))


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return float(s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))])


def age_sessions(
    agents: list[Agent],
    events: int,
    publisher: Any,
    base: str,
    worker: subprocess.Popen[bytes],
    timeout_s: float,
) -> int:
    """Publish ``events`` more events per session, round-robin at full speed, and wait
    until the worker applied them; returns how many were published."""
    t0 = time.monotonic()
    target = applied(base)
    n = 0
    for _ in range(events):
        for a in agents:
            a.step()
        n += len(agents)
        if n % 20_000 < len(agents):
            publisher.flush()
    publisher.flush()
    published_s = time.monotonic() - t0
    if wait_applied(base, target + n, max(timeout_s, 600.0), worker) == float("inf"):
        raise SystemExit("ageing the sessions did not complete; see the logs")
    print(
        f"aged: {events} more events per session ({n} in all) published in "
        f"{published_s:.1f}s, applied by the worker after {time.monotonic() - t0:.1f}s",
        flush=True,
    )
    return n


def run_phase(
    agents: list[Agent], rate: float, duration_s: float, rng: random.Random
) -> tuple[int, float]:
    """Publish ``rate`` events/s for ``duration_s``; returns (events, seconds)."""
    n = 0
    order = itertools.cycle(rng.sample(agents, len(agents)))
    t0 = time.monotonic()
    end = t0 + duration_s
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - t0) * rate)
        if n >= due:
            time.sleep(min(0.001, end - now))
            continue
        for _ in range(min(due - n, 500)):
            next(order).step()
            n += 1
    return n, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, action="append", help="events/s (repeatable)")
    ap.add_argument("--batch-ms", type=int, action="append", help="router --batch-ms (repeatable)")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per rate")
    ap.add_argument("--partitions", type=int, default=6, help="<prefix>.events partitions")
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--worker-args",
        default="",
        help="extra worker flags, e.g. --worker-args='--commit-interval 5'",
    )
    ap.add_argument(
        "--router-args",
        default="",
        help="extra router flags, e.g. --router-args='--guarantee at-least-once'",
    )
    ap.add_argument(
        "--age",
        type=int,
        default=0,
        metavar="EVENTS",
        help="after the warm-up, publish EVENTS more events per session as fast as the "
        "pipeline takes them and wait until the worker applied them, so the phases "
        "measure sessions with full trajectory windows (a session's detector state "
        "grows with its first ~50 tool calls, ~150 events; long-running agents are "
        "there, a 20 s phase of fresh sessions is not); default 0",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="before each measured phase, run the same load this long unmeasured, so the "
        "phase sees the worker's steady flush schedule (each engine written about once "
        "per --engine-flush-interval, 30 s), not the wave of writes the warm-up and "
        "--age leave due: without it 3 of 7 runs wrote 1.3-1.6x the steady number of "
        "engine states in the phase (2026-12-03); default 30, 0 for none",
    )
    ap.add_argument(
        "--keep-topics", action="store_true", help="do not delete this run's topics at the end"
    )
    ap.add_argument(
        "--broker-jfr",
        type=Path,
        metavar="DIR",
        help="record the broker with Java Flight Recorder over each phase (a .jfr file per "
        "phase in DIR) and print the broker's hottest frames: what its CPU per event is "
        "spent on (needs the JDK's jcmd and jfr, and a broker on this machine)",
    )
    ap.add_argument(
        "--worker-py-spy",
        choices=("gil", "wall"),
        help="sample the worker with py-spy over each phase (collapsed stacks next to the "
        "logs) and print its top functions, self and inclusive: gil = the thread holding "
        "the GIL (close to where its CPU goes), wall = every thread",
    )
    ap.add_argument(
        "--json",
        metavar="PATH",
        help="also write every phase's figures (latency percentiles, CPU us per event by "
        "stage, broker + router + worker) to PATH as JSON (bench_aims.py reads it)",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="trace where the tail goes (issue #12): the worker writes its timing trace "
        "($TRAJECTORY_WORKER_TRACE), CPU is sampled every 100 ms, every assessment is "
        "dumped with its hop times, and each phase prints a tail attribution table",
    )
    args = ap.parse_args()
    rates = args.rate or [1000.0, 5000.0]
    batches = args.batch_ms or [100]

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    broker = broker_unless_running(bootstrap, "latency")
    _, port = parse_bootstrap(bootstrap)
    bpid = broker_pid(port)
    prefix = "lat" + uuid.uuid4().hex[:10]
    settings = Settings(bootstrap=bootstrap, prefix=prefix, events_partitions=args.partitions)
    work = Path(tempfile.mkdtemp(prefix=f"bench-latency-{prefix}-"))
    web_port = free_port()
    base = f"http://127.0.0.1:{web_port}"
    print(f"prefix {prefix}, logs in {work}", flush=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        common = ["--bootstrap", bootstrap, "--prefix", prefix]
        trace_path = work / "worker-trace.jsonl"
        if args.trace:
            os.environ["TRAJECTORY_WORKER_TRACE"] = str(trace_path)
        worker = spawn(
            [
                *worker_args(bootstrap, prefix, work / "worker", web_port),
                *shlex.split(args.worker_args),
            ],
            work / "worker.log",
        )
        procs.append(worker)
        os.environ.pop("TRAJECTORY_WORKER_TRACE", None)
        sids = [f"lat-{i}-{KINDS[i % len(KINDS)]}" for i in range(args.sessions)]
        # The worker first: it creates <prefix>.events and waits for its partitions
        # in the metadata; behind 1,000 session topics being created that took over
        # its 15 s limit on a busy machine.
        if wait_applied(base, 0, 120, worker) == float("inf"):
            raise SystemExit(f"worker did not answer on {base}; see {work}/worker.log")
        with Publisher(settings) as publisher:
            t0 = time.monotonic()
            publisher.ensure_session_topics(sids)
            setup_s = time.monotonic() - t0
            print(f"setup: created {len(sids)} session topics in {setup_s:.1f}s", flush=True)
            rng = random.Random(args.seed)
            agents: list[Agent] | None = None
            results = []
            published = 0
            for batch_ms in batches:
                router_metrics_port = free_port()
                router = spawn(
                    [
                        "streams.commands.router",
                        "--metrics-port",
                        str(router_metrics_port),
                        *common,
                        "--partitions",
                        str(args.partitions),
                        "--batch-ms",
                        str(batch_ms),
                        "--status-every",
                        "0",
                        *shlex.split(args.router_args),
                    ],
                    work / f"router-{batch_ms}.log",
                )
                procs.append(router)
                received = Received()
                sub = AssessmentSubscriber(settings, start="latest")
                probe: StageProbe | None = None
                sub_thread = threading.Thread(target=sub.run, args=(received,), daemon=True)
                try:
                    sub.wait_ready(60)
                    probe = StageProbe(settings)
                    sub_thread.start()
                    if agents is None:
                        t0 = time.monotonic()
                        agents = []
                        for i, sid in enumerate(sids):
                            s = publisher.session(sid, flush_on_exit=False)
                            s.start()
                            agents.append(Agent(s, KINDS[i % len(KINDS)], f"{args.seed}:{i}"))
                        published += len(sids)
                        publisher.flush()
                        warm = wait_applied(base, published, 180, worker)
                        print(
                            f"warm-up: {len(sids)} sessions started and applied by the worker "
                            f"in {time.monotonic() - t0:.1f}s (router topic pickup included)",
                            flush=True,
                        )
                        if warm == float("inf"):
                            raise SystemExit("warm-up did not complete; see the logs")
                        if args.age > 0:
                            published += age_sessions(
                                agents, args.age, publisher, base, worker, args.drain_timeout
                            )
                    else:  # a new router: wait until it routes (resumes committed offsets)
                        probe_t0 = time.monotonic()
                        for a in agents[:10]:
                            a.step()
                        published += 10
                        publisher.flush()
                        wait_applied(base, published, 120, worker)
                        print(
                            f"router --batch-ms {batch_ms} routing after "
                            f"{time.monotonic() - probe_t0:.1f}s",
                            flush=True,
                        )
                    for rate in rates:
                        if args.settle > 0:
                            n_settle, _ = run_phase(agents, rate, args.settle, rng)
                            published += n_settle
                            publisher.flush(args.drain_timeout)
                            print(
                                f"settled: {n_settle} events at {rate:.0f}/s for "
                                f"{args.settle:g}s, not measured",
                                flush=True,
                            )
                        time.sleep(1.0)
                        start_ms = time.time_ns() // 1_000_000
                        before = applied(base)
                        m_before = worker_metrics(base)
                        r_before = router_commits(router_metrics_port)
                        cpu_before = os.times()
                        pids = {"worker": worker.pid, "router": router.pid}
                        if bpid is not None:
                            pids["broker"] = bpid
                        jfr = None
                        if args.broker_jfr is not None and bpid is not None:
                            args.broker_jfr.mkdir(parents=True, exist_ok=True)
                            jfr = BrokerProfile(
                                bpid, args.broker_jfr / f"broker-b{batch_ms}-r{rate:.0f}.jfr"
                            )
                            jfr.start()
                        spy = None
                        if args.worker_py_spy is not None:
                            spy = PySpy(
                                worker.pid,
                                work / f"worker-b{batch_ms}-r{rate:.0f}.pyspy.txt",
                                args.worker_py_spy,
                            )
                            spy.start()
                        proc_cpu_before = {k: tree_cpu_seconds(v) for k, v in pids.items()}
                        tids = {
                            "subscriber": sub_thread.native_id,
                            "probe": probe.tid if probe is not None else None,
                        }
                        thread_cpu_before = {
                            k: thread_cpu_seconds(t) for k, t in tids.items() if t is not None
                        }
                        tag = f"b{batch_ms}-r{rate:.0f}"
                        sampler = (
                            CpuSampler(work / f"cpu-{tag}.jsonl", pids) if args.trace else None
                        )
                        n, secs = run_phase(agents, rate, args.duration, rng)
                        published += n
                        t_flush = time.monotonic()
                        publisher.flush(args.drain_timeout)
                        flush_s = time.monotonic() - t_flush
                        applied_at_end = applied(base)  # includes the flush time
                        secs_applied = time.monotonic() - t_flush + secs
                        drain = wait_applied(base, published, args.drain_timeout, worker)
                        time.sleep(1.0)  # last assessments reach the subscriber
                        m_after = worker_metrics(base)
                        psum = "trajectory_worker_event_processing_seconds_sum"
                        pcount = "trajectory_worker_event_processing_seconds_count"
                        per_event_ms = (
                            1000.0
                            * (m_after[psum] - m_before[psum])
                            / max(1.0, m_after[pcount] - m_before[pcount])
                        )
                        worker_lag = (
                            lag_quantile(m_before, m_after, 0.5),
                            lag_quantile(m_before, m_after, 0.99),
                        )
                        r_after = router_commits(router_metrics_port)
                        txns = max(1.0, r_after[2] - r_before[2])
                        router_ms = (
                            1000 * (r_after[0] - r_before[0]) / txns,
                            1000 * (r_after[1] - r_before[1]) / txns,
                            r_after[2] - r_before[2],
                        )
                        cpu = os.times()
                        bench_cpu = (cpu.user - cpu_before.user) + (cpu.system - cpu_before.system)
                        proc_cpu = {
                            k: tree_cpu_seconds(pids[k]) - v for k, v in proc_cpu_before.items()
                        }
                        if jfr is not None:
                            print("\n".join(jfr.stop()), flush=True)
                        if spy is not None:
                            print("\n".join(spy.stop(20)), flush=True)
                        threads = {
                            k: thread_cpu_seconds(t) - thread_cpu_before[k]
                            for k, t in tids.items()
                            if t is not None and k in thread_cpu_before
                        }
                        proc_cpu.update(threads)
                        proc_cpu["sdk"] = bench_cpu - sum(threads.values())
                        wall = time.monotonic() - t_flush + secs
                        with received.lock:
                            phase_rows = [x for x in received.rows if x[1] >= start_ms]
                            lats = [r - t for r, t, _, _ in phase_rows]
                            received.rows = [x for x in received.rows if x[1] < start_ms]
                        results.append(
                            {
                                "batch_ms": batch_ms,
                                "rate": rate,
                                "published": n,
                                "publish_rate": n / secs,
                                "applied_rate": (applied_at_end - before) / secs_applied,
                                "drain_s": drain,
                                "flush_s": flush_s,
                                "per_event_ms": per_event_ms,
                                "worker_lag": worker_lag,
                                "publisher_cpu_s": bench_cpu,
                                "assessments": len(lats),
                                "p50": pct(lats, 0.50),
                                "p95": pct(lats, 0.95),
                                "p99": pct(lats, 0.99),
                                "max": max(lats) if lats else float("nan"),
                            }
                        )
                        r = results[-1]
                        print(
                            f"batch-ms {batch_ms:>4} rate {rate:>6.0f}/s: published {n} "
                            f"({r['publish_rate']:.0f}/s; SDK flush took {flush_s:.1f}s), "
                            f"worker applied "
                            f"{r['applied_rate']:.0f}/s during the phase, drained "
                            f"{drain:.1f}s after; {len(lats)} assessments, latency ms "
                            f"p50 {r['p50']:.0f} p95 {r['p95']:.0f} p99 {r['p99']:.0f} "
                            f"max {r['max']:.0f}; worker {per_event_ms:.2f} ms/event in the agent "
                            f"(<= {1000 / per_event_ms:.0f} events/s on one core); this bench "
                            f"process (SDK + subscriber) used {bench_cpu:.1f} CPU s; publish -> "
                            f"worker applied: p50 <= {worker_lag[0]} ms, p99 <= {worker_lag[1]} "
                            "ms; "
                            f"router: {router_ms[2]:.0f} commits, mean {router_ms[1]:.0f} ms "
                            "blocked per commit"
                            + (
                                f", {router_ms[0]:.0f} ms transaction open-to-committed"
                                if router_ms[0]
                                else ""
                            ),
                            flush=True,
                        )
                        print(f"  hops: {probe.split(phase_rows)}", flush=True)
                        if sampler is not None:
                            sampler.close()
                            time.sleep(1.5)  # the worker writes its trace out every second
                            for line in tail_report(
                                phase_rows,
                                probe,
                                trace_path,
                                work / f"cpu-{tag}.jsonl",
                                work / f"assessments-{tag}.jsonl",
                            ):
                                print(line, flush=True)
                        r["core_alone_us"] = core_alone_us(
                            args.sessions, args.age, max(1, n // args.sessions)
                        )
                        print_cpu_table(proc_cpu, n, r["p99"], r["core_alone_us"])
                        r["cpu_us"] = {k: 1e6 * v / n for k, v in proc_cpu.items()} if n else {}
                        r["pipeline_us"] = sum(
                            r["cpu_us"].get(k, 0.0) for k in ("broker", "router", "worker")
                        )
                        r["end_to_end_us"] = sum(  # as print_cpu_table's total: no probe
                            r["cpu_us"].get(k, 0.0)
                            for k in ("sdk", "broker", "router", "worker", "subscriber")
                        )
                        r["load"] = os.getloadavg()[0]
                        print(
                            "  CPU (cores busy over the phase, of "
                            f"{os.cpu_count()}): "
                            + ", ".join(f"{k} {v / wall:.2f}" for k, v in proc_cpu.items()),
                            flush=True,
                        )
                        enc = "trajectory_worker_state_encode_cpu_seconds_total"
                        flushed = "trajectory_worker_engine_flushes_total"
                        if enc in m_after and enc in m_before and n:
                            enc_s = m_after[enc] - m_before[enc]
                            engines = m_after.get(flushed, 0.0) - m_before.get(flushed, 0.0)
                            print(
                                f"  worker state encode (at flushes): {1e6 * enc_s / n:.1f} "
                                f"us per event; {engines:.0f} engine states written, "
                                f"{1e6 * enc_s / max(1.0, engines):.0f} us of encode per "
                                "engine state (with the counters, budgets and minutes)",
                                flush=True,
                            )
                        print(
                            "  peak RSS so far (MB): "
                            + ", ".join(
                                f"{k} {peak_rss_mb(v):.0f}"
                                for k, v in pids.items()
                                if k != "broker"
                            ),
                            flush=True,
                        )
                finally:
                    if probe is not None:
                        probe.close()
                    sub.close()
                    sub_thread.join(10)
                    stop(router)
            print()
            print(
                f"{'batch-ms':>8} {'rate/s':>7} {'published/s':>11} {'applied/s':>9} "
                f"{'drain s':>7} {'kept up':>7} {'n':>5} {'p50':>6} {'p95':>6} {'p99':>6} "
                f"{'max':>6}"
            )
            for r in results:
                kept = r["drain_s"] < 2.0 and r["applied_rate"] >= 0.95 * r["publish_rate"]
                print(
                    f"{r['batch_ms']:>8} {r['rate']:>7.0f} {r['publish_rate']:>11.0f} "
                    f"{r['applied_rate']:>9.0f} {r['drain_s']:>7.1f} {'yes' if kept else 'NO':>7} "
                    f"{r['assessments']:>5} {r['p50']:>6.0f} {r['p95']:>6.0f} {r['p99']:>6.0f} "
                    f"{r['max']:>6.0f}"
                )
            print(f"(session topic setup: {setup_s:.1f}s for {len(sids)} topics; latency in ms)")
            if args.json:
                write_json(args.json, {"prefix": prefix, "age": args.age, "results": results})
    finally:
        for p in reversed(procs):
            stop(p)
        if broker is not None:
            broker.stop()
        elif not args.keep_topics:
            delete_prefix_topics(bootstrap, prefix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
