"""The ingest router: per-session topics -> ``<prefix>.events`` (DLQ for bad input).

Exactly once via Kafka transactions (default), or at-least-once with an
idempotent producer and offsets committed after delivery (``RouterConfig.guarantee``,
lower latency); see :mod:`streams.router.router`.  The pure
rules (what is valid, DLQ headers, announcements, batching) live in
``validate``/``announce``/``config``/``stats`` and import no Kafka client, so
importing this package stays light: :class:`Router` is loaded on first use.
"""

from __future__ import annotations

import typing

from streams.router.announce import PendingTopics, parse_announcement
from streams.router.config import RouterConfig
from streams.router.shards import Shard, shard_of
from streams.router.stats import RouterStats, format_status
from streams.router.validate import (
    DLQ_ERROR_CLASS,
    DLQ_ORIGINAL_SIZE,
    DLQ_REASON,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
    DLQ_SOURCE_TOPIC,
    Accepted,
    EventDecoder,
    Rejected,
    check_event,
    check_message,
    dlq_headers,
    session_id_of_topic,
)

if typing.TYPE_CHECKING:
    from streams.router.router import Router, ensure_topics


def __getattr__(name: str) -> typing.Any:
    if name in ("Router", "ensure_topics"):
        from streams.router import router as _router

        return getattr(_router, name)
    raise AttributeError(f"module 'streams.router' has no attribute {name!r}")


__all__ = [
    "DLQ_ERROR_CLASS",
    "DLQ_ORIGINAL_SIZE",
    "DLQ_REASON",
    "DLQ_SOURCE_OFFSET",
    "DLQ_SOURCE_PARTITION",
    "DLQ_SOURCE_TOPIC",
    "Accepted",
    "EventDecoder",
    "PendingTopics",
    "Rejected",
    "Router",
    "RouterConfig",
    "RouterStats",
    "Shard",
    "check_event",
    "check_message",
    "dlq_headers",
    "ensure_topics",
    "format_status",
    "parse_announcement",
    "session_id_of_topic",
    "shard_of",
]
