"""Topic creation shared by every process that owns topics (SDK, router, worker, snapshots).

Why one place: each process creates the topics it writes to (the brokers we run
have auto-creation off, so a missing ``create`` is a loud failure, not a topic
with the wrong partition count), and they must all treat "already exists" as
success and every other failure as a :class:`~streams.core.errors.DeliveryError`
that names the topic, the bootstrap address and what to check.

Never probe a topic with ``list_topics(topic=...)``: on a broker with
auto-creation on, that metadata request creates the topic with broker defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.errors import DeliveryError
from streams.security import SecurityError, explain_kafka_error


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: its partition count and topic-level configs."""

    name: str
    partitions: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # the broker's default


def create_topics(
    admin: Any,
    specs: list[TopicSpec],
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


__all__ = ["TopicSpec", "create_topics"]
