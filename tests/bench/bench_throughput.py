"""Pipeline throughput: how much of raw Kafka speed does the router keep?

A script, not a test (prints figures, asserts nothing).  In ONE run, against one
broker, on one fresh topic prefix:

1. publish N events over S session topics with the publisher SDK
   (``--publisher sdk``, default: ``Publisher``/``Session.tool_call``/``tool_result``,
   i.e. validation + Avro encoding + announcements included) or with pre-encoded
   ``EventSerde`` bytes and a plain idempotent producer (``--publisher raw``);
2. stage ``raw``: a plain confluent-kafka consume->produce passthrough of the same
   session topics into a scratch topic (regex subscription, no decode, no
   transactions, auto-commit) -- the ceiling for a Python Kafka hop;
3. stage ``router``: :class:`streams.router.Router` over the same backlog
   (decode + validate every event, transactions, exactly once);
4. stages ``raw-headers`` and ``raw-txn`` (the ladder): the raw passthrough plus
   the router's ``src.*`` headers, then plus its exactly-once transactions, with
   none of the router's Python, so the gap ``raw`` -> ``router`` splits into what
   the client library charges for the work the router cannot skip and what our
   code adds (``router`` against ``raw-txn``);

and prints events/s for each (wall clock from the first partition assignment to
the last output acknowledged, so group-join time is excluded for both) plus CPU
seconds, and the router/raw ratio.  Stages run in separate consumer groups and
read the same backlog; ``--rounds`` repeats them alternately (the machine may be
shared: compare the CPU figures too).

Hook for later stages: add a function to ``STAGES`` (signature of
:func:`stage_router`); e.g. ``worker``: run the router, then time the Faust worker
until its session table has applied all N events (SDK -> router -> table).

Example::

    KAFKA_BOOTSTRAP=127.0.0.1:9092 python tests/bench/bench_throughput.py \\
        --events 100000 --sessions 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from procs import cpu_seconds

from streams.core.events import TraceEvent
from streams.settings import Settings


@dataclass(frozen=True)
class StageResult:
    name: str
    events: int
    wall_s: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("nan")


@dataclass(frozen=True)
class Context:
    settings: Settings
    events: int
    round: int
    batch_size: int
    guarantee: str = "exactly-once"
    #: the router's batch_max_ms; None: max(100, batch_size // 20)
    batch_ms: int | None = None


def _payload(i: int) -> tuple[dict[str, object], dict[str, object]]:
    cmd = {"command": f"grep -rn 'def handler_{i % 97}' src/ | head -20", "timeout": 30}
    out = {"exit_code": i % 3, "stdout": f"src/mod_{i % 13}.py:{i % 400}: def handler()\n" * 3}
    return cmd, out


def publish(settings: Settings, n: int, sessions: int, how: str) -> tuple[int, float]:
    """Publish n events round-robin over the sessions; returns (count, seconds)."""
    sids = [f"bench-{i:04d}" for i in range(sessions)]
    per = n // sessions
    t0 = time.monotonic()
    if how == "sdk":
        from streams.sdk import Publisher

        with Publisher(settings) as pub:
            pub.ensure_session_topics(sids)
            live = [pub.session(sid, agent_id="bench", task="benchmark") for sid in sids]
            for s in live:
                s.start()  # session_start + announcement
            sent = len(live)
            calls: dict[str, str] = {}
            for k in range(per - 2):  # start + k events + end = per
                for s in live:
                    cmd, out = _payload(k)
                    if k % 2 == 0:
                        calls[s.session_id] = s.tool_call("bash", cmd)
                    else:
                        s.tool_result(calls[s.session_id], out, latency_ms=12)
                    sent += 1
            for s in live:
                s.end()
                sent += 1
            pub.flush(120)
        return sent, time.monotonic() - t0
    from streams.serde import EventSerde

    serde = EventSerde()
    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    for fut in admin.create_topics(
        [NewTopic(settings.session_topic(s), 1, -1) for s in sids]
    ).values():
        fut.result(60)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": "lz4",
        }
    )
    sent = 0
    for seq in range(per):
        for sid in sids:
            cmd, out = _payload(seq)
            ev = TraceEvent(
                type="tool_call" if seq % 2 == 0 else "tool_result",
                session_id=sid,
                seq=seq,
                timestamp_ms=1_700_000_000_000 + seq,
                call_id=f"c{seq // 2}",
                tool_name="bash",
                input=cmd if seq % 2 == 0 else None,
                output=out if seq % 2 else None,
            )
            while True:
                try:
                    producer.produce(settings.session_topic(sid), serde.encode(ev), sid.encode())
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("publish: messages left undelivered after 120 s")
    return sent, time.monotonic() - t0


def backlog(settings: Settings) -> int:
    """Events in the session topics of ``settings.prefix`` (sum of the high watermarks:
    the publishers are not transactional, so every offset is one event)."""
    from confluent_kafka import TopicPartition

    probe = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "bench-probe"})
    try:
        head = f"{settings.prefix}.session."
        topics = probe.list_topics(timeout=10).topics
        total = 0
        for name, meta in topics.items():
            if name.startswith(head):
                for p in meta.partitions:
                    total += probe.get_watermark_offsets(TopicPartition(name, p), 10)[1]
        return total
    finally:
        probe.close()


def stage_raw(ctx: Context, *, headers: bool = False, txn: bool = False) -> StageResult:
    """Consume the session topics and produce every message to a scratch topic.

    The plain passthrough (``raw``) is the ceiling.  The two variants add, one at
    a time, the Kafka-side work the router cannot skip, with none of its Python,
    so the router's gap to ``raw`` splits into what the client library charges
    for that work and what our code adds (``router`` minus ``raw-txn``):

    * ``headers=True`` (``raw-headers``): every record carries the ``src.*``
      headers the router adds (its decode-once contract with the worker: the
      source offset, and the partition when it is not 0);
    * ``txn=True`` (``raw-txn``): also exactly-once, as the router runs by
      default: a transactional producer, the consumer's offsets sent in the
      transaction, a commit per ``--batch-size`` records or ``--batch-ms``.
    """
    from confluent_kafka import TopicPartition

    from streams.router.validate import SRC_OFFSET, SRC_PARTITION

    s = ctx.settings
    scratch = f"{s.prefix}.scratch"
    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    fut = admin.create_topics([NewTopic(scratch, s.events_partitions, -1)])[scratch]
    try:
        fut.result(30)
    except Exception as exc:  # an existing scratch topic (round > 0) is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    consumer = Consumer(
        {
            "bootstrap.servers": s.bootstrap,
            "group.id": f"{s.prefix}.raw.{ctx.round}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": not txn,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    pconf: dict[str, Any] = {"bootstrap.servers": s.bootstrap, "linger.ms": 5}
    if txn:
        pconf["transactional.id"] = f"{s.prefix}.raw.txn.{ctx.round}"
    producer = Producer(pconf)
    if txn:
        producer.init_transactions(30)
    first: list[float] = []

    def on_assign(c: Consumer, parts: list[object]) -> None:
        if not first and parts:
            first.append(time.monotonic())

    consumer.subscribe([s.session_topic_regex], on_assign=on_assign)
    batch_max = ctx.batch_size or 20_000
    batch_s = (ctx.batch_ms if ctx.batch_ms is not None else 100) / 1000.0
    in_txn = 0
    started = 0.0
    moved: dict[tuple[str, int], int] = {}

    def commit() -> None:
        nonlocal in_txn
        offsets = [TopicPartition(t, p, o) for (t, p), o in moved.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        moved.clear()
        in_txn = 0

    done = 0
    cpu0 = time.process_time()
    while done < ctx.events:
        for m in consumer.consume(1000, timeout=0.5 if not in_txn else 0.01):
            if m.error():
                continue
            if txn:
                if not in_txn:
                    producer.begin_transaction()
                    started = time.monotonic()
                in_txn += 1
                moved[(m.topic(), m.partition())] = m.offset() + 1  # type: ignore[arg-type,operator]
            hdrs: Any = None
            if headers:  # as the router writes them
                hdrs = m.headers() or []
                if m.partition():
                    hdrs.append((SRC_PARTITION, b"%d" % m.partition()))
                hdrs.append((SRC_OFFSET, b"%d" % m.offset()))
            while True:
                try:
                    producer.produce(scratch, m.value(), m.key(), headers=hdrs)
                    break
                except BufferError:
                    producer.poll(0.05)
            done += 1
        if in_txn and (in_txn >= batch_max or time.monotonic() - started >= batch_s):
            commit()
        producer.poll(0)
    if in_txn:
        commit()
    if producer.flush(60):
        raise RuntimeError("raw stage: scratch messages left undelivered")
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    consumer.close()
    name = "raw passthrough" + (" + src headers" if headers else "")
    name += " + transactions" if txn else ""
    return StageResult(name, done, end - first[0], cpu)


def stage_raw_headers(ctx: Context) -> StageResult:
    """``raw`` + the router's ``src.*`` headers per record (see :func:`stage_raw`)."""
    return stage_raw(ctx, headers=True)


