"""The Faust application: the one module of the project that imports Faust.

``create_app(settings)`` builds a fresh app (never at import time: settings,
store and ports differ per process and per test).  It declares

* the source topic ``<prefix>.events`` (key = session id, value = Avro bytes,
  both ``raw``: we decode ourselves, so a bad message goes to ``<prefix>.dlq``
  with a reason instead of crashing the agent);
* three changelog-backed tables with raw-bytes values (``streams.app.state``
  encodes/decodes them canonically): ``sessions`` (per-session counters),
  ``budgets`` (latest budget + tokens since) and ``minutes`` (tool calls and
  errors per session per event-time minute, keyed ``<session_id>@<minute_start_ms>``;
  see docs/faust-notes.md for why this is not a Faust windowed table);
* one agent with ``concurrency=1`` (Faust may commit past unprocessed messages
  with more) that applies each event exactly once via
  :class:`~streams.app.processor.EventProcessor`;
* read-only web views and ``/metrics`` (``streams.app.web``, ``streams.app.metrics``).

Co-partitioning invariant: the tables have exactly as many partitions as
``<prefix>.events`` and are keyed by session id, so a session's table rows live
in the partition its events arrive on.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
from faust.exceptions import ProducerSendError
from faust.transport.drivers import aiokafka as _aiokafka_driver

from streams.app.metrics import WorkerMetrics
from streams.app.outputs import OutputEncoder
from streams.app.processor import EventProcessor, TableWrite
from streams.app.web import register_views
from streams.core.config import EngineConfig
from streams.core.errors import ConfigError, InvalidEventError, SerdeError
from streams.core.events import TraceEvent
from streams.settings import Settings

log = logging.getLogger(__name__)

STORES = {"rocksdb": "rocksdb://", "memory": "memory://"}
SESSIONS_TABLE = "sessions"
BUDGETS_TABLE = "budgets"
MINUTES_TABLE = "minutes"
ENGINES_TABLE = "engines"

Decoder = Callable[[bytes], TraceEvent]


def app_id(settings: Settings) -> str:
    """Faust app id; it prefixes the changelog topics (``<app_id>-<table>-changelog``)."""
    return f"{settings.prefix}-observer"


def changelog_topic(settings: Settings, table: str) -> str:
    return f"{app_id(settings)}-{table}-changelog"


def broker_urls(bootstrap: str) -> str:
    """``host:port,host:port`` -> Faust's ``kafka://host:port;kafka://host:port``."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("bootstrap", "empty; give host:port[,host:port...]")
    return ";".join(h if "://" in h else f"kafka://{h}" for h in hosts)


def _default_decoder(settings: Settings) -> Decoder:
    """The serde the SDK publishes with: Confluent framing when a registry is set."""
    from streams.serde import EventSerde

    framing = "confluent" if settings.schema_registry_url else "single-object"
    serde = EventSerde(
        framing, registry=settings.schema_registry_url, max_bytes=settings.max_message_bytes
    )
    decode: Decoder = serde.decode
    return decode


class _ReadCommittedConsumerThread(_aiokafka_driver.AIOKafkaConsumerThread):
    """Faust reads ``read_uncommitted`` unless it runs its own transactions
    (``processing_guarantee="exactly_once"``); the router writes <prefix>.events
    in transactions, so without this the worker would also see aborted batches.
    aiokafka reads ``_isolation_level`` when the consumer starts (its Fetcher).

    Faust also hard-codes ``fetch_max_wait_ms=1500`` for the worker consumer: at a
    low event rate every fetch then waits up to 1.5 s for more data before
    returning, which is latency an agent waiting for its assessment pays.  50 ms
    keeps fetches cheap and the pipeline responsive (measured in bench_latency:
    at 250 events/s p50 804 -> 265 ms).
    """

    FETCH_MAX_WAIT_MS = 50

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        consumer._fetch_max_wait_ms = self.FETCH_MAX_WAIT_MS
        return consumer


