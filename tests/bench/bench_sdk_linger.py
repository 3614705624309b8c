"""What ``linger.ms`` costs and buys a publisher (the figures behind the SDK's default).

A script, not a test (prints figures, asserts nothing).  Needs a broker
(``KAFKA_BOOTSTRAP``).  Two parts:

1. ``--point TOPICS:RATE`` (repeatable): a plain idempotent lz4 producer
   (``acks=all``, ~420-byte values, as the SDK configures librdkafka) sends RATE
   messages/s round-robin over TOPICS fresh topics for ``--seconds``, once per
   ``--linger`` value; it prints librdkafka's CPU per message (its threads, read
   from ``/proc``; the pacing loop's Python thread is left out) and the
   produce -> acknowledgement latency p50 / p99;
2. ``--bulk N``: the SDK (``Publisher``, simulator sessions from
   ``bench_latency``) publishes N events over 200 sessions in a loop, once per
   linger value, alternating ``--bulk-rounds`` times: wall time and process CPU
   per event.

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_sdk_linger.py \\
        --point 1:10 --point 1:200 --point 1000:1000 --linger 0,1,5 --bulk 50000
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams.settings import Settings


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name of this process (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for stat in glob.glob(f"/proc/{os.getpid()}/task/*/stat"):
        try:
            text = Path(stat).read_text()
            comm = Path(stat).with_name("comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[comm] = out.get(comm, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def point(bootstrap: str, topics: int, rate: int, linger: int, seconds: float) -> str:
    prefix = "linger" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"{prefix}.t{i}" for i in range(topics)]
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in names]).values():
        fut.result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": linger,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "lz4",
        }
    )
    value = b"some tool output line with text\n" * 13
    acks: list[float] = []
    try:
        for t in names:  # connections and metadata before the timed span
            producer.produce(t, value)
        producer.flush(30)
        before = thread_cpu()
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < seconds:
            due = int((time.monotonic() - t0) * rate)
            while n < due:
                sent = time.perf_counter()
                producer.produce(
                    names[n % topics],
                    value,
                    on_delivery=lambda err, msg, sent=sent: acks.append(time.perf_counter() - sent),
                )
                n += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(30)
        after = thread_cpu()
    finally:
        admin.delete_topics(names)
    lib = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith("rdk:"))
    acks.sort()
    return (
        f"  {topics:>5} topics {rate:>5} msg/s linger {linger:>2}: librdkafka "
        f"{lib / n * 1e6:6.0f} us CPU per message; ack p50 {acks[len(acks) // 2] * 1e3:5.1f} "
        f"p99 {acks[int(len(acks) * 0.99)] * 1e3:5.1f} ms ({n} messages)"
    )


def bulk(bootstrap: str, n: int, linger: int) -> str:
    from bench_latency import KINDS, Agent

    from streams.sdk import Publisher

    settings = Settings(bootstrap=bootstrap, prefix="linger" + uuid.uuid4().hex[:8])
    with Publisher(settings, producer_config={"linger.ms": linger}) as pub:
        sids = [f"s{i}" for i in range(200)]
        pub.ensure_session_topics(sids)
        agents = []
        for i, sid in enumerate(sids):
            session = pub.session(sid, flush_on_exit=False)
            session.start()
            agents.append(Agent(session, KINDS[i % len(KINDS)], f"1:{i}"))
        pub.flush()
        c0, t0 = time.process_time(), time.monotonic()
        for k in range(n):
            agents[k % len(agents)].step()
        pub.flush()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(
        [t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.prefix + ".")]
    )
    return (
        f"  SDK bulk, linger {linger:>2}: {n} events in {wall:5.2f} s, "
        f"{cpu / n * 1e6:5.1f} us CPU per event"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--point", action="append", default=[], metavar="TOPICS:RATE")
    ap.add_argument("--linger", default="0,1,5", help="comma list of linger.ms values")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--bulk", type=int, default=0, help="SDK events per bulk run (0: none)")
    ap.add_argument("--bulk-rounds", type=int, default=2)
    args = ap.parse_args(argv)
    lingers = [int(x) for x in args.linger.split(",")]
    for spec in args.point:
        topics, rate = (int(x) for x in spec.split(":"))
        for linger in lingers:
            print(point(args.bootstrap, topics, rate, linger, args.seconds), flush=True)
    for _ in range(args.bulk_rounds if args.bulk else 0):
        for linger in lingers:
            print(bulk(args.bootstrap, args.bulk, linger), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
