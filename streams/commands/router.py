"""Route every agent session into one stream: <prefix>.session.* -> <prefix>.events.

Agents publish Avro TraceEvents on one topic per session (<prefix>.session.<id>).
The router subscribes to all of them by regex, checks each message (decodes it,
its session_id must match the topic, seq >= 0, known type, size <= the cap) and
either forwards the original bytes to <prefix>.events keyed by session id, or
writes it to <prefix>.dlq with headers dlq.reason / dlq.error_class /
dlq.source.{topic,partition,offset}.  It never loses an event, in either mode.

Processing guarantee (--guarantee, like Kafka Streams' processing.guarantee):
  exactly-once   (default) one Kafka transaction per batch, offsets committed in
                 it: read_committed consumers (the worker) see nothing twice, even
                 after a crash.  Latency: an event is visible only when its
                 transaction commits, i.e. >= the batch window (--batch-ms while
                 events keep coming) + the commit round trips, which also block
                 the router loop.
  at-least-once  lowest latency: an idempotent producer (acks=all, no
                 transactions) forwards each event as soon as it is read; it is
                 visible once the broker has it.  Offsets are committed every
                 --batch-ms / --batch-size after a producer flush, never past an
                 undelivered event (a delivery error stops the router).  A crash
                 repeats up to one commit interval of events (and dead letters) in
                 <prefix>.events: the worker applies each (session_id, seq) once,
                 so its state is unchanged, and any output it repeats is an
                 identifiable duplicate (same session_id, seq, ...).

New sessions are picked up by the regex metadata refresh (--refresh-ms) and,
faster, when the SDK announces them on <prefix>.control.

Examples:
  trajectory router                                  # defaults: 127.0.0.1:9092, prefix traj
  trajectory router --prefix prod --partitions 12    # create prod.events with 12 partitions
  trajectory router --transactional-id traj.router.1 # a second instance (ids must differ)
  trajectory router --shard 0/2 & trajectory router --shard 1/2
                                                     # two static shards: no group rebalances
  trajectory router --batch-size 500 --batch-ms 50   # smaller transactions, lower latency
  trajectory router --guarantee at-least-once        # lowest latency; duplicates after a crash

Every --status-every seconds it logs one line: routed/DLQ totals and rates.
--metrics-port N serves Prometheus metrics on 127.0.0.1:N/metrics (events by
type, DLQ by error class, per-partition consumer lag, transaction times).
SIGTERM or Ctrl-C commits the open transaction (at-least-once: flushes and
commits the offsets) and exits 0.  Each instance is a static group member named
by its transactional id (in both modes): a restart with the same id resumes at
once; a stopped instance's partitions move to the others after the 10 s session
timeout.  With --shard I/N an instance joins no group: it takes the session topics
whose id hashes to I itself (a new topic at its next metadata refresh), so session
churn rebalances nothing; a stopped shard's topics wait for its restart.
A fatal error stops the router with the reason and exit code 4 when Kafka
failed (e.g. fenced by another instance with the same id, an undeliverable event), 2
for bad usage (a flag or setting); 3 when the stop grace ran out after SIGTERM.
SIGUSR1 prints every thread's stack to stderr and leaves the router running: where
a router that routes nothing waits.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.router.config import RouterConfig
    from streams.router.shards import Shard

#: Environment default of --guarantee (the flag wins).
GUARANTEE_ENV = "TRAJECTORY_ROUTER_GUARANTEE"
#: Environment default of --client-debug (the flag wins): librdkafka debug contexts.
CLIENT_DEBUG_ENV = "TRAJECTORY_ROUTER_CLIENT_DEBUG"
_GUARANTEES = ("exactly-once", "at-least-once")


def guarantee_arg(value: str) -> str:
    """``--guarantee`` value; Kafka Streams' spellings (``at_least_once``,
    ``exactly_once_v2``) are accepted too."""
    norm = value.strip().lower().replace("_", "-")
    if norm == "exactly-once-v2":
        norm = "exactly-once"
    if norm not in _GUARANTEES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a processing guarantee: use exactly-once or at-least-once "
            f"(also for ${GUARANTEE_ENV})"
        )
    return norm


def shard_arg(value: str) -> Shard:
    """``--shard I/N``."""
    from streams.errors import ConfigError
    from streams.router.shards import Shard

    try:
        return Shard.parse(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _linger_arg(value: str) -> int:
    try:
        ms = int(value)
    except ValueError:
        ms = -1
    if not 0 <= ms <= 1000:
        raise argparse.ArgumentTypeError(f"{value!r}: must be an integer 0..1000")
    return ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.router.config import RouterConfig  # pure (no Kafka client import)

    defaults = RouterConfig()
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")
    parser.add_argument(
        "--partitions",
        type=int,
        help="partitions of <prefix>.events when the router creates it "
        "(default: $TRAJECTORY_EVENTS_PARTITIONS or 6); an existing topic is kept as is",
    )
    parser.add_argument(
        "--transactional-id",
        help="stable id of THIS router instance (default <prefix>.router.0). Restarting with "
        "the same id aborts the dead instance's open transaction; two live instances "
        "need different ids",
    )
    parser.add_argument(
        "--group-id", help="consumer group shared by all router instances (default <prefix>.router)"
    )
    parser.add_argument(
        "--shard",
        type=shard_arg,
        metavar="I/N",
        help="static shard I of N (e.g. 0/2 and 1/2 for two routers): this router assigns "
        "itself the session topics whose id hashes to I, and joins no group, so a new "
        "session topic rebalances nothing (default: share the topics out through the "
        "group). Run each I of one N exactly once; change N only with every router "
        "stopped; a shard stops (exit code 2) when routers without --shard share its "
        "group. Default transactional id <prefix>.router.shard-I-of-N",
    )
    parser.add_argument(
        "--guarantee",
        type=guarantee_arg,
        choices=_GUARANTEES,
        default=os.environ.get(GUARANTEE_ENV) or "exactly-once",
        help=f"exactly-once (default; ${GUARANTEE_ENV} overrides it): transactions, "
        "downstream read_committed consumers see nothing twice, latency >= batch window (or "
        "--batch-idle-ms once caught up) + commit round trips. at-least-once: lowest latency, "
        "a crash can repeat up to one commit interval of events (the worker's seq dedupe "
        "keeps its state exact; repeated outputs are identifiable duplicates). See above",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=defaults.batch_max_messages,
        help="commit a transaction (at-least-once: the offsets) after this many messages "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--batch-ms",
        type=int,
        default=defaults.batch_max_ms,
        help="... or after it has been open this many ms (default %(default)s). Exactly-once: "
        "bounds the added latency. At-least-once: the offset commit interval, adds no "
        "latency, bounds what a crash repeats",
    )
    parser.add_argument(
        "--batch-idle-ms",
        type=int,
        default=defaults.batch_idle_ms,
        help="exactly-once: commit a transaction before --batch-ms once the router has caught "
        "up (nothing more fetched) and it is at least this many ms old (default %(default)s; "
        "0: off, every transaction waits out --batch-ms). Lower: events visible sooner; "
        "with --fetch-min-bytes 1 fetches come every few ms, so up to one commit (broker "
        "round trips, CPU) per this many ms plus the commit time",
    )
    parser.add_argument(
        "--commit-in-background",
        action="store_true",
        help="exactly-once: commit each transaction in a helper thread while the next batch "
        "is read and checked (its records are produced once the commit returns). Off by "
        "default: no gain measured on a 2-core box shared with the broker; worth trying "
        "where the broker is remote and the router has a spare core (docs/kafka-notes.md)",
    )
    parser.add_argument(
        "--linger-ms",
        type=_linger_arg,
        default=None,
        help="producer linger.ms (default: 5 exactly-once, 1 at-least-once; 0 is ~1 ms faster "
        "but routes a backlog ~20%% slower)",
    )
    parser.add_argument(
        "--refresh-ms",
        type=int,
        default=defaults.metadata_refresh_ms,
        help="metadata refresh period: bounds new-topic pickup without announcements "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--fetch-wait-ms",
        type=int,
        default=defaults.fetch_wait_max_ms,
        help="broker long-poll per fetch (default %(default)s): with --fetch-min-bytes, how "
        "often a trickle of events is fetched; also delays a new topic's first fetch",
    )
    parser.add_argument(
        "--fetch-min-bytes",
        type=int,
        default=defaults.fetch_min_bytes,
        help="answer a fetch once this many bytes are ready, else after --fetch-wait-ms "
        "(default %(default)s: a fetch per wait under a trickle, ~1/3 less CPU for broker, "
        "router and worker at 1,000 live topics, +~35 ms p50 routing); 1 fetches per "
        "arriving event: lowest latency, much more CPU with thousands of session topics",
    )
    parser.add_argument(
        "--validation",
        choices=("framing", "full"),
        default=defaults.validation,
        help="framing (default): check framing, schema fingerprint and the body's session id "
        "without a full Avro decode; the worker decodes every event anyway and dead-letters "
        "the rest with the source coordinates. full: decode and check every event here, so "
        "<prefix>.events holds only fully valid events (for consumers other than the worker; "
        "~3x the router's CPU per event)",
    )
    parser.add_argument(
        "--paused-check-s",
        type=float,
        default=defaults.paused_check_s,
        help="pause the session topic of an ended session (session_end routed) so fetches "
        "skip it, and look for new records on paused ones every this many seconds "
        "(default %(default)s; 0: never pause)",
    )
    parser.add_argument(
        "--no-announcements",
        action="store_true",
        help="ignore <prefix>.control session announcements (rely on --refresh-ms alone)",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        help="messages larger than this go to the DLQ (default: $TRAJECTORY_MAX_MESSAGE_BYTES "
        "or 1 MiB)",
    )
    parser.add_argument(
        "--status-every",
        type=float,
        default=10.0,
        help="seconds between status lines (0: none; default 10)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics (conventional: 9464; "
        "default 0 = off)",
    )
    parser.add_argument(
        "--client-debug",
        default=os.environ.get(CLIENT_DEBUG_ENV) or None,
        metavar="CONTEXTS",
        help="librdkafka debug contexts for the router's consumer and producer, logged to "
        "stderr, e.g. 'cgrp,eos' to follow group generations and transactions after a broker "
        f"restart (default: ${CLIENT_DEBUG_ENV} or none; see librdkafka's CONFIGURATION.md "
        "'debug')",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def router_config(args: argparse.Namespace) -> RouterConfig:
    """The :class:`RouterConfig` the parsed command line asks for (one place, tested)."""
    from streams.router.config import RouterConfig

    return RouterConfig(
        transactional_id=args.transactional_id,
        group_id=args.group_id,
        shard=args.shard,
        guarantee=args.guarantee,
        linger_ms=args.linger_ms,
        batch_max_messages=args.batch_size,
        batch_max_ms=args.batch_ms,
        batch_idle_ms=args.batch_idle_ms,
        commit_in_background=args.commit_in_background,
        metadata_refresh_ms=args.refresh_ms,
        fetch_wait_max_ms=args.fetch_wait_ms,
        fetch_min_bytes=args.fetch_min_bytes,
        validation=args.validation,
        use_announcements=not args.no_announcements,
        paused_check_s=args.paused_check_s,
        status_interval_s=args.status_every,
    )


def run(args: argparse.Namespace) -> int:
    import faulthandler
    import signal

    from streams.router import Router
    from streams.settings import Settings

    # A native abort inside librdkafka (seen once after a broker restart: an
    # assertion in rd_kafka_enq_once_del_source_return) otherwise kills the process
    # without a word; with this, stderr shows every Python thread's stack, i.e.
    # which client call was under way.
    faulthandler.enable()
    # SIGUSR1: the same dump on demand, the process left running (what a router that
    # routes nothing waits on; the chaos driver sends it on a routing stall).
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings().with_(
        bootstrap=args.bootstrap,
        prefix=args.prefix,
        events_partitions=args.partitions,
        max_message_bytes=args.max_message_bytes,
    )
    config = router_config(args)
    metrics = None
    if args.metrics_port:
        from streams.router.metrics import RouterMetrics

        metrics = RouterMetrics()
        metrics.serve(args.metrics_port)
        logging.getLogger("streams.router").info(
            "metrics on http://127.0.0.1:%d/metrics", args.metrics_port
        )
    debug = {"debug": args.client_debug} if args.client_debug else {}
    router = Router(
        settings,
        config,
        metrics=metrics,
        extra_consumer_config=debug,
        extra_producer_config=debug,
    )
    log = logging.getLogger("streams.router")
    stop_requested: list[float] = []

    def stop(signum: int, frame: object) -> None:
        log.info("%s: committing the open batch and stopping", signal.Signals(signum).name)
        if not stop_requested:
            stop_requested.append(time.monotonic())
        router.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    final = _run_in_thread(router, stop_requested, log)
    if config.exactly_once:
        commits = f"{final.transactions} transactions, {final.aborts} aborted"
    else:
        commits = f"{final.offset_commits} offset commits, {final.failed_commits} refused"
    logging.getLogger("streams.router").info(
        "stopped: routed %d, dead-lettered %d, %s (%s)",
        final.routed,
        final.dead_lettered,
        commits,
        config.guarantee,
    )
    if router.close_abandoned:
        # The consumer is still closing in a helper thread (the broker stopped
        # answering): the interpreter's exit would destroy it mid-close and can
        # wait for it; nothing is left to do, so leave now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


#: After SIGTERM/SIGINT the router gets this long to commit and close by itself
#: (it sees the stop within ``CALL_TIMEOUT_S`` even when the broker is down);
#: then the process exits anyway, loudly, with :data:`EXIT_STOP_TIMEOUT`.
STOP_GRACE_S = 15.0
EXIT_STOP_TIMEOUT = 3  # streams.errors.EXIT_STOP_TIMEOUT


def _run_in_thread(router: Any, stop_requested: list[float], log: Any) -> Any:
    """start/run/close the router in a worker thread; the main thread only waits.

    Why: Python runs signal handlers in the main thread, between bytecodes, so a
    main thread blocked inside a librdkafka call (seen: ``send_offsets_to_transaction``
    with the broker down) would sit on SIGTERM.  Here the main thread waits in
    short ``join`` slices, the handler runs at once, and if the router has not
    stopped :data:`STOP_GRACE_S` after the signal the process exits without it.
    Nothing is lost that way either: an uncommitted transaction is aborted when
    this transactional id starts again, uncommitted offsets are routed again.
    """
    result: list[Any] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            router.start()
            try:
                result.append(router.run())
            finally:
                router.close()
        except BaseException as exc:  # handed to the main thread, raised there
            failure.append(exc)

    worker = threading.Thread(target=body, name="router", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
        if stop_requested and time.monotonic() - stop_requested[0] > STOP_GRACE_S:
            log.error(
                "the router did not stop within %.0f s of the stop signal (broker "
                "unreachable?); exiting without it: nothing committed is lost, the open "
                "batch is routed again by the next start",
                STOP_GRACE_S,
            )
            logging.shutdown()
            os._exit(EXIT_STOP_TIMEOUT)
    if failure:
        raise failure[0]
    return result[0]


def main(argv: list[str] | None = None) -> int:
    """``python -m streams.commands.router``: the same command without the CLI front."""
    parser = argparse.ArgumentParser(
        prog="trajectory router",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    from streams.errors import TrajectoryError, exit_code

    try:
        return run(args)
    except TrajectoryError as exc:  # same contract as the `trajectory` front
        print(f"trajectory router: error: {exc}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    raise SystemExit(main())
