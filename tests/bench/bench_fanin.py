"""Fan-in cost without our code: a raw confluent-kafka consumer of N one-partition topics.

A script, not a test (prints figures, asserts nothing).  It isolates what the
router's fan-in costs the broker and the client, whatever the router does with
the records: this process produces ``--rate`` small records/s round-robin over
``--topics`` fresh topics (``linger.ms`` 5, as the SDK), and a child process
(spawned, so its CPU is counted apart from the producer's) runs the mode's
consumers, which read them with the mode's fetch settings.  Per mode it prints,
over ``--duration`` s after a ``--warmup`` (4 s): records consumed/s, the broker JVM's
CPU, the producer's (this process) and the consumers' (the child) CPU, in cores,
and produce -> consume latency p50/p99 (wall clock of one machine).

A mode is ``none`` (producer only: the broker's floor), ``k<K>mb<min
bytes>w<wait ms>`` (K librdkafka consumers, threads of the child, each assigned
``topics[j::K]`` at the end), e.g. ``k1mb1w50`` (the router's defaults before
issue #12: one consumer, ``fetch.min.bytes`` 1, ``fetch.wait.max.ms`` 50) or
``k1mb65536w50`` (the router's defaults now), or ``kp<min bytes>w<wait ms>``:
one kafka-python (3.x) consumer assigned every topic, with incremental fetch
sessions (KIP-227), which librdkafka and aiokafka lack; ``kpnosess<min
bytes>w<wait ms>`` is the same with them off.  kafka-python is not a dependency
of the project: without it the ``kp`` modes are skipped with a message.

``--record-bytes N`` pads each record to N bytes (the closed loop's events are
~300-600; the default is an 18-byte timestamp), ``--topic-config KEY=VALUE``
creates the topics with that config (e.g. ``index.interval.bytes=1``).  The
producer's CPU, the same work in every mode, doubles as a reference for how fast
the machine runs at the time: compare broker / producer between runs taken minutes
apart (docs/kafka-notes.md "The broker's floor for the fan-in").

What it showed on this 2-core machine (docs/kafka-notes.md "Fan-in: where the
broker's CPU goes"): the broker's floor for producing 1,000 records/s to 1,000
topics is ~0.1 core; one consumer with min bytes 1 (the router's old default) adds ~0.5; min bytes
64 KiB with a 20 ms wait adds ~0.3 and halves the consumer's CPU; splitting the
topics over more consumers does not help.  kafka-python with incremental fetch
sessions ("Fan-in with incremental fetch sessions (kafka-python)"): the broker's
total does not fall (more, cheaper fetches), the consumer costs 2-4x librdkafka's,
latency is the lowest.

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_fanin.py --topics 1000 \\
        --rate 1000 --duration 12 --mode none --mode k1mb1w50 --mode k1mb65536w20 \\
        --mode kp1w50 --mode kpnosess1w50
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from procs import BrokerProfile, broker_pid, cpu_seconds  # noqa: E402

from streams.broker import parse_bootstrap  # noqa: E402

_MODE = re.compile(r"k(\d+)mb(\d+)w(\d+)")
_KP_MODE = re.compile(r"kp(nosess)?(\d+)w(\d+)")


@dataclass(frozen=True)
class Mode:
    """A parsed ``--mode``: which client, how many consumers, its fetch settings."""

    name: str
    client: str  # "none", "confluent" or "kafka-python"
    consumers: int
    min_bytes: int
    wait_ms: int
    sessions: bool = True  # kafka-python only: incremental fetch sessions (KIP-227)


def parse_mode(mode: str) -> Mode:
    """The :class:`Mode` of a mode name (exits with a usage message on a bad one)."""
    if mode == "none":
        return Mode(mode, "none", 0, 1, 50)
    m = _MODE.fullmatch(mode)
    if m is not None:
        return Mode(mode, "confluent", int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = _KP_MODE.fullmatch(mode)
    if m is not None:
        return Mode(mode, "kafka-python", 1, int(m.group(2)), int(m.group(3)), m.group(1) is None)
    raise SystemExit(
        f"--mode {mode!r}: expected 'none', k<consumers>mb<min bytes>w<wait ms> (e.g. "
        "k1mb1w50), kp<min bytes>w<wait ms> or kpnosess<min bytes>w<wait ms>"
    )


def kafka_python_missing() -> str | None:
    """Why the ``kp*`` modes cannot run here, or None (kafka-python is not a dependency)."""
    try:
        import kafka  # noqa: F401
    except ImportError:
        return "kafka-python is not installed (pip install kafka-python>=3.0): kp modes skipped"
    return None


def _consume_confluent(mode: Mode, bootstrap: str, topics: list[str], ctl: _Control) -> None:
    """K librdkafka consumers, one thread each, assigned ``topics[j::K]`` at the end."""
    consumers = []
    for j in range(mode.consumers):
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-fanin-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": mode.wait_ms,
                "fetch.min.bytes": mode.min_bytes,
            }
        )
        c.assign([TopicPartition(t, 0, OFFSET_END) for t in topics[j :: mode.consumers]])
        consumers.append(c)
    lats: list[float] = []
    lock = threading.Lock()

    def consume(c: Consumer) -> None:
        while not ctl.stop.is_set():
            msgs = c.consume(10000, timeout=0.05)
            now = time.time()
            if ctl.measuring.is_set():
                got = [now - float(m.value()) for m in msgs if m.error() is None]
                with lock:
                    lats.extend(got)

    threads = [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    ctl.ready.set()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    ctl.results.send(lats)
    ctl.results.send(None)  # fetches not counted (librdkafka's statistics would cost CPU)


def _consume_kafka_python(mode: Mode, bootstrap: str, topics: list[str], ctl: _Control) -> None:
    """One kafka-python consumer assigned every topic (no group), polled in this thread.

    kafka-python 3.x builds incremental fetch requests (KIP-227) by default: after
    the first, full fetch, a request lists only the partitions whose fetch position
    changed, and a response only partitions with news.  ``kpnosess`` turns that off
    (every fetch lists every partition, as librdkafka and aiokafka do).
    """
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_min_bytes=mode.min_bytes,
        fetch_max_wait_ms=mode.wait_ms,
        enable_incremental_fetch_sessions=mode.sessions,
        max_poll_records=10000,
    )
    tps = [KpTopicPartition(t, 0) for t in topics]
    c.assign(tps)
    c.seek_to_end(*tps)
    # Fetch responses counted through the fetcher's latency sensor (private API:
    # without it the count is -1).  It tells whether a cheaper broker comes from
    # the sessions or from fewer fetches.
    responses = [0]

    class CountingSensor:
        """Stands in for the fetcher's ``fetch_latency`` sensor (it has slots)."""

        def __init__(self, sensor: Any) -> None:
            self.sensor = sensor

        def record(self, *args: Any, **kwargs: Any) -> None:
            responses[0] += 1
            self.sensor.record(*args, **kwargs)

    try:
        sensors = c._fetcher._sensors
        sensors.fetch_latency = CountingSensor(sensors.fetch_latency)
    except AttributeError:
        responses[0] = -1
    lats: list[float] = []
    marks: list[int] = []
    ctl.ready.set()
    while not ctl.stop.is_set():
        batches = c.poll(timeout_ms=50, max_records=10000)
        now = time.time()
        if ctl.measuring.is_set():
            if not marks:
                marks.append(responses[0])
            for records in batches.values():
                lats.extend(now - float(r.value) for r in records)
        elif len(marks) == 1:
            marks.append(responses[0])
    c.close()
    ctl.results.send(lats)
    ctl.results.send(marks[1] - marks[0] if len(marks) == 2 and responses[0] >= 0 else None)