class _ReadCommittedConsumer(_aiokafka_driver.Consumer):
    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit_tps(self, tps: Any, start_new_transaction: bool) -> bool:
        """Faust's ``_commit_tps`` with the write-behind state flushed first.

        Order (docs/guarantees.md): (1) the committable offsets are taken and the
        dirty state is encoded with no ``await`` in between, so the state covers
        every event up to those offsets (it may cover more: redeliveries are
        deduped); (2) the producer is flushed, so the outputs of those events are
        in Kafka before the state that says "done"; (3) the state goes to the local
        stores and is queued to the changelogs; (4) ``_commit_offsets`` flushes the
        producer again (changelogs delivered) and only then commits the offsets.
        """
        flusher: StateFlusher | None = getattr(self.app, "state_flusher", None)
        if flusher is None:
            done: bool = await super()._commit_tps(tps, start_new_transaction)
            return done
        commit_offsets = self._filter_committable_offsets(tps)
        writes = flusher.processor.collect()
        if writes:
            await self.app.producer.flush()
            flusher.write(writes)
        if not commit_offsets:
            return False
        try:
            await self._handle_attached(commit_offsets)
        except ProducerSendError as exc:
            await self.crash(exc)
            return False
        did: bool = await self._commit_offsets(
            commit_offsets, start_new_transaction=start_new_transaction
        )
        return did


class _ReadCommittedTransport(_aiokafka_driver.Transport):
    Consumer = _ReadCommittedConsumer


class StateFlusher:
    """Writes the processor's collected values partition-explicitly: local store + changelog.

    Why not ``table[key] = value``: Faust takes the partition of a table write
    (store and changelog) from the *current stream event*, and a flush runs
    outside any event (commit, revoke, shutdown).  So we call the store's
    per-partition DB (RocksDB) or dict (memory) and ``Table.send_changelog(partition,
    ...)`` ourselves; the changelog callback still records the persisted offset.
    """

    def __init__(self, processor: EventProcessor, tables: dict[str, Any]) -> None:
        self.processor = processor
        self.tables = tables
        self.flushes = 0

    def write(self, writes: list[TableWrite]) -> None:
        for w in writes:
            table = self.tables[w.table]
            if w.partition is None:
                raise RuntimeError(f"{w.table}[{w.key!r}]: no partition known for a flush")
            store = table.data
            dbs = getattr(store, "_db_for_partition", None)
            if dbs is not None:  # RocksDB: one DB per partition
                dbs(w.partition).put(w.key, w.value)
                store._key_index[w.key] = w.partition
            else:  # memory store: a dict of raw keys (what changelog recovery writes)
                store.data[w.key] = w.value
            table.send_changelog(w.partition, w.key, w.value)
        self.flushes += 1

    def flush_now(self) -> int:
        """Collect and write everything dirty (no producer flush: the caller awaits it)."""
        writes = self.processor.collect()
        self.write(writes)
        return len(writes)


class ObserverApp(faust.App):
    """``faust.App`` whose worker consumer reads only committed messages and flushes
    the write-behind state before every offset commit (``state_flusher``)."""

    state_flusher: StateFlusher | None = None

    def _new_transport(self) -> Any:
        return _ReadCommittedTransport(self.conf.broker_consumer, self)


@dataclass(frozen=True)
class WorkerApp:
    """The app plus the handles a command or test needs."""

    app: faust.App
    settings: Settings
    processor: EventProcessor
    sessions: Any
    budgets: Any
    minutes: Any
    engines: Any
    events_topic: Any
    dlq_topic: Any
    metrics: WorkerMetrics | None = None


class _OutputError(Exception):
    """An applied event whose pattern/assessment/snapshot records cannot be encoded."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"applied, but its outputs cannot be encoded: {cause}")


def _dlq_headers(exc: BaseException, message: Any) -> list[tuple[str, bytes]]:
    """The router's DLQ header names (``streams.router.validate``), plus ``dlq.stage``."""
    stage = b"worker-output" if isinstance(exc, _OutputError) else b"worker"
    if isinstance(exc, _OutputError):
        exc = exc.cause
    return [
        ("dlq.reason", str(exc).encode("utf-8", "replace")[:1000]),
        ("dlq.error_class", type(exc).__name__.encode()),
        ("dlq.source.topic", str(message.topic).encode()),
        ("dlq.source.partition", str(message.partition).encode()),
        ("dlq.source.offset", str(message.offset).encode()),
        ("dlq.stage", stage),
    ]


