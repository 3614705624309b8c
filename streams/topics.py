"""The one owner of topic specs: every topic's name, partitions, configs and creation.

Every process creates the topics it writes (the brokers we run have
auto-creation off, so a missing ``create`` is a loud failure, not a topic with
the wrong partition count): the SDK its session topics and ``<prefix>.control``,
the router ``<prefix>.events``, ``.dlq`` and ``.control``, the worker its inputs,
outputs and table changelog topics (:func:`ensure_changelog_topics`, before Faust
starts: docs/faust-notes.md), ``trajectory snapshot`` the snapshots topic.  They all take the
spec of a topic kind from here and create it with :func:`ensure_topics`, so
two processes racing to create the same topic create the same one.

Invariants:

* **Names** come from :class:`~streams.settings.Settings` (``settings.events_topic``
  ...); this module decides everything else.
* **One size margin.**  A topic's ``max.message.bytes`` is the serde's cap
  (``settings.max_message_bytes``, the ``max_bytes`` every ``EventSerde`` is built
  with) plus :data:`SIZE_MARGIN`, room for record headers (the router's DLQ
  reason, the tenant) and batch overhead.  Client-side ``message.max.bytes`` /
  ``fetch.message.max.bytes`` use the same margin.
* **Existing topics are left alone**: "already exists" is success (their
  partition count and configs are the operator's), every other failure is a
  :class:`~streams.errors.DeliveryError` or
  :class:`~streams.security.SecurityError` naming the topic and what to check.
  The one exception is the snapshots topic, which must be compacted
  (:func:`ensure_snapshots_topic`).
* Never probe a topic with ``list_topics(topic=...)``: on a broker with
  auto-creation on, that metadata request creates the topic with broker defaults.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from streams.errors import BrokerError, ConfigError, DeliveryError
from streams.security import SecurityError, client_config, explain_kafka_error
from streams.settings import Settings

#: Bytes allowed on top of ``settings.max_message_bytes`` (the serde's cap on an
#: encoded value) for a record's key, headers and batch overhead.  The router adds
#: headers to what it forwards and dead-letters (the reason, a preview of an
#: oversized value is capped at 64 KiB), so this is 64 KiB, not a bare record
#: overhead.  The one margin every topic and client config uses.
SIZE_MARGIN: Final = 64 * 1024

#: ``segment.index.bytes`` of session topics (broker default 10 MiB).  Kafka
#: preallocates each segment's offset and time index at this size as sparse,
#: memory-mapped files; with a topic per session that is 20 MiB of address space
#: per session, and once the indexes are written to, the page cache fills with
#: their pages (1,000 sessions: ~20 GB) and the broker thrashes on page faults
#: (measured on this project's 24 GiB VMs: broker pinned at 1 core and produce
#: stalling for tens of seconds ~22 s into 1,000 events/s over 1,000 sessions,
#: when each partition passed its first 4 KiB index interval).  128 KiB still
#: indexes ~40 MiB of a session's log before the segment rolls.
SESSION_SEGMENT_INDEX_BYTES: Final = 128 * 1024

#: The replication factor that means "the broker's ``default.replication.factor``".
BROKER_DEFAULT_RF: Final = -1


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count, replication factor, topic configs.

    Invariant: ``partitions >= 1`` and ``replication_factor`` is -1 (the broker's
    default) or >= 1; configs are Kafka topic-level config strings.
    """

    name: str
    partitions: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = BROKER_DEFAULT_RF

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigError(
                "partitions", f"topic {self.name!r}: {self.partitions}; use 1 or more"
            )
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ConfigError(
                "replication_factor",
                f"topic {self.name!r}: {self.replication_factor}; use -1 (broker default) "
                "or 1 or more",
            )


# ------------------------------------------------------------------ sizes


def max_message_bytes(settings: Settings) -> int:
    """The ``max.message.bytes`` of every topic: the serde's cap plus :data:`SIZE_MARGIN`."""
    return settings.max_message_bytes + SIZE_MARGIN


