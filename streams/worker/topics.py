"""Make sure the worker's input and output topics exist before Faust uses them.

Input ``<prefix>.events``; outputs ``<prefix>.dlq``, ``.patterns``,
``.assessments`` (compacted), ``.assessment-history`` and ``.snapshots``
(compacted, via :func:`streams.snapshots.ensure_snapshots_topic`).

Why: Faust only creates topics it owns (changelogs); a source topic created by
broker auto-creation would get the broker's default partition count, and the
tables must have exactly as many partitions as the topic they are fed from.
So the worker creates the topic with ``settings.events_partitions`` when it is
missing, and otherwise adopts the partition count the topic already has.  Faust
does not create non-internal topics it sends to either, hence the DLQ.
"""

from __future__ import annotations

import time

from streams.errors import BrokerError
from streams.security import client_config
from streams.settings import Settings
from streams.topics import TopicSpec, create_topics


def ensure_topics(settings: Settings, *, timeout_s: float = 15.0) -> int:
    """Create the missing topics; return the partition count of ``<prefix>.events``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": settings.bootstrap, **client_config(settings.security)}
    )
    name = settings.events_topic
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError(
            f"cannot reach Kafka at {settings.bootstrap!r} (--bootstrap / KAFKA_BOOTSTRAP): {exc}"
        ) from exc
    n = settings.events_partitions
    compact = {"cleanup.policy": "compact"}
    wanted: dict[str, tuple[int, dict[str, str]]] = {
        name: (n, {}),
        settings.dlq_topic: (1, {}),
        settings.patterns_topic: (n, {}),
        settings.assessments_topic: (n, compact),  # the latest assessment per session
        settings.assessment_history_topic: (n, {}),
    }
    create_topics(
        admin,
        [
            TopicSpec(t, parts, cfg, replication_factor=1)
            for t, (parts, cfg) in wanted.items()
            if t not in md.topics or md.topics[t].error is not None
        ],
        bootstrap=settings.bootstrap,
        timeout_s=timeout_s,
    )
    if settings.snapshots_topic not in md.topics:
        from streams.snapshots import ensure_snapshots_topic

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


__all__ = ["ensure_topics"]