def create_app(
    settings: Settings,
    *,
    store: str = "rocksdb://",
    data_dir: str | Path | None = None,
    web_port: int = 6066,
    web_enabled: bool = True,
    worker_id: str | None = None,
    partitions: int | None = None,
    decode: Decoder | None = None,
    commit_interval_s: float = 1.0,
    with_engine: bool = True,
    engine_config: EngineConfig | None = None,
    producer_linger_s: float = 0.005,
    commit_every: int = 50_000,
    timer_interval_s: float | None = 1.0,
    metrics: WorkerMetrics | None = None,
) -> WorkerApp:
    """Build a worker app from ``settings``.

    ``store``: ``"rocksdb://"`` (rocksdict driver; local files under ``data_dir``,
    recovered incrementally from the changelog) or ``"memory://"`` (rebuilt from
    the changelog on every start).  ``partitions`` must equal the partition count
    of ``<prefix>.events`` (defaults to ``settings.events_partitions``).
    ``decode`` turns message bytes into a TraceEvent (default: the Avro serde).
    ``with_engine`` adds the ``engines`` table running the core
    :class:`~streams.core.engine.SessionEngine` (``engine_config``, default
    ``EngineConfig()``) on every event.  ``metrics`` (default: a fresh
    :class:`~streams.app.metrics.WorkerMetrics`) is fed by the agent and served on ``/metrics``.
    """
    metrics = metrics if metrics is not None else WorkerMetrics()
    if store in STORES:
        store = STORES[store]
    if store not in STORES.values():
        raise ConfigError("store", f"{store!r}: use 'rocksdb://' or 'memory://'")
    n_partitions = partitions or settings.events_partitions
    decoder = decode or _default_decoder(settings)
    datadir = Path(data_dir) if data_dir is not None else Path(f"{app_id(settings)}-data")
    if worker_id:
        datadir = datadir / worker_id

    app = ObserverApp(
        app_id(settings),
        broker=broker_urls(settings.bootstrap),
        store=store,
        datadir=str(datadir),
        autodiscover=False,
        topic_partitions=n_partitions,
        topic_replication_factor=1,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=commit_interval_s,
        broker_commit_every=commit_every,
        broker_client_id=worker_id or app_id(settings),
        web_enabled=web_enabled,
        web_port=web_port,
        web_bind="127.0.0.1",
        web_host="127.0.0.1",
        producer_acks=-1,
        # batch changelog writes: 3-4 table writes per event would otherwise each be a request
        producer_linger=producer_linger_s,
    )

    events = app.topic(
        settings.events_topic,
        key_serializer="raw",
        value_serializer="raw",
        partitions=n_partitions,
    )
    dlq = app.topic(settings.dlq_topic, key_serializer="raw", value_serializer="raw")
    out_topics = {
        kind: app.topic(topic, key_serializer="raw", value_serializer="raw")
        for kind, topic in (
            ("patterns", settings.patterns_topic),
            ("assessments", settings.assessments_topic),
            ("assessment_history", settings.assessment_history_topic),
            ("snapshots", settings.snapshots_topic),
        )
    }
    encoder = OutputEncoder(settings, engine_config) if with_engine else None
    # 'driver' is popped from (and aliased with) this dict by the Store: pass fresh dicts.
    table_kw: dict[str, Any] = {
        "default": None,
        "partitions": n_partitions,
        # Table serializers come from key_type/value_type only (bytes -> "raw",
        # anything else -> "json"); a schema= with serializers is ignored by the store.
        "key_type": bytes,
        "value_type": bytes,
    }

    def _opts() -> dict[str, Any] | None:
        return {"driver": "rocksdict"} if store == "rocksdb://" else None

    sessions = app.Table(SESSIONS_TABLE, help="per-session counters", options=_opts(), **table_kw)
    budgets = app.Table(
        BUDGETS_TABLE, help="latest budget per session", options=_opts(), **table_kw
    )
    minutes = app.Table(
        MINUTES_TABLE, help="tool calls/errors per session per minute", options=_opts(), **table_kw
    )
    engines = (
        app.Table(
            ENGINES_TABLE, help="core SessionEngine state per session", options=_opts(), **table_kw
        )
        if with_engine
        else None
    )
    processor = EventProcessor(sessions, budgets, minutes, engines, engine_config)
    flusher = StateFlusher(
        processor,
        {
            SESSIONS_TABLE: sessions,
            BUDGETS_TABLE: budgets,
            MINUTES_TABLE: minutes,
            **({ENGINES_TABLE: engines} if engines is not None else {}),
        },
    )
    app.state_flusher = flusher

    @app.agent(events, concurrency=1)
    async def process(stream: Any) -> None:
        async for ev in stream.events():
            started_ns = time.perf_counter_ns()  # metrics hook, keep
            message = ev.message
            value = ev.value
            try:
                event = decoder(value)
                key = ev.key.decode("utf-8", "replace") if isinstance(ev.key, bytes) else ev.key
                if key is not None and key != event.session_id:
                    raise InvalidEventError(
                        "session_id",
                        f"{event.session_id!r} does not match the message key {key!r} "
                        "(producers must key <prefix>.events by session id)",
                    )
                # InvalidEventError from the engine comes before any table changed
                result = processor.apply(event, message.partition)
                records = []
                if encoder is not None:
                    try:
                        records = encoder.records(
                            event,
                            result.engine,
                            functools.partial(processor.engine_state, event.session_id),
                        )
                    except (SerdeError, InvalidEventError) as exc:
                        # the tables did apply it; only its outputs cannot be encoded
                        raise _OutputError(exc) from exc
            except (SerdeError, InvalidEventError, _OutputError) as exc:
                log.warning(
                    "dead-lettering %s[%s]@%s: %s: %s",
                    message.topic,
                    message.partition,
                    message.offset,
                    type(exc).__name__,
                    exc,
                )
                metrics.on_dlq(
                    type(exc.cause if isinstance(exc, _OutputError) else exc).__name__
                )  # metrics hook, keep
                await dlq.send(key=ev.key, value=value, headers=_dlq_headers(exc, message))
                continue
            except Exception as exc:
                # Faust's supervisor would restart the agent and carry on past this
                # message (it gets acked): never silently skip. Stop the worker instead;
                # the offset is not committed, so a restart retries the message.
                log.critical(
                    "cannot apply %s[%s]@%s: %r; stopping the worker",
                    message.topic,
                    message.partition,
                    message.offset,
                    exc,
                )
                await app.crash(exc)
                raise
            metrics.on_event(event.type, started_ns, event.timestamp_ms)  # metrics hook, keep
            metrics.on_outputs(result.engine)  # metrics hook, keep
            for rec in records:
                # same producer as the changelogs: flushed before the offset commit
                await out_topics[rec.kind].send(
                    key=rec.key, value=rec.value, headers=list(rec.headers) or None
                )

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode's stub wants signal=
    async def _on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        # Faust has already waited for the agent to go idle and committed (our commit
        # hook flushed); flush whatever is still dirty (e.g. timer-made state) and drop
        # the caches with no await in between, then make the changelog writes durable
        # before another worker can recover these partitions.
        n = flusher.flush_now()
        processor.drop_caches()
        if n:
            await app.producer.flush()

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
        processor.drop_caches()  # raises if anything is unflushed (cannot happen after revoke)

    if encoder is not None and timer_interval_s:
        timer_encoder = encoder

        @app.timer(timer_interval_s)
        async def _assess_quiet_sessions() -> None:
            """every_n_seconds and deadline assessments of sessions gone quiet.

            The one place wall time enters: ``now`` is the clock, and the engine
            marks what it makes ``trigger="timer"``; the changed engine state is
            dirty and reaches the table with the next commit.
            """
            if app.rebalancing:
                return
            for ta in processor.on_timer(int(time.time() * 1000)):
                for rec in timer_encoder.timer_records(ta):
                    await out_topics[rec.kind].send(key=rec.key, value=rec.value)

    # HTTP views (streams/app/web.py): /sessions, /sessions/{id}/..., /stats, /metrics
    register_views(
        app,
        sessions=sessions,
        budgets=budgets,
        minutes=minutes,
        engines=engines,
        stats=lambda: {
            "applied": processor.applied,
            "duplicates": processor.duplicates,
            "dirty": processor.dirty,
            "flushed_values": processor.flushed_values,
            "flushes": flusher.flushes,
        },
        metrics=metrics,
        events_topic=settings.events_topic,
    )

    return WorkerApp(
        app=app,
        settings=settings,
        processor=processor,
        sessions=sessions,
        budgets=budgets,
        minutes=minutes,
        engines=engines,
        events_topic=events,
        dlq_topic=dlq,
        metrics=metrics,
    )


__all__ = [
    "BUDGETS_TABLE",
    "ENGINES_TABLE",
    "MINUTES_TABLE",
    "SESSIONS_TABLE",
    "STORES",
    "StateFlusher",
    "WorkerApp",
    "app_id",
    "broker_urls",
    "changelog_topic",
    "create_app",
]