def stage_raw_txn(ctx: Context) -> StageResult:
    """``raw-headers`` + transactions as the exactly-once router makes them."""
    return stage_raw(ctx, headers=True, txn=True)


def stage_router(
    ctx: Context,
    decoder: Any = None,
    tag: str = "",
    validation: str = "framing",
    background: bool = False,
) -> StageResult:
    """The real router (default: framing + session check, no full decode) over the backlog."""
    from streams.router import Router, RouterConfig

    s = ctx.settings
    config = RouterConfig(
        group_id=f"{s.prefix}.router.{ctx.round}",
        transactional_id=f"{s.prefix}.router.bench.{ctx.round}",
        batch_max_messages=ctx.batch_size,
        # >= the product default (100 ms) unless --batch-ms says otherwise
        batch_max_ms=ctx.batch_ms if ctx.batch_ms is not None else max(100, ctx.batch_size // 20),
        status_interval_s=0,
        guarantee=ctx.guarantee,  # type: ignore[arg-type]
        validation=validation,  # type: ignore[arg-type]
        commit_in_background=background,
    )
    router = Router(s, config, decoder=decoder)
    router.start()
    cpu0 = time.process_time()
    stats = router.run(until=lambda st: st.routed + st.dead_lettered >= ctx.events)
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    helper = router.admin_helper_pid  # started during the run: all its CPU is the run's
    cpu += cpu_seconds(helper) if helper is not None else 0.0
    router.close()
    assert router.first_assigned_at is not None
    if stats.dead_lettered:
        print(f"  (router dead-lettered {stats.dead_lettered} events: check the publisher)")
    return StageResult(
        f"router{'-' + tag if tag else ''} ({ctx.guarantee}, batch {ctx.batch_size}: "
        f"{stats.transactions or stats.offset_commits} commits, "
        f"commit-wait {stats.commit_s:.2f} s)",
        stats.routed + stats.dead_lettered,
        end - router.first_assigned_at,
        cpu,
    )


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


class LeadingFieldsDecoder:
    """MEASUREMENT AID ONLY (stage ``router-lite``), never used by the product.

    Checks the single-object header and reads the four leading Avro fields (type,
    session_id, seq, timestamp_ms) by hand, skipping the rest of the body: it
    shows how fast the router's Kafka/transaction machinery is without the full
    decode, i.e. how much of the gap to ``raw`` is decoding.
    """

    def __init__(self) -> None:
        import struct

        from streams.serde import EventSerde, load_schema

        self._header = b"\xc3\x01" + struct.pack("<Q", EventSerde().fingerprint)
        fields = load_schema("trace_event")["fields"]
        assert [f["name"] for f in fields[:4]] == ["type", "session_id", "seq", "timestamp_ms"]
        self._symbols = fields[0]["type"]["symbols"]

    def decode(self, data: bytes) -> TraceEvent:
        from streams.errors import MalformedMessageError

        if data[:10] != self._header:
            raise MalformedMessageError("not a single-object TraceEvent")
        idx, pos = _varint(data, 10)
        n, pos = _varint(data, pos)
        sid = data[pos : pos + n].decode("utf-8")
        seq, pos = _varint(data, pos + n)
        ts, pos = _varint(data, pos)
        return TraceEvent(type=self._symbols[idx], session_id=sid, seq=seq, timestamp_ms=ts)


def stage_router_lite(ctx: Context) -> StageResult:
    """The router with :class:`LeadingFieldsDecoder` (measurement only)."""
    res = stage_router(ctx, decoder=LeadingFieldsDecoder(), tag="lite")
    return StageResult(res.name, res.events, res.wall_s, res.cpu_s)


def stage_router_full(ctx: Context) -> StageResult:
    """The router with ``validation="full"``: a full Avro decode + checks per event."""
    return stage_router(ctx, tag="full", validation="full")


def stage_router_background(ctx: Context) -> StageResult:
    """The router committing in the background (``commit_in_background=True``): the
    A/B partner of ``router`` (exactly-once; at-least-once the two are the same)."""
    return stage_router(ctx, tag="background", background=True)


#: name -> stage.  Add "worker" here when the Faust worker lands (see module doc).
STAGES: dict[str, Callable[[Context], StageResult]] = {
    "raw": stage_raw,
    "raw-headers": stage_raw_headers,
    "raw-txn": stage_raw_txn,
    "router": stage_router,
    "router-full": stage_router_full,
    "router-lite": stage_router_lite,
    "router-background": stage_router_background,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=6, help="partitions of <prefix>.events")
    ap.add_argument("--publisher", choices=("sdk", "raw"), default="sdk")
    ap.add_argument("--stages", default="raw,router", help=f"comma list of {', '.join(STAGES)}")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--batch-size",
        default="20000",
        help="router messages per transaction; a comma list runs the router once per size",
    )
    ap.add_argument(
        "--batch-ms",
        type=int,
        default=100,
        help="the router's batch_max_ms (default 100, the product's; 0: max(100, batch size "
        "/ 20), the rule before issue #12)",
    )
    ap.add_argument(
        "--guarantee",
        choices=("exactly-once", "at-least-once"),
        default="exactly-once",
        help="the router's processing guarantee (router stages)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the bench topics afterwards")
    ap.add_argument(
        "--reuse",
        metavar="PREFIX",
        help="route the backlog a previous --keep run left under PREFIX (no publishing; "
        "implies --keep); every stage round uses a new consumer group",
    )
    ap.add_argument(
        "--json",
        metavar="PATH",
        help="also write every stage round (events, wall and CPU seconds, events/s) to "
        "PATH as JSON (bench_aims.py reads it)",
    )
    args = ap.parse_args(argv)

    prefix = args.reuse or "bench" + uuid.uuid4().hex[:10]
    settings = Settings(bootstrap=args.bootstrap, prefix=prefix, events_partitions=args.partitions)
    if args.reuse:
        args.keep = True
        n = backlog(settings)
        print(f"prefix {prefix}: reusing its backlog of {n} events")
    else:
        print(f"prefix {prefix}, {args.events} events over {args.sessions} sessions")
        n, secs = publish(settings, args.events, args.sessions, args.publisher)
        print(
            f"published {n} events with the {args.publisher} publisher in {secs:.1f} s "
            f"({n / secs:,.0f} events/s)"
        )
    results: dict[str, list[StageResult]] = {}
    # consumer groups / transactional ids are per round: new ones on every reuse run
    base = int(time.time()) % 100_000 * 10_000 if args.reuse else 0
    try:
        for r in range(args.rounds):
            runs = [
                (name, int(b))
                for name in args.stages.split(",")
                for b in (
                    args.batch_size.split(",")
                    if name.startswith("router") or name == "raw-txn"
                    else ["0"]
                )
            ]
            for k, (name, batch) in enumerate(runs):
                res = STAGES[name](
                    Context(
                        settings,
                        n,
                        base + r * 100 + k,
                        batch,
                        args.guarantee,
                        args.batch_ms or None,
                    )
                )
                results.setdefault(name, []).append(res)
                print(
                    f"round {r}: {res.name:40s} {res.events} events in {res.wall_s:6.2f} s "
                    f"= {res.rate:9,.0f} events/s  (cpu {res.cpu_s:5.1f} s, "
                    f"{res.events / res.cpu_s:,.0f} events/cpu-s)"
                )
    finally:
        if not args.keep:
            admin = AdminClient({"bootstrap.servers": args.bootstrap})
            topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
            if topics:
                admin.delete_topics(topics)
    if args.json:
        rounds = {
            name: [
                {"events": x.events, "wall_s": x.wall_s, "cpu_s": x.cpu_s, "events_per_s": x.rate}
                for x in runs
            ]
            for name, runs in results.items()
        }
        Path(args.json).write_text(
            json.dumps({"prefix": prefix, "guarantee": args.guarantee, "stages": rounds}, indent=1)
        )
    if "raw" in results and "router" in results:
        best_raw = max(x.rate for x in results["raw"])
        best_router = max(x.rate for x in results["router"])
        cpu_raw = min(x.cpu_s / x.events for x in results["raw"])
        cpu_router = min(x.cpu_s / x.events for x in results["router"])
        print(
            f"router/raw throughput (best of {args.rounds}): {best_router / best_raw:.0%}  "
            f"[{best_router:,.0f} vs {best_raw:,.0f} events/s]; "
            f"CPU per event: router {cpu_router * 1e6:.1f} us, raw {cpu_raw * 1e6:.1f} us"
        )
    if "raw" in results:
        # the ladder: what each Kafka-side addition costs, then what our code adds
        best_raw = max(x.rate for x in results["raw"])
        for name in ("raw-headers", "raw-txn"):
            if name in results:
                best = max(x.rate for x in results[name])
                cpu = min(x.cpu_s / x.events for x in results[name])
                print(
                    f"{name}/raw throughput (best of {args.rounds}): {best / best_raw:.0%}  "
                    f"[{best:,.0f} events/s]; CPU per event: {name} {cpu * 1e6:.1f} us"
                )
    if "raw" in results and "router-background" in results:
        best_raw = max(x.rate for x in results["raw"])
        best_bg = max(x.rate for x in results["router-background"])
        cpu_bg = min(x.cpu_s / x.events for x in results["router-background"])
        print(
            f"router-background/raw throughput (best of {args.rounds}): "
            f"{best_bg / best_raw:.0%}  [{best_bg:,.0f} events/s]; "
            f"CPU per event: router-background {cpu_bg * 1e6:.1f} us"
        )
    if "raw" in results and "router-full" in results:
        best_raw = max(x.rate for x in results["raw"])
        best_full = max(x.rate for x in results["router-full"])
        cpu_full = min(x.cpu_s / x.events for x in results["router-full"])
        print(
            f"router-full/raw throughput (best of {args.rounds}): {best_full / best_raw:.0%}  "
            f"[{best_full:,.0f} events/s]; CPU per event: router-full {cpu_full * 1e6:.1f} us"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