def _sized(settings: Settings, **config: str) -> dict[str, str]:
    return {"max.message.bytes": str(max_message_bytes(settings)), **config}


_COMPACT: Final = "compact"


# ------------------------------------------------------------------ one spec per topic kind


def session_topic_spec(settings: Settings, session_id: str) -> TopicSpec:
    """``<prefix>.session.<id>``: one partition (seq order), ``session_retention_ms``,
    small segment indexes (:data:`SESSION_SEGMENT_INDEX_BYTES`)."""
    return TopicSpec(
        settings.session_topic(session_id),
        1,
        _sized(
            settings,
            **{
                "retention.ms": str(settings.session_retention_ms),
                "segment.index.bytes": str(SESSION_SEGMENT_INDEX_BYTES),
            },
        ),
    )


def control_topic_spec(
    settings: Settings, replication_factor: int = BROKER_DEFAULT_RF
) -> TopicSpec:
    """``<prefix>.control``: session announcements, compacted (the latest per session)."""
    return TopicSpec(
        settings.control_topic,
        1,
        _sized(settings, **{"cleanup.policy": _COMPACT}),
        replication_factor,
    )


def events_topic_spec(settings: Settings, replication_factor: int = BROKER_DEFAULT_RF) -> TopicSpec:
    """``<prefix>.events``: ``settings.events_partitions`` partitions, the worker's input
    (its tables are co-partitioned with it)."""
    return TopicSpec(
        settings.events_topic, settings.events_partitions, _sized(settings), replication_factor
    )


def dlq_topic_spec(settings: Settings, replication_factor: int = BROKER_DEFAULT_RF) -> TopicSpec:
    """``<prefix>.dlq``: one partition; holds whole rejected records plus reason headers."""
    return TopicSpec(settings.dlq_topic, 1, _sized(settings), replication_factor)


def patterns_topic_spec(
    settings: Settings, partitions: int, replication_factor: int = BROKER_DEFAULT_RF
) -> TopicSpec:
    """``<prefix>.patterns``: every pattern detection, as many partitions as events."""
    return TopicSpec(settings.patterns_topic, partitions, _sized(settings), replication_factor)


def assessments_topic_spec(
    settings: Settings, partitions: int, replication_factor: int = BROKER_DEFAULT_RF
) -> TopicSpec:
    """``<prefix>.assessments``: compacted, the latest assessment per session."""
    return TopicSpec(
        settings.assessments_topic,
        partitions,
        _sized(settings, **{"cleanup.policy": _COMPACT}),
        replication_factor,
    )


def assessment_history_topic_spec(
    settings: Settings, partitions: int, replication_factor: int = BROKER_DEFAULT_RF
) -> TopicSpec:
    """``<prefix>.assessment-history``: every assessment, time-retained."""
    return TopicSpec(
        settings.assessment_history_topic, partitions, _sized(settings), replication_factor
    )


def snapshots_topic_spec(
    settings: Settings, partitions: int = 1, replication_factor: int = BROKER_DEFAULT_RF
) -> TopicSpec:
    """``<prefix>.snapshots``: compacted (a restore point must not expire), keyed
    ``<session_id>/<snapshot_id>`` (:mod:`streams.snapshots`)."""
    return TopicSpec(
        settings.snapshots_topic,
        partitions,
        _sized(settings, **{"cleanup.policy": _COMPACT}),
        replication_factor,
    )


def router_topic_specs(settings: Settings, replication_factor: int) -> list[TopicSpec]:
    """What the router writes: events, dlq, control."""
    return [
        events_topic_spec(settings, replication_factor),
        dlq_topic_spec(settings, replication_factor),
        control_topic_spec(settings, replication_factor),
    ]


#: The worker's topics are created unreplicated, like the changelog topics Faust
#: creates for it (``topic_replication_factor=1`` in streams.worker.faust_app).
WORKER_RF: Final = 1


