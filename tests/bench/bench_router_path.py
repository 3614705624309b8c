"""The router's per-message path in one process, no broker: CPU microseconds per stage.

A script, not a test (prints figures, asserts nothing).  ``bench_throughput.py``
measures the real router on a broker, where raw passthrough itself moves ±10 %
between runs; this runs the router's own loop on ``Message`` objects built in
Python (``tool_call`` events over ``--sessions`` session topics) and a
``Producer`` pointed at no broker (records queue locally and are purged after
each round), so a change to the hot path shows as microseconds per message:

* ``route``: ``Router._route`` on batches of ``--batch`` messages (the check, the
  bookkeeping, the ``src.*`` headers, ``produce``), inside an open transaction
  (on a tree from before ``_route``, ``Router._handle`` per message: run this
  script there with ``PYTHONPATH`` set to that tree for a before/after);
* ``check``: ``RoutingCheck`` alone (``msg.value()``/``msg.topic()`` included);
* ``accessors``: the seven ``Message`` calls the loop makes;
* ``produce``: the bare ``produce`` call with no headers, with the router's one
  ``src.offset`` header, and with the three headers routers wrote before
  (``src.topic``/``src.partition``/``src.offset``): what a header costs in the
  call itself; and the one-header call with positional arguments only, as the
  router makes it (keyword parsing cost ~0.3 us of it).

Each figure is the minimum (and median) over ``--rounds`` rounds of wall time per
message on this otherwise idle process.

Example::

    python tests/bench/bench_router_path.py [--messages 20000] [--rounds 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Message, Producer

from streams.core.events import TraceEvent
from streams.router import Router, RouterConfig
from streams.serde import EventSerde
from streams.settings import Settings

Headers = list[tuple[str, str | bytes | None]]


def messages(settings: Settings, n: int, sessions: int) -> list[Message]:
    serde = EventSerde()
    out = []
    for i in range(n):
        sid = f"sess-{i % sessions:04d}"
        seq = i // sessions
        ev = TraceEvent(
            "tool_call",
            sid,
            seq,
            1_700_000_000_000 + i,
            call_id=f"c{i}",
            tool_name="bash",
            input={"command": "ls -la /tmp", "timeout": 30},
        )
        out.append(
            Message(
                topic=settings.session_topic(sid),
                partition=0,
                offset=seq,
                key=sid.encode(),
                value=serde.encode(ev),
                headers=None,
                timestamp=(1, 1_700_000_000_000 + i),
            )
        )
    return out


def nowhere() -> Producer:
    """A producer whose records only queue (no broker answers 127.0.0.1:1)."""
    return Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 4_000_000,
            "log_level": 0,
        }
    )


def timed(
    fn: Callable[[], Any], n: int, rounds: int, after: Callable[[], None]
) -> tuple[float, float]:
    """(min, median) microseconds per message of ``fn`` over ``rounds`` rounds."""
    res = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        res.append((time.perf_counter() - t0) / n * 1e6)
        after()
    res.sort()
    return res[0], res[len(res) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1000, help="messages per _route call")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument(
        "--guarantee", choices=("exactly-once", "at-least-once"), default="exactly-once"
    )
    args = ap.parse_args(argv)

    settings = Settings(bootstrap="127.0.0.1:1", prefix="traj")
    msgs = messages(settings, args.messages, args.sessions)
    n = len(msgs)
    producer = nowhere()
    router = Router(
        settings,
        RouterConfig(guarantee=args.guarantee, status_interval_s=0),
    )
    router._producer = producer
    router._in_txn = True  # an open transaction: no begin_transaction to a broker
    batches = [msgs[i : i + args.batch] for i in range(0, n, args.batch)]

    def reset() -> None:
        producer.purge()
        producer.poll(0)
        router._uncommitted.clear()
        router._first.clear()

    def route() -> None:
        for b in batches:
            router._route(b)

    def handle() -> None:  # trees before Router._route: one call per message
        for m in msgs:
            router._handle(m)  # type: ignore[attr-defined]

    events = settings.events_topic
    old_topic = ("src.topic", settings.session_topic("sess-0000").encode())

    def one_header(m: Message) -> Headers:
        return [("src.offset", b"%d" % (m.offset() or 0))]

    def three_headers(m: Message) -> Headers:
        return [old_topic, ("src.partition", b"0"), ("src.offset", b"%d" % (m.offset() or 0))]

    def produce_all(headers: Callable[[Message], Headers | None]) -> None:
        for m in msgs:
            producer.produce(events, m.value(), m.key(), timestamp=1, headers=headers(m))

    def produce_positional(headers: Callable[[Message], Headers | None]) -> None:
        # as the router calls it since issue #12's positional produce: the same
        # record, no keyword parsing (partition -1 = any, no per-message callback)
        for m in msgs:
            producer.produce(events, m.value(), m.key(), -1, None, None, 1, headers(m))

    check = router._check
    rows: list[tuple[str, Callable[[], Any]]] = [
        (
            f"route (Router._route, {args.guarantee})"
            if hasattr(router, "_route")
            else f"route (Router._handle per message, {args.guarantee})",
            route if hasattr(router, "_route") else handle,
        ),
        ("check (RoutingCheck)", lambda: [check(m.value(), m.topic() or "") for m in msgs]),
        (
            "accessors (7 Message calls)",
            lambda: [
                (m.error(), m.topic(), m.partition(), m.offset(), m.value(), m.key(), m.timestamp())
                for m in msgs
            ],
        ),
        ("produce, no headers", lambda: produce_all(lambda m: None)),
        ("produce, one src.offset header", lambda: produce_all(one_header)),
        ("produce, the three headers of older routers", lambda: produce_all(three_headers)),
        (
            "produce, one header, positional arguments",
            lambda: produce_positional(one_header),
        ),
    ]
    print(f"{n} messages over {args.sessions} session topics, {args.rounds} rounds (min / median)")
    for name, fn in rows:
        lo, med = timed(fn, n, args.rounds, reset)
        print(f"  {name:<46} {lo:6.2f} / {med:6.2f} us per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
