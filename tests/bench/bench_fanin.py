"""Fan-in cost without our code: a raw confluent-kafka consumer of N one-partition topics.

A script, not a test (prints figures, asserts nothing).  It isolates what the
router's fan-in costs the broker and the client, whatever the router does with
the records: one process produces ``--rate`` small records/s round-robin over
``--topics`` fresh topics (``linger.ms`` 5, as the SDK), and K consumers of this
process (threads, each assigned ``topics[j::K]`` at the end) read them with the
mode's fetch settings.  Per mode it prints, over ``--duration`` s after a 4 s
warm-up: records consumed/s, the broker JVM's CPU (cores), this process's CPU
(producer + consumers), and produce -> consume latency p50/p99 (wall clock of
one machine).

A mode is ``none`` (producer only: the broker's floor) or ``k<K>mb<min
bytes>w<wait ms>``, e.g. ``k1mb1w50`` (the router's defaults before issue #12: one
consumer, ``fetch.min.bytes`` 1, ``fetch.wait.max.ms`` 50) or ``k1mb65536w50``
(the router's defaults now).
``--broker-jfr DIR`` records the broker with Java Flight Recorder per mode and
prints its hottest frames (``procs.BrokerProfile``).

What it showed on this 2-core machine (docs/kafka-notes.md "Fan-in: where the
broker's CPU goes"): the broker's floor for producing 1,000 records/s to 1,000
topics is ~0.1 core; one consumer with min bytes 1 (the router's old default) adds ~0.5; min bytes
64 KiB with a 20 ms wait adds ~0.3 and halves the consumer's CPU; splitting the
topics over more consumers does not help.

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_fanin.py --topics 1000 \\
        --rate 1000 --duration 12 --mode none --mode k1mb1w50 --mode k1mb65536w20
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from procs import BrokerProfile, broker_pid, cpu_seconds  # noqa: E402

from streams.broker import parse_bootstrap  # noqa: E402

_MODE = re.compile(r"k(\d+)mb(\d+)w(\d+)")


def parse_mode(mode: str) -> tuple[int, int, int]:
    """``(consumers, fetch.min.bytes, fetch.wait.max.ms)`` of a mode name."""
    if mode == "none":
        return 0, 1, 50
    m = _MODE.fullmatch(mode)
    if m is None:
        raise SystemExit(
            f"--mode {mode!r}: expected 'none' or k<consumers>mb<min bytes>w<wait ms>, "
            "e.g. k1mb1w50"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def run_mode(
    bootstrap: str,
    topics: list[str],
    mode: str,
    rate: float,
    secs: float,
    bpid: int | None,
    jfr_dir: Path | None,
) -> str:
    k, min_bytes, wait_ms = parse_mode(mode)
    consumers = []
    for j in range(k):
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-fanin-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": wait_ms,
                "fetch.min.bytes": min_bytes,
            }
        )
        c.assign([TopicPartition(t, 0, OFFSET_END) for t in topics[j::k]])
        consumers.append(c)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stop = threading.Event()
    measuring = threading.Event()
    lats: list[float] = []
    lock = threading.Lock()

    def produce() -> None:
        t0 = time.monotonic()
        n = 0
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            while n < due:
                producer.produce(topics[n % len(topics)], repr(time.time()).encode())
                n += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(10)

    def consume(c: Consumer) -> None:
        while not stop.is_set():
            msgs = c.consume(10000, timeout=0.05)
            now = time.time()
            if measuring.is_set():
                got = [now - float(m.value()) for m in msgs if m.error() is None]
                with lock:
                    lats.extend(got)

    threads = [threading.Thread(target=produce)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    try:
        time.sleep(4.0)  # warm-up: assignments fetched, the first fetch answered
        profile = None
        if jfr_dir is not None and bpid is not None:
            jfr_dir.mkdir(parents=True, exist_ok=True)
            profile = BrokerProfile(bpid, jfr_dir / f"fanin-{mode}.jfr")
            profile.start()
        me0 = cpu_seconds(os.getpid())
        b0 = cpu_seconds(bpid) if bpid is not None else 0.0
        measuring.set()
        time.sleep(secs)
        measuring.clear()
        me1 = cpu_seconds(os.getpid())
        b1 = cpu_seconds(bpid) if bpid is not None else 0.0
        frames = profile.stop() if profile is not None else []
    finally:
        stop.set()
        for t in threads:
            t.join()
        for c in consumers:
            c.close()
    lats.sort()

    def q(x: float) -> float:
        return 1000 * lats[int(x * (len(lats) - 1))] if lats else float("nan")

    broker = f"{(b1 - b0) / secs:.2f}" if bpid is not None else "n/a"
    line = (
        f"{mode:>14}: consumed {len(lats) / secs:6.0f}/s  broker {broker} cores  "
        f"this process (producer + consumers) {(me1 - me0) / secs:.2f} cores  "
        f"latency p50 {q(0.5):.0f} p99 {q(0.99):.0f} ms"
    )
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
        help="none | k<consumers>mb<fetch.min.bytes>w<fetch.wait.max.ms> (repeatable; "
        "default: none, k1mb1w50, k1mb65536w20)",
    )
    ap.add_argument("--broker-jfr", type=Path, metavar="DIR", help="JFR profile per mode")
    args = ap.parse_args()
    modes = args.mode or ["none", "k1mb1w50", "k1mb65536w20"]
    for mode in modes:
        parse_mode(mode)  # fail on a bad name before creating topics
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    _, port = parse_bootstrap(bootstrap)
    bpid = broker_pid(port)
    if bpid is None:
        print(f"no broker JVM for port {port} on this machine: broker CPU not measured")
    prefix = f"bench-fanin-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.s{i}" for i in range(args.topics)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 200):
        futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics[i : i + 200]])
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
                run_mode(bootstrap, topics, mode, args.rate, args.duration, bpid, args.broker_jfr),
                flush=True,
            )
    finally:
        for i in range(0, len(topics), 500):
            admin.delete_topics(topics[i : i + 500])
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