def worker_topic_specs(settings: Settings) -> list[TopicSpec]:
    """What the worker reads and writes, but the snapshots topic (see
    :func:`ensure_worker_topics`): events, dlq, patterns, assessments, history."""
    n = settings.events_partitions
    return [
        events_topic_spec(settings, WORKER_RF),
        dlq_topic_spec(settings, WORKER_RF),
        patterns_topic_spec(settings, n, WORKER_RF),
        assessments_topic_spec(settings, n, WORKER_RF),
        assessment_history_topic_spec(settings, n, WORKER_RF),
    ]


def worker_output_topics(settings: Settings) -> dict[str, str]:
    """The worker's output kind -> topic name, as its batch handler produces them
    (``streams.worker.batch.EventBatchHandler``'s ``output_topics``)."""
    return {
        "patterns": settings.patterns_topic,
        "assessments": settings.assessments_topic,
        "assessment_history": settings.assessment_history_topic,
        "snapshots": settings.snapshots_topic,
    }


# ------------------------------------------------------------------ the worker's changelogs


def worker_app_id(settings: Settings) -> str:
    """The worker's Faust app id (and consumer group); it prefixes the changelog topics."""
    return f"{settings.prefix}-observer"


def changelog_topic(settings: Settings, table: str) -> str:
    """``<prefix>-observer-<table>-changelog``: the name Faust gives a table's changelog."""
    return f"{worker_app_id(settings)}-{table}-changelog"


def changelog_topic_spec(settings: Settings, table: str, partitions: int) -> TopicSpec:
    """A worker table's changelog topic, exactly as Faust declares it.

    Faust (``Table._new_changelog_topic`` -> aiokafka ``Transport._topic_config``)
    creates a non-windowed table's changelog with ``cleanup.policy=compact`` and no
    other config (so ``max.message.bytes`` is the broker's default, unlike our other
    topics), the table's partitions and ``topic_replication_factor`` (:data:`WORKER_RF`).
    Same spec, so a topic created here and one Faust created before are the same.

    Invariant: ``partitions`` is the partition count of ``<prefix>.events`` (tables
    are co-partitioned with it).
    """
    return TopicSpec(
        changelog_topic(settings, table), partitions, {"cleanup.policy": _COMPACT}, WORKER_RF
    )


def changelog_topic_specs(
    settings: Settings, tables: Iterable[str], partitions: int
) -> list[TopicSpec]:
    """:func:`changelog_topic_spec` of every table in ``tables``."""
    return [changelog_topic_spec(settings, t, partitions) for t in tables]


def uncovered_partitions(
    assigned: Iterable[tuple[str, int]], source_topic: str, changelog_topics: Iterable[str]
) -> dict[str, list[int]]:
    """Changelog partitions an assignment lacks: ``{changelog topic: [partitions]}``.

    Why: the tables are co-partitioned with ``source_topic`` and the worker runs
    without standbys, so a member assigned ``source_topic[p]`` must also hold
    partition ``p`` of every changelog topic.  Faust's assignor silently leaves out
    a topic missing from the cluster metadata ("Ignoring missing topic"); a worker
    assigned its source partitions without them never gets its tables
    (docs/faust-notes.md).  Empty when the assignment is whole.
    """
    pairs = set(assigned)
    sources = {p for t, p in pairs if t == source_topic}
    missing: dict[str, list[int]] = {}
    for topic in changelog_topics:
        lacking = sorted(sources - {p for t, p in pairs if t == topic})
        if lacking:
            missing[topic] = lacking
    return missing


# ------------------------------------------------------------------ creating them


