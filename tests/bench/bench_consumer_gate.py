"""Does confluent-kafka serialize a client's calls across threads?  Prints how long.

Why: confluent-kafka 2.16 gates a ``Consumer`` (confluentinc/confluent-kafka-python
#2322): a call from one thread waits until another thread's call has returned.  So a
blocking call cannot be bounded by running it in a helper thread, and a helper
thread cannot call the consumer while the loop's thread is inside ``consume()``
(a rebalance callback).  The router's at-least-once offset commits are asynchronous
because of it (docs/kafka-notes.md "confluent-kafka 2.16 serializes a consumer's
calls").  Run this again after a confluent-kafka upgrade.

It starts a broker of its own (it freezes it with SIGSTOP: never a shared one),
then measures three cases, printing seconds:

1. a synchronous ``commit`` hangs in a helper thread (broker frozen); how long do
   ``list_topics(timeout=2)``, ``consume(timeout=0)`` and ``position()`` from the
   main thread take (each given ``--wait`` seconds before it counts as blocked);
2. the same for a ``Producer``: ``flush`` hangs in a helper, ``produce`` +
   ``poll(0)`` from the main thread;
3. inside ``on_revoke``: a commit handed to a helper thread against one made in the
   callback's own thread.

``python tests/bench/bench_consumer_gate.py [--wait 8]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition, libversion, version
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from procs import frozen  # noqa: E402

from streams.broker import LocalBroker, free_port  # noqa: E402

TOPIC = "gate-probe"


def timed(call: Callable[[], object], wait_s: float) -> str:
    """``call()`` in a thread of its own, waited for ``wait_s``: its time or 'blocked'."""
    took: list[str] = []

    def run() -> None:
        t0 = time.monotonic()
        outcome = ""
        try:
            call()
        except Exception as exc:  # (an error is an answer too: say which)
            outcome = f" ({type(exc).__name__}: {exc})"
        took.append(f"{time.monotonic() - t0:.3f} s{outcome}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(wait_s)
    return took[0] if took else f"still blocked after {wait_s:g} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--wait", type=float, default=8.0, help="seconds before a call counts as blocked"
    )
    args = ap.parse_args(argv)
    client: Any = version()  # (a str in 2.16, a (str, int) tuple before)
    client = client[0] if isinstance(client, tuple) else client
    print(f"confluent-kafka {client}, librdkafka {libversion()[0]}")
    broker = LocalBroker(
        Path(tempfile.mkdtemp(prefix="bench-gate-broker-")),
        port=free_port(),
        controller_port=free_port(),
    )
    broker.start()
    try:
        pid = broker.status().pid
        assert pid is not None
        conf = {"bootstrap.servers": broker.bootstrap}
        admin = AdminClient(conf)  # (kept: a freed client cancels its futures)
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        tp = TopicPartition(TOPIC, 0, 0)

        print("1. consumer: a synchronous commit hangs in a helper thread (broker frozen)")
        c = Consumer({**conf, "group.id": "gate-probe-1", "enable.auto.commit": False})
        c.assign([tp])
        c.commit(offsets=[tp], asynchronous=False)
        with frozen(pid):
            threading.Thread(
                target=lambda: c.commit(offsets=[tp], asynchronous=False), daemon=True
            ).start()
            time.sleep(0.5)
            for name, call in (
                ("list_topics(timeout=2)", lambda: c.list_topics(timeout=2)),
                ("consume(timeout=0)", lambda: c.consume(num_messages=1, timeout=0)),
                ("position()", lambda: c.position([TopicPartition(TOPIC, 0)])),
            ):
                print(f"   {name} from the main thread: {timed(call, args.wait)}")
        c.close()

        print("2. producer: flush hangs in a helper thread (broker frozen)")
        p = Producer({**conf, "linger.ms": 0})
        p.produce(TOPIC, b"x")
        p.flush(10)
        with frozen(pid):
            p.produce(TOPIC, b"y")
            threading.Thread(target=lambda: p.flush(args.wait), daemon=True).start()
            time.sleep(0.3)
            print(
                "   produce + poll(0) from the main thread: "
                + timed(lambda: (p.produce(TOPIC, b"z"), p.poll(0)), args.wait)
            )
        p.flush(30)

        print("3. inside on_revoke: a commit in a helper thread, then in the callback's")
        lines: list[str] = []

        def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
            if not parts:
                return
            lines.append(
                "   helper thread: "
                + timed(lambda: consumer.commit(offsets=[tp], asynchronous=False), args.wait)
            )
            t0 = time.monotonic()
            consumer.commit(offsets=[tp], asynchronous=False)
            lines.append(f"   the callback's own thread: {time.monotonic() - t0:.3f} s")

        c = Consumer(
            {
                **conf,
                "group.id": "gate-probe-3",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        c.subscribe([TOPIC], on_revoke=on_revoke)
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.consume(num_messages=1, timeout=0.2)
        c.unsubscribe()
        deadline = time.monotonic() + 30
        while len(lines) < 2 and time.monotonic() < deadline:
            c.consume(num_messages=1, timeout=0.2)
        print("\n".join(lines) or "   (no revoke seen within 30 s)")
        c.close()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
