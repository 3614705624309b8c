"""Router tuning: transaction batching, identity, pickup of new session topics.

The defaults come from measurements on a single-node Kafka 3.9.1 (2 shared cores),
time from the first publish on a brand-new session topic to the event being
readable (read_committed) in ``<prefix>.events``:

* ``fetch_wait_max_ms`` matters most: a fetch long-poll in flight delays fetching
  a newly assigned partition by up to ``fetch.wait.max.ms`` (librdkafka default
  500 ms gave a ~1.5 s floor; 50 ms gives ~0.3-0.4 s);
* regex refresh alone (``metadata_refresh_ms=1000``): ~0.9-1.3 s;
* with the SDK's announcement on ``<prefix>.control`` (router requests full
  metadata at once): ~0.34-0.45 s, also through the real SDK (topic creation +
  JSON announcement + ``session_start``).  Both are kept: announcements for speed,
  the periodic regex refresh as the fallback if an announcement is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How one router instance behaves.

    Invariants (checked in ``__post_init__``): every count/interval is positive;
    ``transactional_id`` is stable across restarts of *the same* instance (that is
    what lets a restarted router fence its dead predecessor and abort its open
    transaction) and different between concurrently running instances.
    ``None`` for ``transactional_id`` / ``group_id`` means "derive from the prefix"
    (:meth:`resolved_transactional_id`, :meth:`resolved_group_id`).
    """

    transactional_id: str | None = None
    group_id: str | None = None
    #: Commit the open transaction after this many consumed messages ... (5000:
    #: under a backlog the 100 ms age bound closes batches near there anyway; 2000
    #: spent ~20% of wall time waiting on commits in the benchmark)
    batch_max_messages: int = 5000
    #: ... or when it has been open this long (bounds the added latency).
    batch_max_ms: int = 100
    #: Regex re-evaluation period: librdkafka matches the subscription regex on
    #: every full metadata refresh, so this bounds pickup when announcements are lost.
    metadata_refresh_ms: int = 1000
    #: Broker long-poll for fetches; low so new partitions start fetching quickly.
    fetch_wait_max_ms: int = 50
    #: React to session announcements on ``<prefix>.control`` with an immediate
    #: metadata refresh (measured ~3x faster pickup than the periodic refresh alone).
    use_announcements: bool = True
    #: Replication factor for topics the router creates; -1 = the broker's default.
    replication_factor: int = -1
    #: Seconds between one-line status logs (0 disables them).
    status_interval_s: float = 10.0
    #: Kafka transaction timeout; a crashed router's open transaction is aborted
    #: by the broker after this, or at once when the same transactional id restarts.
    transaction_timeout_ms: int = 60_000
    #: Consumer group session timeout: how long a *vanished* instance keeps its
    #: partitions before other instances take over.  A restart with the same
    #: transactional id does not wait for it (static membership).
    session_timeout_ms: int = 10_000
    #: Give up (raise DeliveryError) after this many aborted transactions in a row,
    #: instead of spinning on a batch the broker keeps rejecting.  Not 1-2: every
    #: new session topic causes a rebalance, which can fail one commit with
    #: ILLEGAL_GENERATION (abortable, harmless: the rewound batch then commits).
    max_consecutive_aborts: int = 20

    def __post_init__(self) -> None:
        for name in (
            "batch_max_messages",
            "batch_max_ms",
            "metadata_refresh_ms",
            "fetch_wait_max_ms",
            "transaction_timeout_ms",
            "session_timeout_ms",
            "max_consecutive_aborts",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"{value!r}: must be an integer >= 1")
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ConfigError("replication_factor", "use -1 (broker default) or >= 1")
        if self.status_interval_s < 0:
            raise ConfigError("status_interval_s", "must be >= 0 (0 disables status lines)")
        for name in ("transactional_id", "group_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(name, "must be a non-empty string (or unset to derive it)")

    def resolved_group_id(self, prefix: str) -> str:
        """All router instances of a deployment share one consumer group."""
        return self.group_id or f"{prefix}.router"

    def resolved_transactional_id(self, prefix: str) -> str:
        """Default ``<prefix>.router.0``: right for one router; give others ``.1``, ``.2``..."""
        return self.transactional_id or f"{prefix}.router.0"

    def should_commit(self, messages_in_txn: int, txn_age_ms: float) -> bool:
        """Close the open transaction now? (size or age bound reached)."""
        return messages_in_txn >= self.batch_max_messages or (
            messages_in_txn > 0 and txn_age_ms >= self.batch_max_ms
        )


__all__ = ["RouterConfig"]