def admin_client(settings: Settings) -> Any:
    """A confluent-kafka ``AdminClient`` for ``settings.bootstrap`` (TLS/SASL applied)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": settings.bootstrap, **client_config(settings.security)}
    )


def cluster_metadata(admin: Any, settings: Settings, *, timeout_s: float = 15.0) -> Any:
    """The cluster's metadata (every topic), or :class:`BrokerError` naming the bootstrap
    setting.  Never ``list_topics(topic=...)``: on a broker with auto-creation on, that
    metadata request creates the topic with broker defaults."""
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError.from_kafka(
            f"cannot reach Kafka at {settings.bootstrap!r} (--bootstrap / KAFKA_BOOTSTRAP): {exc}",
            exc,
            retriable=True,  # nothing answered in time: a later try may reach it
        ) from exc


def ensure_topics(
    admin: Any,
    specs: Iterable[TopicSpec],
    *,
    bootstrap: str,
    timeout_s: float = 15.0,
) -> list[str]:
    """Create ``specs``; return the names created now (existing ones are left alone).

    Raises :class:`DeliveryError` for any failure but "already exists", naming the
    topic and the bootstrap address; :class:`~streams.security.SecurityError` when an
    ACL (or the login) refuses it, naming the setting or the grant to fix.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin re-exports it untyped

    specs = list(specs)
    if not specs:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config=dict(s.config),
            )
            for s in specs
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            refused = explain_kafka_error(err)  # an ACL, a login or TLS: name the fix
            if refused is not None:
                raise SecurityError(f"creating topic {name!r} on {bootstrap}: {refused}") from exc
            raise DeliveryError(
                f"creating topic {name!r} on {bootstrap} failed: {exc} "
                "(is the broker reachable? may this client create topics?)"
            ) from exc
        except TimeoutError as exc:
            raise DeliveryError(
                f"creating topic {name!r} on {bootstrap} timed out after {timeout_s} s "
                "(is the broker reachable?)"
            ) from exc
    return created


def ensure_snapshots_topic(
    admin: Any, settings: Settings, *, partitions: int = 1, timeout_s: float = 30.0
) -> str:
    """Create the compacted ``<prefix>.snapshots`` topic if missing; return its name.

    If it exists it must be compacted: a delete-policy topic would lose restore
    points to retention, so that raises :class:`ConfigError` naming the setting.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    spec = snapshots_topic_spec(settings, partitions)
    topic = spec.name
    if ensure_topics(admin, [spec], bootstrap=settings.bootstrap, timeout_s=timeout_s):
        return topic
    # it existed already: it must be compacted
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            configs = admin.describe_configs([res], request_timeout=timeout_s)[res].result(
                timeout=timeout_s
            )
            break
        except KafkaException as exc:
            # another process created it a moment ago: the broker we asked may not
            # know it yet (UNKNOWN_TOPIC_OR_PART); ask again until timeout_s
            code = exc.args[0].code() if exc.args else None
            if code != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else ""
    if _COMPACT not in (policy or ""):
        raise ConfigError(
            "cleanup.policy",
            f"topic {topic!r} exists with cleanup.policy={policy!r}; snapshots need 'compact' "
            f"(kafka-configs --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact)",
        )
    return topic


def ensure_worker_topics(settings: Settings, *, timeout_s: float = 15.0) -> int:
    """Create the worker's missing topics; return the partition count of ``<prefix>.events``.

    Why: Faust only creates topics it owns (changelogs); a source topic created by
    broker auto-creation would get the broker's default partition count, and the
    tables must have exactly as many partitions as the topic they are fed from.
    So the worker creates the topic with ``settings.events_partitions`` when it is
    missing, and otherwise adopts the partition count the topic already has.  Faust
    does not create non-internal topics it sends to either, hence the DLQ.
    """

    admin = admin_client(settings)
    name = settings.events_topic
    md = cluster_metadata(admin, settings, timeout_s=timeout_s)
    ensure_topics(
        admin,
        [
            s
            for s in worker_topic_specs(settings)
            if s.name not in md.topics or md.topics[s.name].error is not None
        ],
        bootstrap=settings.bootstrap,
        timeout_s=timeout_s,
    )
    if settings.snapshots_topic not in md.topics:
        ensure_snapshots_topic(admin, settings, timeout_s=timeout_s)
    # Right after creation the metadata can still show the topic with 0 partitions.
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=timeout_s)  # never topic=...: it may auto-create
        topic = md.topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            return len(topic.partitions)
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topic {name!r} has no partitions in the metadata {timeout_s}s after creation"
            )
        time.sleep(0.1)


def wait_for_topics(
    admin: Any, expected: Mapping[str, int], *, bootstrap: str, timeout_s: float = 30.0
) -> None:
    """Poll the metadata until every topic in ``expected`` is listed, without error,
    with that many partitions, each with a leader; else :class:`BrokerError`.

    Why: a created topic reaches a broker's metadata cache asynchronously (KRaft
    brokers apply the metadata log behind the controller), and a consumer group
    assigned meanwhile leaves the topic out (docs/faust-notes.md).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=timeout_s)  # never topic=...: it may auto-create
        lacking: dict[str, str] = {}
        for name, want in expected.items():
            topic = md.topics.get(name)
            if topic is None or topic.error is not None:
                lacking[name] = "not in the metadata" if topic is None else str(topic.error)
                continue
            led = [p for p in topic.partitions.values() if p.leader >= 0 and p.error is None]
            if len(topic.partitions) != want or len(led) != want:
                lacking[name] = f"{len(led)} of {want} partitions with a leader"
        if not lacking:
            return
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topics not ready in the cluster metadata of {bootstrap} {timeout_s} s "
                "after creation: "
                + "; ".join(f"{n!r}: {why}" for n, why in sorted(lacking.items()))
                + " (is every broker up? is the controller quorum healthy?)"
            )
        time.sleep(0.1)


