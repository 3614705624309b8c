"""Router tuning: processing guarantee, batching, identity, pickup of new session topics.

Processing guarantee (``guarantee``, like Kafka Streams' ``processing.guarantee``):

* ``"exactly-once"`` (default): Kafka transactions.  Read_committed consumers of
  ``<prefix>.events`` see each event once, but only when its transaction commits:
  latency >= the batch window (``batch_max_ms``, while messages keep arriving;
  a caught-up transaction closes after ``batch_idle_ms``)
  plus ``send_offsets_to_transaction`` + ``commit_transaction`` round trips, which
  block the loop (or run in a helper thread while it reads the next batch:
  ``commit_in_background``).
* ``"at-least-once"``: a plain idempotent producer (``acks=all``), each message
  produced as soon as it is consumed and visible once the broker has it.  The
  consumed offsets are committed every ``batch_max_ms`` / ``batch_max_messages``
  after a producer flush (never past an undelivered message), so a crash repeats
  at most what was routed since the last offset commit, and never loses anything.
  The worker applies each ``(session_id, seq)`` once and its outputs carry
  ``(session_id, seq, ...)``, so a repeat changes no state and is identifiable.

The defaults come from measurements of the time from the first publish on a
brand-new session topic to the event being readable (read_committed) in
``<prefix>.events`` (figures: docs/kafka-notes.md "Measured defaults of the router
and the SDK"):

* ``fetch_wait_max_ms`` matters most: a fetch long-poll in flight delays fetching
  a newly assigned partition by up to ``fetch.wait.max.ms``, so it is kept low;
* the SDK's announcement on ``<prefix>.control`` (the router requests full
  metadata at once) picks a topic up faster than the periodic regex refresh
  (``metadata_refresh_ms``).  Both are kept: announcements for speed, the periodic
  regex refresh as the fallback if an announcement is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from streams.errors import ConfigError
from streams.router.shards import Shard

Guarantee = Literal["exactly-once", "at-least-once"]
Validation = Literal["framing", "full"]
#: The accepted values of :attr:`RouterConfig.validation`, default first.
VALIDATIONS: Final[tuple[Validation, ...]] = get_args(Validation)
#: The accepted values of :attr:`RouterConfig.guarantee`, default first.
GUARANTEES: Final[tuple[Guarantee, ...]] = get_args(Guarantee)
#: ``linger.ms`` of the router's producer when :attr:`RouterConfig.linger_ms` is unset.
#: At-least-once 1 ms: every ms is added latency, but linger 0 sends one tiny
#: request per message under a backlog and loses throughput (docs/kafka-notes.md
#: "Measured defaults of the router and the SDK").
DEFAULT_LINGER_MS: Final[dict[Guarantee, int]] = {"exactly-once": 5, "at-least-once": 1}


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How one router instance behaves.

    Invariants (checked in ``__post_init__``): every count/interval is positive;
    ``transactional_id`` is stable across restarts of *the same* instance (that is
    what lets a restarted router fence its dead predecessor and abort its open
    transaction) and different between concurrently running instances.
    ``None`` for ``transactional_id`` / ``group_id`` means "derive from the prefix"
    (:meth:`resolved_transactional_id`, :meth:`resolved_group_id`).  In
    at-least-once mode the "transactional id" only names the instance (its static
    group membership, and the id whose leftover transaction it aborts at start).
    """

    transactional_id: str | None = None
    group_id: str | None = None
    #: ``"exactly-once"`` (transactions) or ``"at-least-once"`` (idempotent producer,
    #: offsets committed after delivery); see the module docstring.
    guarantee: Guarantee = "exactly-once"
    #: Exactly-once: commit the open transaction after this many consumed messages ...
    #: (20000: a commit costs about the same whatever its size, and under a backlog
    #: the router now reaches ~200k events/s, so the 100 ms age bound closes batches
    #: near there; at 5000 it waited on commits 3-4x longer and routed ~30 % less.
    #: Below 50k events/s the age bound closes every batch either way, so latency
    #: does not change: docs/kafka-notes.md "Router: commits off the critical path").
    #: At-least-once: commit the consumed offsets after this many messages ...
    batch_max_messages: int = 20000
    #: ... or when the batch has been open this long.  Exactly-once: bounds the
    #: added latency.  At-least-once: adds no latency (messages are not held back);
    #: bounds what a crash makes the restarted router route again.
    batch_max_ms: int = 100
    #: Exactly-once: commit the open transaction before ``batch_max_ms`` once the
    #: router has caught up (the consumer has nothing more queued: a non-blocking
    #: consume returned fewer messages than it asked for) and the transaction is at
    #: least this many ms old.  Under a trickle the next fetch response cannot come
    #: sooner than the broker answers (``fetch_wait_max_ms``), so waiting out the
    #: window only delays what is already routed.  The minimum age bounds the
    #: commit rate when fetch responses come every few ms (``fetch_min_bytes`` 1):
    #: at most one commit per ``batch_idle_ms`` + the commit's own round trips.
    #: 0: off (every transaction stays open for the whole window unless it fills).
    #: >= ``batch_max_ms``: the window closes first, same as off.  At-least-once
    #: holds nothing back, so this has no effect there.  10: at 1,000 events/s over
    #: 1,000 topics a transaction commits ~20 ms after its first message instead of
    #: ~115 (default window), p99 publish -> assessment 168-179 vs 293-327 ms, CPU
    #: per event unchanged; 2 commits 1.7x as often for no gain, 40 closes later for
    #: no fewer commits (docs/kafka-notes.md "Router: close a caught-up transaction").
    batch_idle_ms: int = 10
    #: Producer ``linger.ms``; None: 5 for exactly-once (visibility waits for the
    #: commit anyway), 1 for at-least-once (every ms is added latency; 0 costs
    #: throughput under a backlog, see DEFAULT_LINGER_MS).
    linger_ms: int | None = None
    #: Regex re-evaluation period: librdkafka matches the subscription regex on
    #: every full metadata refresh, so this bounds pickup when announcements are lost
    #: (an announcement requests the metadata at once).  The router makes this
    #: request itself, with its discovery check; librdkafka's own periodic refresh
    #: is only a 60 s backstop.  3000, not 1000: with 1,000
    #: session topics each refresh (every topic's metadata, the regex over all of
    #: them) cost the router ~25 us of CPU per event at 1,000 events/s, 14 % of it
    #: (docs/kafka-notes.md "Measured defaults"); pickup without an announcement
    #: stays under the 5 s budget.
    metadata_refresh_ms: int = 3000
    #: Broker long-poll for fetches; low so new partitions start fetching quickly.
    fetch_wait_max_ms: int = 50
    #: The broker answers a fetch once this many bytes are ready (or after
    #: ``fetch_wait_max_ms``).  64 KiB: under load a fetch is answered when that much
    #: is ready, otherwise once per ``fetch_wait_max_ms``, instead of once per arriving
    #: event.  With 1,000 live session topics a fetch lists every partition, so each one
    #: costs the broker and the router O(topics) (the router O(topics^2): librdkafka
    #: looks up each topic of a response by a linear scan).  Measured end to end at
    #: 1,000 events/s over 1,000 topics (docs/kafka-notes.md "Fan-in: where the
    #: broker's CPU goes"): broker + router + worker 1,014-1,023 us of CPU per event
    #: against 1,539 with 1, p99 publish -> assessment unchanged (233/312 vs 261 ms),
    #: publish -> routed p50 +35 ms; idle cost the same.  Set 1 for the lowest latency
    #: on a machine with CPU to spare.
    fetch_min_bytes: int = 65536
    #: What the router checks before forwarding (issue #12, "decode once"):
    #: ``"framing"`` (default): topic, size, framing, writer-schema fingerprint and
    #: the body's ``session_id`` == the topic's session, without a full Avro decode;
    #: the worker, which decodes every event anyway, checks the rest and
    #: dead-letters with the same reasons and source coordinates
    #: (``streams.router.validate.check_routing``).  ``"full"``: the router decodes
    #: and checks every event itself (``check_message``), so ``<prefix>.events``
    #: holds only fully valid events, for consumers other than the worker.
    #: A custom decoder without ``check_framing`` always gets ``"full"``.
    validation: Validation = "framing"
    #: React to session announcements on ``<prefix>.control`` with an immediate
    #: metadata refresh (a faster pickup than the periodic refresh alone, measured in
    #: docs/kafka-notes.md "Measured defaults of the router and the SDK").
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
    #: Fan-in (issue #12): once a ``session_end`` is committed, the router pauses its
    #: session topic's partition, so fetches no longer list it (every fetch lists
    #: every unpaused partition, and costs the broker and librdkafka per partition
    #: listed).  Every this many seconds one ``ListOffsets`` request looks at the
    #: paused partitions, and one with new records is resumed: an event published
    #: after its session's end is still routed, at most this much later.  0: never
    #: pause.  (A restarted router does not pause sessions that ended before it.)
    paused_check_s: float = 2.0
    #: Exactly-once: commit each transaction (``send_offsets_to_transaction`` +
    #: ``commit_transaction``, blocking broker round trips) in a helper thread while
    #: the loop already consumes and checks the next batch; its records are produced
    #: once the commit returned (one transaction at a time).  Every guarantee is the
    #: same.  Off by default: on the shared 2-core test machine it cut the time the
    #: loop waits on commits by ~90 % but not the wall time, and cost ~0.3-0.7 us
    #: more CPU per event (docs/kafka-notes.md "Router: commits off the critical
    #: path"); worth trying where the broker is remote and the router has a spare
    #: core.  No effect at-least-once.
    commit_in_background: bool = False
    #: Static shard (``--shard I/N``, :mod:`streams.router.shards`): assign this
    #: router the session topics of shard ``I`` of ``N`` (and ``<prefix>.control``)
    #: itself instead of subscribing with the group, so a new session topic never
    #: rebalances anything.  ``None`` (default): the group shares the topics out.
    shard: Shard | None = None

    def __post_init__(self) -> None:
        if self.guarantee not in GUARANTEES:
            raise ConfigError(
                "guarantee",
                f"{self.guarantee!r}: must be one of {', '.join(map(repr, GUARANTEES))}",
            )
        if self.validation not in VALIDATIONS:
            raise ConfigError(
                "validation",
                f"{self.validation!r}: must be one of {', '.join(map(repr, VALIDATIONS))}",
            )
        if self.linger_ms is not None and (
            isinstance(self.linger_ms, bool)
            or not isinstance(self.linger_ms, int)
            or not 0 <= self.linger_ms <= 1000
        ):
            raise ConfigError("linger_ms", f"{self.linger_ms!r}: must be an integer 0..1000")
        for name in (
            "batch_max_messages",
            "batch_max_ms",
            "metadata_refresh_ms",
            "fetch_wait_max_ms",
            "fetch_min_bytes",
            "transaction_timeout_ms",
            "session_timeout_ms",
            "max_consecutive_aborts",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"{value!r}: must be an integer >= 1")
        if (
            isinstance(self.batch_idle_ms, bool)
            or not isinstance(self.batch_idle_ms, int)
            or self.batch_idle_ms < 0
        ):
            raise ConfigError(
                "batch_idle_ms",
                f"{self.batch_idle_ms!r}: must be an integer >= 0 (ms; 0 turns closing "
                "caught-up transactions early off)",
            )
        if self.replication_factor == 0 or self.replication_factor < -1:
            raise ConfigError("replication_factor", "use -1 (broker default) or >= 1")
        if (
            isinstance(self.paused_check_s, bool)
            or not isinstance(self.paused_check_s, (int, float))
            or not 0 <= self.paused_check_s <= 3600
        ):
            raise ConfigError(
                "paused_check_s", f"{self.paused_check_s!r}: seconds 0..3600 (0: never pause)"
            )
        if not isinstance(self.commit_in_background, bool):
            raise ConfigError(
                "commit_in_background", f"{self.commit_in_background!r}: must be True or False"
            )
        if self.status_interval_s < 0:
            raise ConfigError("status_interval_s", "must be >= 0 (0 disables status lines)")
        if self.shard is not None and not isinstance(self.shard, Shard):
            raise ConfigError(
                "shard", f"{self.shard!r}: must be a Shard (Shard.parse('0/2')) or None"
            )
        for name in ("transactional_id", "group_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(name, "must be a non-empty string (or unset to derive it)")

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly-once"

    def resolved_linger_ms(self) -> int:
        return DEFAULT_LINGER_MS[self.guarantee] if self.linger_ms is None else self.linger_ms

    def resolved_group_id(self, prefix: str) -> str:
        """All router instances of a deployment share one consumer group."""
        return self.group_id or f"{prefix}.router"

    def resolved_transactional_id(self, prefix: str) -> str:
        """Default ``<prefix>.router.0``: right for one router; give others ``.1``, ``.2``...
        A static shard's default is its own (:meth:`Shard.transactional_id`)."""
        if self.transactional_id:
            return self.transactional_id
        if self.shard is not None:
            return self.shard.transactional_id(prefix)
        return f"{prefix}.router.0"

    def should_commit(self, messages_in_txn: int, txn_age_ms: float) -> bool:
        """Commit now (the transaction, or the offsets)? (size or age bound reached)."""
        return messages_in_txn >= self.batch_max_messages or (
            messages_in_txn > 0 and txn_age_ms >= self.batch_max_ms
        )

    def should_close_idle(self, messages_in_txn: int, txn_age_ms: float, caught_up: bool) -> bool:
        """Exactly-once: commit a not yet full transaction early, because nothing else is there?

        True when ``batch_idle_ms`` is on, the consumer has nothing more queued
        (``caught_up``), the transaction holds messages and is at least
        ``batch_idle_ms`` old.  Independent of :meth:`should_commit` (either closes
        the batch); never true at-least-once, which holds no message back.
        """
        return (
            self.exactly_once
            and self.batch_idle_ms > 0
            and caught_up
            and messages_in_txn > 0
            and txn_age_ms >= self.batch_idle_ms
        )


__all__ = ["DEFAULT_LINGER_MS", "GUARANTEES", "Guarantee", "RouterConfig"]