@dataclass
class _Control:
    """What the bench process and its consumer process share."""

    ready: Any
    measuring: Any
    stop: Any
    results: Any  # the child's end of a Pipe: the latencies, sent once at the end


def _consumer_main(mode: Mode, bootstrap: str, topics: list[str], ctl: _Control) -> None:
    """Entry of the consumer process (spawned: no librdkafka state inherited by fork)."""
    if mode.client == "confluent":
        _consume_confluent(mode, bootstrap, topics, ctl)
    else:
        _consume_kafka_python(mode, bootstrap, topics, ctl)


def run_mode(
    bootstrap: str,
    topics: list[str],
    mode: Mode,
    rate: float,
    secs: float,
    bpid: int | None,
    jfr_dir: Path | None,
    warmup: float = 4.0,
    record_bytes: int = 0,
) -> str:
    """One mode: the consumers in a child process (their CPU apart from the producer's)."""
    mp = multiprocessing.get_context("spawn")
    child = None
    lats: list[float] = []
    fetches: int | None = None
    if mode.client != "none":
        parent_end, child_end = mp.Pipe(duplex=False)
        ctl = _Control(mp.Event(), mp.Event(), mp.Event(), child_end)
        child = mp.Process(target=_consumer_main, args=(mode, bootstrap, topics, ctl))
        child.start()
        if not ctl.ready.wait(120):
            child.kill()
            raise SystemExit(f"{mode.name}: the consumer process did not start")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stop = threading.Event()

    def produce() -> None:
        t0 = time.monotonic()
        n = 0
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            while n < due:
                # the consumers read the time back with float(), which skips the padding
                producer.produce(
                    topics[n % len(topics)], repr(time.time()).encode().ljust(record_bytes)
                )
                n += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        time.sleep(warmup)  # assignments fetched, the first fetch answered, backlog read
        profile = None
        if jfr_dir is not None and bpid is not None:
            jfr_dir.mkdir(parents=True, exist_ok=True)
            profile = BrokerProfile(bpid, jfr_dir / f"fanin-{mode.name}.jfr")
            profile.start()
        me0 = cpu_seconds(os.getpid())
        c0 = cpu_seconds(child.pid) if child is not None and child.pid else 0.0
        b0 = cpu_seconds(bpid) if bpid is not None else 0.0
        if child is not None:
            ctl.measuring.set()
        time.sleep(secs)
        if child is not None:
            ctl.measuring.clear()
        me1 = cpu_seconds(os.getpid())
        c1 = cpu_seconds(child.pid) if child is not None and child.pid else 0.0
        b1 = cpu_seconds(bpid) if bpid is not None else 0.0
        frames = profile.stop() if profile is not None else []
    finally:
        stop.set()
        thread.join()
        if child is not None:
            ctl.stop.set()
            if parent_end.poll(60):
                lats = parent_end.recv()
                fetches = parent_end.recv() if parent_end.poll(10) else None
            child.join(30)
            if child.is_alive():
                child.kill()
    lats.sort()

    def q(x: float) -> float:
        return 1000 * lats[int(x * (len(lats) - 1))] if lats else float("nan")

    broker = f"{(b1 - b0) / secs:.2f}" if bpid is not None else "n/a"
    line = (
        f"{mode.name:>14}: consumed {len(lats) / secs:6.0f}/s  broker {broker} cores  "
        f"producer {(me1 - me0) / secs:.2f}  consumer {(c1 - c0) / secs:.2f} cores  "
        f"latency p50 {q(0.5):.0f} p99 {q(0.99):.0f} ms  load {os.getloadavg()[0]:.1f}"
    )
    if fetches is not None:
        line += f"  fetches {fetches / secs:.0f}/s"
    return "\n".join([line, *frames])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--topics", type=int, default=1000, help="one-partition topics (default 1000)")
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s in all (default 1000)")
    ap.add_argument("--duration", type=float, default=12.0, help="measured seconds per mode")
    ap.add_argument(
        "--mode",
        action="append",
        help="none | k<consumers>mb<fetch.min.bytes>w<fetch.wait.max.ms> | "
        "kp<fetch_min_bytes>w<fetch_max_wait_ms> | kpnosess<min bytes>w<wait ms> (repeatable; "
        "default: none, k1mb1w50, k1mb65536w20)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=4.0,
        help="seconds of producing before measuring (default 4; a kafka-python consumer of "
        "1,000 topics needs ~10 to read the backlog of its start)",
    )
    ap.add_argument("--broker-jfr", type=Path, metavar="DIR", help="JFR profile per mode")
    ap.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config of the created topics (repeatable), e.g. index.interval.bytes=1",
    )
    ap.add_argument(
        "--record-bytes",
        type=int,
        default=0,
        help="pad each record's value to this many bytes (default 0: ~18 bytes, a timestamp; "
        "the closed loop's events are ~300-600)",
    )
    args = ap.parse_args()
    topic_config = dict(kv.split("=", 1) for kv in args.topic_config)
    # Parsed before creating topics, so a bad name fails early.
    modes = [parse_mode(m) for m in args.mode or ["none", "k1mb1w50", "k1mb65536w20"]]
    missing = kafka_python_missing()
    if missing is not None and any(m.client == "kafka-python" for m in modes):
        print(missing)
        modes = [m for m in modes if m.client != "kafka-python"]
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    _, port = parse_bootstrap(bootstrap)
    bpid = broker_pid(port)
    if bpid is None:
        print(f"no broker JVM for port {port} on this machine: broker CPU not measured")
    prefix = f"bench-fanin-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.s{i}" for i in range(args.topics)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 200):
        futures = admin.create_topics(
            [NewTopic(t, 1, 1, config=topic_config) for t in topics[i : i + 200]]
        )
        for f in futures.values():
            f.result(60)
    time.sleep(3.0)  # leaders elected for every new partition
    print(
        f"{args.topics} topics, {args.rate:.0f} records/s, {args.duration:.0f} s per mode; "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    try:
        for mode in modes:
            print(
                run_mode(
                    bootstrap,
                    topics,
                    mode,
                    args.rate,
                    args.duration,
                    bpid,
                    args.broker_jfr,
                    args.warmup,
                    args.record_bytes,
                ),
                flush=True,
            )
    finally:
        for i in range(0, len(topics), 500):
            admin.delete_topics(topics[i : i + 500])
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