def ensure_changelog_topics(
    settings: Settings, tables: Iterable[str], partitions: int, *, timeout_s: float = 30.0
) -> list[str]:
    """Create the worker's missing table changelog topics and wait until the cluster
    metadata lists every one with all ``partitions``; return the names created now.

    Why (docs/faust-notes.md, "Changelog topics are created before Faust starts"):
    Faust creates them itself while starting and subscribes right after; a topic not
    yet in the metadata when the group assigns is left out ("Ignoring missing
    topic") and the worker then idles with no table partitions until aiokafka's
    next metadata refresh (5 minutes).  Called before Faust starts, so Faust finds
    them and its own declare is a no-op.

    An existing changelog topic with another partition count than ``partitions``
    (``<prefix>.events``) raises :class:`ConfigError`: the tables would not be
    co-partitioned with their source.
    """

    admin = admin_client(settings)
    specs = changelog_topic_specs(settings, tables, partitions)
    md = cluster_metadata(admin, settings, timeout_s=timeout_s)
    for s in specs:
        topic = md.topics.get(s.name)
        found = 0 if topic is None or topic.error is not None else len(topic.partitions)
        if found and found != partitions:
            raise ConfigError(
                "partitions",
                f"changelog topic {s.name!r} has {found} partitions but "
                f"{settings.events_topic!r} has {partitions}; tables must be "
                "co-partitioned with it (use a new --prefix, or recreate the changelog "
                "topics with as many partitions as the events topic)",
            )
    created = ensure_topics(
        admin,
        [s for s in specs if s.name not in md.topics or md.topics[s.name].error is not None],
        bootstrap=settings.bootstrap,
        timeout_s=timeout_s,
    )
    wait_for_topics(
        admin,
        {s.name: partitions for s in specs},
        bootstrap=settings.bootstrap,
        timeout_s=timeout_s,
    )
    return created


__all__ = [
    "BROKER_DEFAULT_RF",
    "SESSION_SEGMENT_INDEX_BYTES",
    "SIZE_MARGIN",
    "WORKER_RF",
    "TopicSpec",
    "admin_client",
    "assessment_history_topic_spec",
    "assessments_topic_spec",
    "changelog_topic",
    "changelog_topic_spec",
    "changelog_topic_specs",
    "cluster_metadata",
    "control_topic_spec",
    "dlq_topic_spec",
    "ensure_changelog_topics",
    "ensure_snapshots_topic",
    "ensure_topics",
    "ensure_worker_topics",
    "events_topic_spec",
    "max_message_bytes",
    "patterns_topic_spec",
    "router_topic_specs",
    "session_topic_spec",
    "snapshots_topic_spec",
    "uncovered_partitions",
    "wait_for_topics",
    "worker_app_id",
    "worker_output_topics",
    "worker_topic_specs",
]
