"""Make sure ``<prefix>.events`` exists before Faust subscribes to it.

Why: Faust only creates topics it owns (changelogs); a source topic created by
broker auto-creation would get the broker's default partition count, and the
tables must have exactly as many partitions as the topic they are fed from.
So the worker creates the topic with ``settings.events_partitions`` when it is
missing, and otherwise adopts the partition count the topic already has.
"""

from __future__ import annotations

from streams.core.errors import BrokerError
from streams.settings import Settings


def ensure_events_topic(settings: Settings, *, timeout_s: float = 15.0) -> int:
    """Create ``<prefix>.events`` if missing; return its partition count."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    name = settings.events_topic
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError(
            f"cannot reach Kafka at {settings.bootstrap!r} (--bootstrap / KAFKA_BOOTSTRAP): {exc}"
        ) from exc
    if name in md.topics and md.topics[name].error is None:
        return len(md.topics[name].partitions)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=settings.events_partitions, replication_factor=1)]
    )
    try:
        futures[name].result(timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise BrokerError(f"cannot create topic {name!r}: {exc}") from exc
    md = admin.list_topics(topic=name, timeout=timeout_s)
    return len(md.topics[name].partitions)


__all__ = ["ensure_events_topic"]
