"""Run the Faust worker: it consumes <prefix>.events and keeps, per session,
changelog-backed tables that survive restarts and crashes:

  sessions  counters (events, tool calls, errors, tokens, last seq) + recent events
  budgets   the latest budget event + model_step tokens seen since
  minutes   tool calls and errors per session per event-time minute
  engines   the core detector/observer engine state (patterns, assessments)

Each event is applied exactly once per table: a redelivered event (same or
older seq) is ignored, so a crash + restart never double-counts.  Messages that
cannot be decoded, or that the engine rejects, go to <prefix>.dlq with
dlq.reason / dlq.error_class / dlq.source.* headers.

What it publishes (keyed by session id):
  <prefix>.patterns             every pattern a detector fired
  <prefix>.assessments          the latest assessment per session (compacted)
  <prefix>.assessment-history   every assessment
  <prefix>.snapshots            restore points taken by `snapshot` events (compacted)

The tables live in RocksDB files under --data-dir (recovered incrementally from
Kafka changelog topics on start) or in memory (--store memory: rebuilt from the
changelogs on every start).  A read-only HTTP view listens on 127.0.0.1:

  curl http://127.0.0.1:6066/sessions/<session_id>/state
  curl http://127.0.0.1:6066/sessions/<session_id>/minutes

Examples:
  trajectory worker                                  # traj.events, ./traj-observer-data
  trajectory worker --prefix demo --store memory --web-port 6067
  KAFKA_BOOTSTRAP=kafka:9092 trajectory worker --data-dir /var/lib/trajectory
  trajectory worker --engine-flush-interval 5        # tables closer to live, more CPU
                                                     # (a crash re-processes up to ~11 s)
  trajectory worker --worker-id w1 --data-dir /var/lib/trajectory
      # static group member: restarted after a crash (same id and --web-port) it
      # takes its partitions back at once (docs/guarantees.md "Restarts")

Stop it with Ctrl-C (or SIGTERM): it commits and shuts down cleanly; a stop that
takes longer than --stop-timeout is logged with every stack and ends with exit code 3.
A worker that stops itself says why on a CRITICAL line and exits non-zero: 4 when
Kafka failed it (a write not acknowledged, a seek to the committed offsets that did
not end within --seek-timeout), 1 for a bug.  Run it under a supervisor that
restarts it: a restart re-applies what was not committed and loses nothing.

Where latency goes: TRAJECTORY_WORKER_TRACE=/tmp/worker-trace.jsonl makes the worker
write one JSON line per fetch (its records' publish times), per commit (flush phases),
per GC pause >= 1 ms and per event-loop callback that held a thread >= 5 ms (off by
default; docs/kafka-notes.md "Where the p99 goes at 1,000 events/s").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from streams.errors import EXIT_STOP_TIMEOUT, ConfigError, TrajectoryError, exit_code
from streams.worker.config import (
    DEFAULT_ENGINE_FLUSH_INTERVAL_S,
    DEFAULT_SEEK_TIMEOUT_S,
    WorkerConfig,
)

#: ``gc.set_threshold`` of a worker process (why: see :func:`run`); the benches
#: that model the worker's path in one process set the same.
WORKER_GC_THRESHOLDS: tuple[int, int, int] = (10_000, 10, 100)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers host:port[,...] (env KAFKA_BOOTSTRAP)"
    )
    parser.add_argument("--prefix", help="topic prefix (env TRAJECTORY_PREFIX, default traj)")
    parser.add_argument(
        "--store",
        choices=("rocksdb", "memory"),
        default="rocksdb",
        help="table storage: rocksdb files in --data-dir (default) or memory",
    )
    parser.add_argument(
        "--data-dir",
        help="where RocksDB table files live (default ./<prefix>-observer-data)",
    )
    parser.add_argument(
        "--web-port", type=int, default=6066, help="HTTP view port on 127.0.0.1 (default 6066)"
    )
    parser.add_argument("--no-web", action="store_true", help="do not start the HTTP view")
    parser.add_argument(
        "--worker-id",
        help="a stable name for this worker: client id, sub-folder of --data-dir and its "
        "static group membership (group.instance.id): restarted with the same id after a "
        "crash it gets its partitions back at once instead of after --session-timeout",
    )
    parser.add_argument(
        "--stall-warn",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="name at WARNING an events partition that has records to handle (or is "
        "paused, unpositioned, behind a seek or a batch) and has not moved for this "
        "long, with the worker's whole fetch state (default 20; SIGUSR1 logs the same "
        "state and every thread's and task's stack at any time)",
    )
    parser.add_argument(
        "--seek-timeout",
        type=float,
        default=DEFAULT_SEEK_TIMEOUT_S,
        metavar="SECONDS",
        help="a seek to the committed offsets (after every assignment) that has not "
        "ended after this long stops the worker with exit code 4 and a CRITICAL line "
        "naming the partitions, so that a supervisor restarts it (nothing of the "
        "assignment was handled yet); below 90, where Faust would end recovery "
        f"silently and the worker apply nothing more (default {DEFAULT_SEEK_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long the group waits for a worker that stopped heartbeating (crashed, "
        "or with --worker-id stopped and not restarted) before its partitions move to "
        "another worker (default 10; the broker accepts 6-1800)",
    )
    parser.add_argument(
        "--config",
        help="engine config file (YAML or JSON: analysis thresholds, observer profiles); "
        "default: the built-in spec defaults",
    )
    parser.add_argument(
        "--no-engine",
        action="store_true",
        help="only counters/budget/minute tables, no detectors (cheaper per event)",
    )
    parser.add_argument(
        "--commit-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="commit offsets (and flush the sessions that are due, see "
        "--engine-flush-interval) this often (default 1.0); a crash re-processes at "
        "least this much",
    )
    parser.add_argument(
        "--engine-flush-interval",
        type=float,
        default=DEFAULT_ENGINE_FLUSH_INTERVAL_S,
        metavar="SECONDS",
        help="write a changed session's tables (its detector state, tens of KB, with its "
        "counters, budget and minutes) about this long after it changed, not at every "
        f"commit (default {DEFAULT_ENGINE_FLUSH_INTERVAL_S:g}; 0: every commit; new and "
        "ended sessions: at the next commit). The HTTP views show the values in memory; "
        "the tables and changelogs lag by up to this much, and offsets are committed "
        "only up to the first event a waiting session lacks, so a crash re-processes up "
        "to this much (cheaper per event the longer)",
    )
    parser.add_argument(
        "--timer-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often quiet sessions are checked for deadline / every_n_seconds "
        "assessments (default 1.0; 0 turns the timer off)",
    )
    parser.add_argument(
        "--max-sessions-in-memory",
        type=int,
        default=10_000,
        metavar="N",
        help="keep at most N sessions decoded in memory (default 10000); beyond it the "
        "least recently active are read back from the tables on their next event",
    )
    parser.add_argument(
        "--http-tokens-file",
        help="require Authorization: Bearer tokens on the HTTP view; lines tenant:token "
        "(a tenant sees only its sessions <tenant>.*) or *:token (all) "
        "(env TRAJECTORY_HTTP_TOKENS_FILE; see docs/security.md)",
    )
    parser.add_argument(
        "--http-tls-cert", help="serve the HTTP view over HTTPS (env TRAJECTORY_HTTP_TLS_CERT)"
    )
    parser.add_argument(
        "--http-tls-key", help="key of --http-tls-cert (env TRAJECTORY_HTTP_TLS_KEY)"
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a stop (SIGTERM/SIGINT, or a crash) that takes longer than this is logged "
        f"with the stack of every thread and task and ends with exit code {EXIT_STOP_TIMEOUT} "
        "(safe: events after the last commit are re-applied on restart); default 30",
    )
    parser.add_argument(
        "--loglevel",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="log level (default warning)",
    )


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The worker's :class:`WorkerConfig` from its flags, validated before any Kafka or
    Faust work (a :class:`ConfigError` names the flag).  ``create_app`` gets it with
    the values only Kafka or files can give (partitions, engine config, HTTP auth/TLS)."""
    return WorkerConfig(
        store=args.store,
        data_dir=args.data_dir,
        web_port=args.web_port,
        web_enabled=not args.no_web,
        worker_id=args.worker_id,
        group_instance_id=args.worker_id,  # static membership: see --worker-id
        with_engine=not args.no_engine,
        commit_interval_s=args.commit_interval,
        engine_flush_interval_s=args.engine_flush_interval,
        timer_interval_s=args.timer_interval,
        max_sessions_in_memory=args.max_sessions_in_memory,
        session_timeout_s=args.session_timeout,
        stall_warn_s=args.stall_warn,
        seek_timeout_s=args.seek_timeout,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = worker_config(args)
        from streams.worker.shutdown import check_stop_timeout

        check_stop_timeout(args.stop_timeout)
    except ConfigError as exc:
        print(f"trajectory worker: {exc}", file=sys.stderr)
        return 2

    import faulthandler
    import gc

    from streams.worker.faust_app import create_app

    faulthandler.enable()  # a native crash prints every thread's stack (see router.run)

    # The worker keeps tens of thousands of long-lived objects per session in
    # memory; CPython's default thresholds (700, 10, 10) then run long full (gen 2)
    # collections every few thousand events: CPU, and the worst pauses an event
    # waits behind.  Fewer, cheaper young collections and rarer old ones
    # (measured: docs/faust-notes.md "Garbage collection").  Gen 1 every 10 young
    # collections, not 50: a gen-1 collection walks every object that survived
    # since the last one, and at 50 it took 150-175 ms of CPU (270-580 ms wall on
    # a busy machine) once per ~20 s at 1,000 events/s, which set the p99 of the
    # events behind it; at 10, 39-57 ms, for about the same GC CPU in all
    # (docs/kafka-notes.md "Where the p99 goes at 1,000 events/s").
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    from streams.settings import Settings
    from streams.topics import ensure_changelog_topics, ensure_worker_topics

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    engine_config = None
    if args.config:
        from streams.core.config import load_config

        engine_config = load_config(args.config)
    if settings.security.protocol != "PLAINTEXT":
        from streams.security import verify_connection

        verify_connection(settings.bootstrap, settings.security)  # wrong password: fail fast
    from streams.worker.auth import TLS_CERT_ENV, TLS_KEY_ENV, TOKENS_ENV, ViewAuth, tls_context

    tokens = args.http_tokens_file or os.environ.get(TOKENS_ENV)
    partitions = ensure_worker_topics(settings)
    config = dataclasses.replace(
        config,
        partitions=partitions,
        engine_config=engine_config,
        view_auth=ViewAuth.from_file(tokens) if tokens else None,
        web_ssl_context=tls_context(
            args.http_tls_cert or os.environ.get(TLS_CERT_ENV),
            args.http_tls_key or os.environ.get(TLS_KEY_ENV),
        ),
    )
    worker_app = create_app(settings, config)
    # Before Faust starts: a changelog topic not yet in the metadata when the group
    # assigns leaves the worker without its tables (docs/faust-notes.md).
    ensure_changelog_topics(settings, worker_app.table_names, partitions)
    print(
        f"trajectory worker: {settings.events_topic} ({partitions} partitions) on "
        f"{settings.bootstrap}, store {args.store}"
        + ("" if args.no_web else f", http://127.0.0.1:{args.web_port}/sessions/<id>/state"),
        file=sys.stderr,
        flush=True,
    )
    from streams.worker.shutdown import BoundedStopWorker

    # a stop that hangs is logged with every stack and ends (docs/faust-notes.md "Shutdown")
    worker = BoundedStopWorker(
        worker_app.app,
        loglevel=args.loglevel.upper(),
        quiet=True,
        stop_timeout_s=args.stop_timeout,
    )
    # With loglevel >= WARNING Faust's terminal spinner sets the *root logger* to DEBUG
    # (faust/worker.py::_setup_spinner_handler), so every aiokafka/Faust debug record
    # is built per message: ~half of the worker's CPU.  No spinner, no DEBUG root.
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:  # mode's Worker always ends with SystemExit
        code = exc.code
        code = code if isinstance(code, int) else (0 if code is None else 1)
        # mode exits 1 after any crash; one of ours says which kind (4: Kafka I/O,
        # e.g. SeekTimeoutError), as every other command's exit code does
        reason = worker.crash_reason
        if code != 0 and isinstance(reason, TrajectoryError):
            return exit_code(reason)
        return code
    return 0


if __name__ == "__main__":  # `python -m streams.commands.worker ...` (used by tests)
    _parser = argparse.ArgumentParser(prog="trajectory worker", description=__doc__)
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
