"""The ingest router: per-session topics -> ``<prefix>.events`` (+ DLQ), never losing one.

One confluent-kafka consumer subscribes to ``[session_topic_regex, control_topic]``
(librdkafka accepts ``^regex`` entries mixed with plain names in one subscription
and re-matches the regex on every full metadata refresh).  A producer forwards
each valid message's *original bytes* keyed by session id, or a dead letter with
``dlq.*`` headers.  Two processing guarantees (``RouterConfig.guarantee``) share
this one loop; they differ in how a *batch* (what was consumed since the last
commit) is committed.

**exactly-once** (default): a transactional producer commits the consumed offsets
in the same transaction as the batch's records (consume-transform-produce,
KIP-98/KIP-447):

* a crash (even SIGKILL) loses nothing and duplicates nothing for
  ``read_committed`` readers: the open transaction is aborted when the same
  ``transactional.id`` starts again (``init_transactions``), and consumption resumes
  from the offsets committed by the last *committed* transaction;
* on an abortable error the transaction is aborted and the consumer rewound to the
  committed offsets, so the batch is simply processed again;
* on a fatal error (e.g. fenced by a newer instance with the same transactional id)
  the router raises :class:`~streams.errors.DeliveryError` and stops;
* with ``RouterConfig.commit_in_background`` (off by default): while one
  transaction commits in a helper thread (blocking librdkafka calls that release
  the GIL), the loop consumes and checks the next batch and queues its records;
  they are produced in the next transaction once that commit has returned.  One
  transaction at a time, so the guarantees above are unchanged: a failed
  background commit aborts and the rewind re-reads both batches; a revoke, a stop,
  close() and every other commit first wait for the one in flight (a revoke then
  commits the open batch while the partitions are still ours, as before); offsets
  and the group generation are taken when the commit starts, so a commit the group
  has fenced meanwhile fails instead of committing a partition we lost.

New session topics: the regex refresh alone finds them within
``metadata_refresh_ms`` (+ a rebalance); an announcement on ``<prefix>.control``
makes the router request full metadata at once, which triggers the same rebalance
sooner.  Neither helps for topics created while no router ran: a restarted router
rejoins as the same *static* member (``group.instance.id``) and the coordinator
hands back its old assignment without running the assignor, and librdkafka's
regex re-match then sees no change.  So every ``DISCOVERY_CHECK_S`` the router
compares the session topics in the cluster metadata with what the group has
assigned (``describe_consumer_groups``, asked by the router's admin helper
process, :mod:`streams.router.admin`, because librdkafka's admin client can crash
the process that makes it); a topic left unassigned for two checks
in a row makes it re-subscribe without ``<prefix>.control`` for one check
interval (the revoke makes librdkafka rejoin, and the coordinator then runs a
full rebalance with a real leader), then with it again.  A topic the group gives
to a *ghost* of this router (a member with its own ``group.instance.id`` whose
partitions this consumer does not hold: after a broker restart the group fences
the consumer, and if its fatal error never comes out of ``consume()`` the router
held 0 partitions and routed nothing), or one still unowned while this router
holds no partition at all or after a forced rebalance, makes it replace its
consumer instead (the new one takes over the static member and its assignment):
:func:`plan_discovery`.  An offset commit answered ``FENCED_INSTANCE_ID`` replaces
the consumer at once.  A consumer that holds partitions with records to route but
consumes nothing (after a broker restart its committed-offset lookup never came
back) is replaced too, after two idle ``STALL_CHECK_S`` checks: :func:`plan_stall`.
Announcements are only
a latency hint, so missing them for a few seconds loses nothing.  The router makes
the full metadata requests itself (every ``metadata_refresh_ms`` with the discovery
check, and at once for an announcement, which leaves the pending ones when a
response has it); librdkafka's own periodic refresh is only a backstop
(:data:`BACKSTOP_REFRESH_MS`).  Partitions are
assigned with ``cooperative-sticky``, so a new topic adds partitions without
revoking (and interrupting the transaction on) the others.

**Static shards** (``RouterConfig.shard``, ``--shard I/N``; :mod:`streams.router.shards`):
the consumer subscribes to nothing; :meth:`Router._assign_shard`, run at start, by a
replaced consumer and on every full metadata response, assigns it the partitions of
``<prefix>.control`` and of the session topics shard ``I`` owns, and drops deleted
ones.  With several group members every new session topic rebalanced the group
(p99 of seconds under churn, docs/chaos.md); a shard's assignment changes nothing
elsewhere.  Offsets are committed to the same group (generation -1: no member), and
the group-only checks (owners, ghosts, forced rebalances) are skipped.

**at-least-once**: an idempotent producer (``acks=all``, no transactions); every
message is produced as soon as it is consumed (nothing waits for a batch window)
and is visible to readers once the broker has it.  Every ``batch_max_ms`` /
``batch_max_messages``, on partition revoke, before a metadata refresh and on a
clean stop, the router *flushes* the producer (every record produced so far is
acknowledged) and only then commits the consumed positions, so a committed offset
never passes an undelivered message.  The commit is *asynchronous*: its answer comes
back through the consumer's ``on_commit`` callback while the loop goes on
(:meth:`Router._on_offsets_answer`).  Never a synchronous commit, and never one in a
helper thread: since confluent-kafka 2.16 a ``Consumer`` serializes calls across
threads, so a commit hanging in a helper thread (as one does for minutes after a
broker restart) held up every later ``consume`` of the loop as well
(docs/kafka-notes.md "confluent-kafka 2.16 serializes a consumer's calls"):

* a crash (even SIGKILL) loses nothing: the restarted router resumes from the
  last committed offsets and routes again what it had delivered since (one commit
  interval; more if commits were refused meanwhile): duplicates in
  ``<prefix>.events`` (and the DLQ), which the worker's per-session ``seq`` dedupe
  absorbs;
* a delivery error, a flush that does not finish within ``FLUSH_TIMEOUT_S`` or a
  fatal producer error stops the router (:class:`DeliveryError`) without
  committing: a restart re-reads from the last committed offset;
* an offset commit the broker refuses (e.g. during a rebalance, or timed out while
  the coordinator is away) is logged and counted, and its offsets go back to the
  uncommitted ones of partitions still held: the next commit covers them
  (``max_consecutive_aborts`` refusals in a row stop the router);
* at start it runs ``init_transactions`` once with the instance's transactional
  id, so a transaction left open by an exactly-once predecessor is aborted now
  instead of holding back read_committed readers until it times out.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from streams.errors import ConfigError, DeliveryError, InvalidEventError
from streams.router.admin import AdminProcess, RouterAdmin
from streams.router.announce import PendingTopics, parse_announcement
from streams.router.config import RouterConfig
from streams.router.metrics import RouterMetrics
from streams.router.stats import RouterStats, format_status
from streams.router.validate import (
    SRC_KEY,
    SRC_OFFSET,
    SRC_PARTITION,
    Accepted,
    EventDecoder,
    Rejected,
    RoutingCheck,
    Verdict,
    check_message,
    dlq_headers,
    session_id_of_topic,
)
from streams.security import client_config, raise_if_security_error, weak_method
from streams.security import current as current_security
from streams.settings import Settings
from streams.topics import SIZE_MARGIN, router_topic_specs
from streams.topics import ensure_topics as create_topics  # ensure_topics below is the router set

log = logging.getLogger("streams.router")

#: A dead letter keeps at most this much of an oversized message (the full value
#: may not fit the DLQ topic, and a preview is enough to diagnose it).
DLQ_PREVIEW_BYTES = 64 * 1024
_TOPIC_MARGIN = SIZE_MARGIN  # headers + record overhead on top of max_message_bytes
#: ``Producer.produce`` is called with positional arguments only: ``(topic, value,
#: key, partition, callback, on_delivery, timestamp, headers)``, with this
#: partition (librdkafka's ``RD_KAFKA_PARTITION_UA``: its partitioner picks, by
#: key) and ``None`` for both callbacks (the producer's own ``on_delivery``).  Why:
#: confluent-kafka parses keyword arguments by name on every call, and the
#: ``timestamp=`` and ``headers=`` keywords cost ~0.3 us of the ~1 us a routed
#: record's ``produce`` took (``tests/bench/bench_router_path.py``; the same
#: records either way; docs/kafka-notes.md "Router: positional produce").
_ANY_PARTITION = -1
#: At-least-once: give up (raise, commit nothing) when a flush before an offset
#: commit has not delivered everything after this long.  Below the consumer's
#: max.poll.interval.ms (300 s), so the group does not evict a router stuck here.
FLUSH_TIMEOUT_S = 60.0
#: Longest single blocking call into librdkafka (transactional calls, offset
#: look-ups, flush slices).  A call that times out (broker unreachable) is retried,
#: and between two attempts the router looks at its stop flag: a stop request
#: (SIGTERM) is seen within about this long even while the broker is down.
CALL_TIMEOUT_S = 2.0
#: Give up (DeliveryError: exit loudly, a supervisor restarts the router) when a
#: transactional call has kept timing out for this long: past the default
#: ``transaction.timeout.ms`` (60 s) the broker aborts the transaction anyway.
BROKER_WAIT_S = 120.0
#: A call into librdkafka that has not returned after this long is *wedged*:
#: ``send_offsets_to_transaction`` ignores its timeout and can block forever once
#: the group coordinator went away and came back (measured here: a broker restart;
#: librdkafka issues #5456 and #5511).  Every transactional call therefore runs in
#: a helper thread; a wedged one is left there and the producer is replaced by a
#: new one with the same transactional id (``init_transactions`` fences the old
#: one and ends its transaction; the consumer is rewound to the batch's first
#: message, or replaced when a given-up commit may have committed:
#: :meth:`Router._replace_producer`).  Far above a normal commit (milliseconds).
WEDGED_S = 15.0
#: The same for one attempt of a call inside a transaction (``send_offsets_to_
#: transaction``, ``commit_transaction``, ``abort_transaction``), where a wedge
#: costs only a replaced producer: each attempt is given :data:`CALL_TIMEOUT_S`,
#: so one still running after three times that ignores its timeout.  Measured
#: (``tests/bench/bench_router_restarts.py``, docs/kafka-notes.md "librdkafka:
#: ``send_offsets_to_transaction`` ignores its timeout"): after most broker
#: restarts the first ``send_offsets_to_transaction`` gets its ``AddOffsetsToTxn``
#: answered and then never sends the ``TxnOffsetCommit``, although the broker is
#: back; with 15 s here the router routed nothing for 17-22 s after the restart.
TXN_CALL_WEDGED_S = 3 * CALL_TIMEOUT_S
#: A ``send_offsets_to_transaction`` or ``commit_transaction`` whose attempts all
#: returned a retriable error (``_TIMED_OUT``, "retry call to resume") for this long
#: counts as wedged too: the producer is replaced.  Seen after a broker restart on
#: a busy machine (2026-12-02): the ``EndTxn`` request sat in the out-queue of
#: librdkafka's ``TxnCoordinator`` handle ("Timed out 0 in-flight, 0 retry-queued,
#: 1 out-queue") for the whole 120 s of :data:`BROKER_WAIT_S` although the broker
#: was back, and the ``abort_transaction`` after it could only answer ``_CONFLICT``
#: ("Conflicting commit_transaction API call is already in progress"): the router
#: routed nothing for minutes, then stopped.  A new producer's ``init_transactions``
#: talks to the coordinator over a new connection.  Below the default
#: ``transaction.timeout.ms`` (60 s), far above a commit during a short outage.
TXN_STUCK_S = 30.0
#: ``close()``'s ``consumer.close()`` is left to a helper thread after
#: :data:`CALL_TIMEOUT_S` once a stop is requested (SIGTERM), else after this long
#: (a close at the end of ``run(max_seconds=...)`` or after a failure, as a library
#: caller sees it): a healthy close takes milliseconds, a frozen broker makes it
#: wait out request timeouts (:meth:`Router._close_consumer`).
CLOSE_WAIT_S = WEDGED_S
#: Attempts of one seek that librdkafka answers ``_OUTDATED``: a seek is a versioned
#: op on the partition, and an op with a newer version handled first (the pause of
#: the whole assignment that librdkafka's main thread makes when a rebalance begins,
#: racing the seek from this thread) makes it refuse the older seek unapplied.  A
#: new attempt gets a newer version.  Seen in a chaos run (2026-12-07): an abort
#: after ``ILLEGAL_GENERATION`` raised ``Failed to seek to offset 173: Local:
#: Outdated`` out of the loop and the router exited 1.
SEEK_ATTEMPTS = 5
#: The producer flush at a stop whose consumer close was left behind: best effort.
CLOSE_FLUSH_S = 1.0
#: At-least-once: a periodic offset commit waits while an earlier one awaits its
#: answer (see :meth:`Router._commit_offsets`), but not behind one unanswered after
#: this long (librdkafka always answers, by a timeout at worst: a safety net).
OFFSET_COMMIT_ANSWER_S = 30.0
#: At-least-once: refused offsets with no new batch to carry them are sent again
#: after this long at the soonest.
REFUSED_RETRY_S = 1.0
#: A consumer that the group fenced (``FENCED_INSTANCE_ID``: seen after a broker
#: restart, when a JoinGroup retried during the outage registered this very
#: instance twice) is replaced by a new one at most this many times; more means
#: another router really runs with the same instance id, and this one stops.
MAX_CONSUMER_RESTARTS = 3
#: ... within this many seconds (a long-running router sees one fencing per broker
#: restart; only restarts in quick succession point at a duplicate instance id).
CONSUMER_RESTART_WINDOW_S = 300.0
#: A consumer that holds partitions but fetches nothing: after this many seconds
#: without a consumed *session* record (announcements on the control topic do not
#: count: they kept coming for 4 minutes while an at-least-once router after a
#: broker restart fetched no session record) the router compares, for its
#: partitions (paused ones of ended sessions aside), the group's committed offsets
#: and its own positions with the end offsets (one OffsetFetch and one ListOffsets
#: through the admin helper process, :mod:`streams.router.admin`; see
#: :func:`plan_stall`).  Partitions behind at two such checks in a row, with
#: nothing consumed in between, mean the consumer stopped fetching: it is
#: replaced (``_restart_consumer``).  Seen after a broker restart (at-least-once,
#: ``tests/bench/bench_router_restarts.py --guarantee at-least-once``): a router
#: held 460 partitions, kept taking new ones, consumed nothing and had not
#: recovered by itself after 4 minutes.  10 s, not 5: at 5 s the check replaced an
#: exactly-once consumer that was only slow to come back after a restart, and the
#: replacement (closing the old consumer, a rejoin) cost more than the wait.
STALL_CHECK_S = 10.0
#: Discovery checks in a row (``DISCOVERY_CHECK_S`` apart) whose metadata request
#: through the consumer fails while the admin client's succeeds, each time: the consumer's
#: own connections are broken, and it is replaced.  Seen after a broker restart in
#: a loaded CI run: the consumer lost its partitions to the session timeout, then
#: every metadata request it made failed with "Broker transport failure" for 2
#: minutes while the broker served everyone else; with no partitions the stall
#: check had nothing to look at, and nothing was routed.
CUT_OFF_CHECKS = 3
#: Seconds between checks that every session topic is assigned to some router of
#: the group (see ``_check_discovery``); a topic must be seen unassigned by two
#: checks in a row before the router forces a rebalance, so the normal regex
#: pickup (~1 s + a rebalance) is never disturbed.
DISCOVERY_CHECK_S = 3.0
#: librdkafka's own periodic full metadata refresh, a backstop only: the router
#: makes the refresh itself every ``RouterConfig.metadata_refresh_ms``, as part of
#: its discovery check (:meth:`Router._refresh_metadata`).  Before, both ran every
#: 3 s: two full metadata requests (every topic, the regex over each) where one does.
BACKSTOP_REFRESH_MS = 60_000


#: Group errors a transaction's offsets can be refused with: the abort's log line
#: names the generation and member they were sent with.
_GROUP_REFUSALS = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


class _InflightCommit:
    """Exactly-once: one transaction committing in a helper thread
    (``RouterConfig.commit_in_background``), and what its batch routed.

    Invariants: at most one exists (a transactional producer has one transaction at
    a time); while it exists no record is produced (the next batch's records wait in
    ``Router._queued``) and no other call is made on the producer; only the helper
    thread writes ``error`` and ``done_at``, and the loop reads them only after
    ``thread`` has ended (``Router._settle``).
    """

    __slots__ = (
        "announce",
        "dlq",
        "done_at",
        "ending",
        "error",
        "first",
        "group_metadata",
        "msgs",
        "positions",
        "routed",
        "started_at",
        "thread",
        "txn_started",
    )

    def __init__(
        self,
        positions: dict[tuple[str, int], int],
        *,
        msgs: int,
        routed: int,
        dlq: int,
        announce: int,
        ending: set[tuple[str, int]],
        txn_started: float,
    ) -> None:
        self.positions = positions
        self.msgs = msgs
        self.routed = routed
        self.dlq = dlq
        self.announce = announce
        self.ending = ending
        self.txn_started = txn_started
        self.started_at = time.monotonic()
        self.done_at = 0.0
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        #: Router._first of this batch (where an abort of it seeks back to)
        self.first: dict[tuple[str, int], int] = {}
        #: consumer_group_metadata() sent with its offsets (named in a refusal's log)
        self.group_metadata: object = None


def describe_group_metadata(metadata: object) -> str:
    """``generation G, member M, instance I`` of a ``consumer_group_metadata()``,
    for the log of a refused transaction (ILLEGAL_GENERATION names a stale one).

    confluent-kafka hands the metadata over as librdkafka's serialized form
    (``rd_kafka_consumer_group_metadata_write``): ``CGMDv2:``, the generation as a
    native-endian int32, then the NUL-terminated group id and member id, a
    null-flag byte and the NUL-terminated instance id.  Anything else is shown as
    its repr, never raised: this is for a log line.
    """
    if not isinstance(metadata, bytes) or not metadata.startswith(b"CGMDv2:"):
        return f"group metadata {metadata!r}"
    body = metadata[7:]
    generation = int.from_bytes(body[:4], sys.byteorder, signed=True)
    rest = body[4:]
    group_end = rest.find(b"\0")
    member_end = rest.find(b"\0", group_end + 1)
    if group_end < 0 or member_end < 0:
        return f"generation {generation} (group metadata {metadata!r})"
    member = rest[group_end + 1 : member_end].decode(errors="replace") or "-"
    flag = rest[member_end + 1 : member_end + 2]
    instance = rest[member_end + 2 :].rstrip(b"\0").decode(errors="replace")
    if flag != b"\0":
        instance = "-"
    return f"generation {generation}, member {member}, instance {instance or '-'}"


class _AbortableProduce(Exception):
    """produce() refused inside a transaction that must be aborted (internal signal)."""


class _ConsumerFenced(Exception):
    """The consumer hit a fatal error (e.g. FENCED_INSTANCE_ID) (internal signal)."""


class _Wedged(Exception):
    """A librdkafka call did not return within :data:`WEDGED_S` (internal signal)."""


class _WedgedCommit(_Wedged):
    """A ``commit_transaction`` given up (wedged, or stuck in timeouts): whether its
    transaction committed is unknown (internal signal).  Its ``EndTxn`` may have
    reached the coordinator before the answer was lost; the next producer's
    ``init_transactions`` then completes that commit instead of aborting it."""


class _Abandoned(Exception):
    """A stop was requested while a call to the broker could not complete (broker
    unreachable): stop now without committing the open batch (internal signal).

    Nothing is lost: exactly-once, the open transaction is aborted by the broker
    when this transactional id starts again (or after ``transaction.timeout.ms``);
    at-least-once, its offsets were not committed, so a restart routes it again.
    """


def ensure_topics(
    settings: Settings, config: RouterConfig, admin: AdminClient | None = None
) -> None:
    """Create ``events`` (N partitions), ``dlq`` and ``control`` if absent.

    Existing topics are left alone; an ``events`` topic with another partition
    count is reported (the worker co-partitions by it), not changed.
    """
    admin = admin or AdminClient(
        {"bootstrap.servers": settings.bootstrap, **client_config(settings.security)}
    )
    for name in create_topics(
        admin,
        router_topic_specs(settings, config.replication_factor),
        bootstrap=settings.bootstrap,
    ):
        log.info("created topic %s", name)
    # (full metadata, never list_topics(topic=...): that would auto-create on some brokers)
    md = admin.list_topics(timeout=10.0)
    meta = md.topics.get(settings.events_topic)
    if (
        meta is not None
        and meta.error is None
        and len(meta.partitions) != settings.events_partitions
    ):
        log.warning(
            "%s has %d partitions, settings.events_partitions is %d; keeping the topic as is",
            settings.events_topic,
            len(meta.partitions),
            settings.events_partitions,
        )


def default_decoder(settings: Settings) -> EventDecoder:
    """The project serde; decodes both single-object and Confluent framing."""
    from streams.serde import EventSerde

    if settings.schema_registry_url:
        return EventSerde("confluent", registry=settings.schema_registry_url)
    return EventSerde("single-object")


@dataclass(frozen=True)
class Owner:
    """A member of the router group as ``describe_consumer_groups`` reports it."""

    member_id: str
    instance_id: str | None


@dataclass(frozen=True)
class DiscoveryPlan:
    """What one discovery check decided (:func:`plan_discovery`).

    ``action``: ``"none"``, ``"rebalance"`` (re-subscribe without the control
    topic: the group rebalances with this consumer as a real leader) or
    ``"restart"`` (replace this consumer: re-subscribing cannot help one that the
    group no longer counts as itself).  ``suspects``: the session topics that no
    *live* member owns, remembered for the next check (a topic must be a suspect at
    two checks in a row before anything is forced).  ``ghosts``: suspects the group
    gives to this router's own ``group.instance.id`` although this consumer does
    not hold them (a member left behind by a rejoin during a broker outage, or an
    assignment not yet delivered: hence the two checks).  ``stale``: suspects at
    this check and the previous one (what the action is for).  ``elsewhere``:
    topics other members own (only logged).
    """

    action: Literal["none", "rebalance", "restart"]
    suspects: frozenset[str]
    ghosts: frozenset[str]
    stale: frozenset[str]
    elsewhere: Mapping[str, Owner]


def plan_discovery(
    missing: frozenset[str],
    owners: Mapping[str, Owner],
    *,
    instance_id: str,
    previous: frozenset[str],
    held_partitions: int,
    forced_before: frozenset[str],
) -> DiscoveryPlan:
    """Decide what a discovery check does (pure; ``Router._check_discovery`` acts).

    ``missing``: session topics in the cluster metadata that this consumer does not
    hold; ``owners``: topic -> the group member that has it; ``previous``: the
    suspects of the previous check; ``forced_before``: the topics a rebalance was
    last forced for.

    Invariants: a topic owned by another instance id is never a suspect (that router
    routes it); nothing is forced for a topic seen once (it may be mid-pickup).  A
    stale suspect is *restart* when this consumer holds no partition at all (its
    membership is what is broken: after a broker restart the group had fenced it
    or kept a ghost of it, and it routed nothing for minutes), when the group gives
    it to a ghost of this instance, or when a forced rebalance already failed to
    place it; otherwise *rebalance*.
    """
    ghosts = frozenset(t for t in missing if t in owners and owners[t].instance_id == instance_id)
    suspects = frozenset(t for t in missing if t not in owners) | ghosts
    elsewhere = {t: owners[t] for t in missing if t in owners and t not in ghosts}
    stale = suspects & previous
    action: Literal["none", "rebalance", "restart"]
    if not stale:
        action = "none"
    elif held_partitions == 0 or stale & ghosts or stale & forced_before:
        action = "restart"
    else:
        action = "rebalance"
    return DiscoveryPlan(action, suspects, ghosts, stale, elsewhere)


@dataclass(frozen=True)
class StallPlan:
    """What one stall check decided (:func:`plan_stall`).

    ``behind``: partition -> (committed offset, this consumer's position, end
    offset) for each partition with records the group has not committed and this
    consumer has not read; remembered as ``suspects`` for the next check.
    ``stale``: behind at this check and the previous one; ``restart``: replace the
    consumer (``stale`` is not empty).
    """

    behind: Mapping[tuple[str, int], tuple[int, int, int]]
    stale: frozenset[tuple[str, int]]

    @property
    def suspects(self) -> frozenset[tuple[str, int]]:
        return frozenset(self.behind)

    @property
    def restart(self) -> bool:
        return bool(self.stale)


def plan_stall(
    committed: Mapping[tuple[str, int], int],
    positions: Mapping[tuple[str, int], int],
    ends: Mapping[tuple[str, int], int],
    previous: frozenset[tuple[str, int]],
) -> StallPlan:
    """Decide what a stall check does (pure; ``Router._check_stall`` acts).

    Only called when no record was consumed for :data:`STALL_CHECK_S`.  A
    partition is *behind* when its end offset is past the group's committed offset
    (records nobody routed; a missing committed offset counts as 0, where
    ``auto.offset.reset=earliest`` starts) **and** past this consumer's position
    (it has not read them either; a position below 0 is librdkafka's "nothing
    consumed here yet").  The second test keeps a router whose last offset commit
    was refused (committed behind, position at the end: nothing left to read) from
    being taken for a stalled one.  Invariant: ``restart`` only for partitions
    behind at two checks in a row (one check may fall between an assignment and
    its first fetch).
    """
    behind = {}
    for key, end in ends.items():
        done = max(committed.get(key, -1), 0)
        pos = positions.get(key, -1)
        if end > done and end > max(pos, 0):
            behind[key] = (committed.get(key, -1), pos, end)
    return StallPlan(behind, frozenset(behind) & previous)


def _seek(consumer: Consumer, tp: TopicPartition) -> None:
    """``consumer.seek(tp)``, again while librdkafka answers ``_OUTDATED`` (a racing
    op of its own refused the seek unapplied: :data:`SEEK_ATTEMPTS`).  Any other
    refusal, or one still outdated after every attempt, is raised: a position left
    past an aborted batch would skip it at the next commit."""
    for attempt in range(1, SEEK_ATTEMPTS + 1):
        try:
            consumer.seek(tp)
            return
        except KafkaException as exc:
            kerr = exc.args[0] if exc.args else None
            outdated = isinstance(kerr, KafkaError) and kerr.code() == KafkaError._OUTDATED
            if not outdated or attempt == SEEK_ATTEMPTS:
                raise
            log.info(
                "seek of %s[%d] to %d refused as outdated (attempt %d of %d): seeking again",
                tp.topic,
                tp.partition,
                tp.offset,
                attempt,
                SEEK_ATTEMPTS,
            )


def _is_fatal(err: KafkaError) -> bool:
    """A consumer error after which the client is dead: fatal, or librdkafka's
    ``_FATAL`` code (the consumer is replaced: ``_ConsumerFenced``)."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


class Router:
    """Consume-validate-forward loop, exactly-once or at-least-once (module docstring).

    Single-threaded: every method except :meth:`request_stop` must be called from
    the thread that runs :meth:`run`.  Use as a context manager or call
    :meth:`start` / :meth:`close`.
    """

    def __init__(
        self,
        settings: Settings,
        config: RouterConfig | None = None,
        *,
        decoder: EventDecoder | None = None,
        extra_consumer_config: dict[str, Any] | None = None,
        extra_producer_config: dict[str, Any] | None = None,
        metrics: RouterMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or RouterConfig()
        self._decoder = decoder if decoder is not None else default_decoder(settings)
        #: check_routing (no full decode; as RoutingCheck, its cached form) unless
        #: configured "full" or the decoder cannot check framing alone
        #: (RouterConfig.validation).
        self._check: Callable[[bytes | None, str], Verdict]
        if self.config.validation == "framing" and hasattr(self._decoder, "check_framing"):
            self._check = RoutingCheck(
                prefix=settings.prefix,
                decoder=self._decoder,  # type: ignore[arg-type]
                max_message_bytes=settings.max_message_bytes,
            )
        else:
            self._check = functools.partial(
                check_message,
                prefix=settings.prefix,
                decoder=self._decoder,
                max_message_bytes=settings.max_message_bytes,
            )
        self._extra_consumer = dict(extra_consumer_config or {})
        self._extra_producer = dict(extra_producer_config or {})
        self._stop = threading.Event()
        #: Prometheus hooks (streams.router.metrics); None: no metrics.
        self.metrics = metrics
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._exactly_once = self.config.exactly_once
        #: A batch is open: messages were handled since the last commit (exactly-once:
        #: a transaction is open).
        self._in_txn = False
        #: Exactly-once: ``begin_transaction`` was called for the open batch (with a
        #: commit in the background, a batch opens before its transaction can begin).
        self._txn_open = False
        #: Exactly-once: the previous batch's transaction committing in the background.
        self._inflight: _InflightCommit | None = None
        #: Records of the open batch waiting for ``_inflight`` to finish (then produced
        #: in its own transaction, or dropped by an abort: the rewind reads them again).
        self._queued: list[tuple[str, bytes | None, bytes | None, Any, int]] = []
        self._background = self._exactly_once and self.config.commit_in_background
        #: Static shard (RouterConfig.shard): the router assigns itself its topics
        #: (:meth:`_assign_shard`) and joins no group; None: group subscription.
        self._shard = self.config.shard
        #: Inside on_revoke / on_lost: a rewind after an abort waits (_rewind_after_abort).
        self._in_rebalance = False
        self._rewind_due = False
        self._failed = False  # set by a fatal error or a bug: never commit after it
        self._abandoned = False  # stopped while the broker was unreachable (_Abandoned)
        #: :meth:`close` gave up waiting for the consumer's close (see _close_consumer)
        self.close_abandoned = False
        self._producer_conf: dict[str, Any] = {}
        self._consumer_conf: dict[str, Any] = {}
        self._consumer_restarts = 0
        self._last_consumer_restart = 0.0
        #: Why the consumer is unusable (an offset commit answered FENCED_INSTANCE_ID
        #: or _FATAL): the loop replaces it at the end of this step (never from inside
        #: a rebalance callback), without waiting for the fatal error to be consumed.
        self._consumer_fenced: str | None = None
        #: Why the outcome of a given-up commit is unknown (:class:`_WedgedCommit`):
        #: the loop replaces the consumer at the end of this step, and the new one
        #: resumes from the group's committed offsets, which say whether that batch
        #: committed (:meth:`_replace_producer`).  What is consumed meanwhile is dropped.
        self._commit_unknown: str | None = None
        #: The consumer _restart_consumer replaced (its callbacks are ignored).
        self._retired_consumer: Consumer | None = None
        self._replaced_producers = 0
        self._unknown_commits = 0
        self._unknown_msgs = 0
        self._retired_producers: list[Producer] = []
        self._producer_dead = False  # fatal producer error (e.g. fenced): do not use it
        self._fatal_cause: str | None = None
        self._txn_started = 0.0
        self._txn_msgs = 0
        self._txn_routed = 0
        self._txn_dlq = 0
        self._txn_announce = 0
        self._txn_errors: list[str] = []
        self._delivery_errors = 0  # failed deliveries since start (at-least-once: fatal)
        self._consecutive_aborts = 0  # aborts (exactly-once) / refused offset commits
        self._routed = 0
        self._dlq = 0
        self._announcements = 0
        self._transactions = 0
        self._idle_closes = 0
        self._aborts = 0
        self._aborted_msgs = 0
        self._rebalances = 0
        self._commit_s = 0.0
        self._offset_commits = 0
        self._failed_commits = 0
        #: Next offset per source partition handled since the last successful commit
        #: (offset commit, or exactly-once: committed transaction), so a commit sends
        #: only what moved (with 1,000 session topics: ~100 partitions per 100 ms
        #: instead of all 1,000 offsets written to __consumer_offsets, and no
        #: consumer.position() over every assigned partition).  Exactly-once: emptied
        #: by an abort (the rewind re-reads those messages).
        self._uncommitted: dict[tuple[str, int], int] = {}
        #: At-least-once: offsets sent in asynchronous commits whose answer has not
        #: come back yet (the highest per partition), and when each such commit was
        #: sent, oldest first (librdkafka answers a consumer's commits in order).  A
        #: refused one's offsets go back to ``_uncommitted`` unless a newer offset of
        #: the partition is sent or uncommitted already (:meth:`_on_offsets_answer`).
        self._sent: dict[tuple[str, int], int] = {}
        self._sent_at: deque[tuple[float, float]] = deque()
        self._offsets_retry_at = 0.0
        #: Answers from an older consumer than this one are ignored (a replaced
        #: consumer answers its last commits while it closes).
        self._consumer_gen = 0
        #: Set by a commit answer (a callback inside consume()); raised by the loop.
        self._commit_failure: DeliveryError | None = None
        #: Exactly-once: offset of the first message handled per source partition
        #: since that partition's last committed transaction: where an abort seeks
        #: it back to (_seek_back).  Partitions not in it have not moved since.  No
        #: committed-offset lookup: during a rebalance that lookup does not return
        #: (seen: it timed out in and right after a revoke whose background commit
        #: was fenced), and right after a commit it can answer an older offset.
        self._first: dict[tuple[str, int], int] = {}
        self._assigned: set[TopicPartition] = set()
        self._assigned_topics: set[str] = set()
        self._keys: dict[str, bytes] = {}  # session id -> key bytes (hot path)
        self._pending = PendingTopics()
        #: the admin requests of the periodic checks, made in a child process
        #: (streams.router.admin: librdkafka's admin client can crash a process)
        self._admin: RouterAdmin | None = None
        self._subscription: list[str] = []
        #: Partitions whose session_end this batch routed: paused once it commits.
        self._ending: set[tuple[str, int]] = set()
        #: Paused partitions of ended sessions -> the next offset to read there.
        self._paused: dict[tuple[str, int], int] = {}
        self._next_paused_check = 0.0
        #: Partitions paused / resumed (new records after the end) since start.
        self.paused_total = 0
        self.resumed_total = 0
        self._control_dropped = False
        self._next_discovery = 0.0
        #: When the router's own metadata refresh is due (_refresh_metadata); the
        #: group join makes its own request first.
        self._next_refresh = time.monotonic() + self.config.metadata_refresh_ms / 1000.0
        #: monotonic time of the last consumed record (or of the consumer's start)
        self._last_consumed_at = time.monotonic()
        self._next_stall_check = 0.0
        #: Partitions behind at the previous stall check (plan_stall).
        self._stall_suspects: frozenset[tuple[str, int]] = frozenset()
        #: Consumers replaced because they stopped fetching (tests, logs).
        self.stall_restarts = 0
        #: Discovery checks in a row whose metadata request through the consumer failed.
        self._metadata_failures = 0
        #: monotonic time of the last discovery metadata request that succeeded
        self._metadata_ok_at = 0.0
        #: Consumers replaced because only they could not reach the cluster (CUT_OFF_CHECKS).
        self.cut_off_restarts = 0
        #: Session topics no member of the group had at the previous discovery check.
        self._unassigned_before: frozenset[str] = frozenset()
        #: Rebalances forced because a session topic stayed unassigned (tests, logs).
        self.forced_rebalances = 0
        #: The group's state at the last describe_consumer_groups (for the log).
        self._group_state = "unknown"
        #: Consumers replaced because session topics stayed without a live owner.
        self.forced_restarts = 0
        #: Topics the last forced rebalance was for: still ownerless later -> restart.
        self._forced_for: frozenset[str] = frozenset()
        self._last_discovery = 0.0
        self._t0 = time.monotonic()
        #: ``time.monotonic()`` of the first partition assignment (None before it):
        #: lets benchmarks and tests separate group-join time from routing time.
        self.first_assigned_at: float | None = None
        self._prefix = settings.prefix
        self._events_topic = settings.events_topic
        self._dlq_topic = settings.dlq_topic
        self._control_topic = settings.control_topic
        self._max_bytes = settings.max_message_bytes
        self._pause_ended = self.config.paused_check_s > 0

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Create topics, fence any predecessor (``init_transactions``), subscribe."""
        cfg = self.config
        ensure_topics(self.settings, cfg)
        if self.metrics is not None:
            self.metrics.set_guarantee(cfg.guarantee)
            if self._shard is not None:
                self.metrics.set_shard(self._shard.index, self._shard.count)
        group = cfg.resolved_group_id(self._prefix)
        consumer_conf: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap,
            **client_config(self.settings.security),
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            # the router refreshes every metadata_refresh_ms itself (_refresh_metadata)
            "topic.metadata.refresh.interval.ms": max(BACKSTOP_REFRESH_MS, cfg.metadata_refresh_ms),
            "fetch.wait.max.ms": cfg.fetch_wait_max_ms,
            "fetch.min.bytes": cfg.fetch_min_bytes,
            "fetch.message.max.bytes": self._max_bytes + _TOPIC_MARGIN,
            # Static membership (KIP-345) keyed by the instance's stable id: a restarted
            # router takes its old member's place at once instead of waiting for the
            # dead member's session to time out (docs/kafka-notes.md "Measured defaults").
            "group.instance.id": cfg.resolved_transactional_id(self._prefix),
            "session.timeout.ms": cfg.session_timeout_ms,
        }
        if self._shard is not None:
            # a static shard joins no group (it assigns itself its topics): no member
            # to keep, no assignor; group.id stays, for the committed offsets
            for key in ("group.instance.id", "session.timeout.ms", "partition.assignment.strategy"):
                del consumer_conf[key]
        consumer_conf.update(self._extra_consumer)
        self._consumer_conf = consumer_conf
        instance_id = cfg.resolved_transactional_id(self._prefix)
        producer_conf: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap,
            **client_config(self.settings.security),
            "linger.ms": cfg.resolved_linger_ms(),
            # Java-compatible murmur2 for keyed messages, as Faust/aiokafka: the worker's
            # HTTP routing computes a session's partition this way (streams.worker.web).
            "partitioner": "murmur2_random",
            "message.max.bytes": self._max_bytes + 2 * _TOPIC_MARGIN,
            # Failures only: no Python callback per delivered message (its cost:
            # docs/kafka-notes.md "Measured defaults").
            "delivery.report.only.error": True,
            # held weakly: no router <-> client cycle left to the garbage collector
            # (streams.security.weak_method: a client freed in librdkafka's own
            # thread aborts the process)
            "on_delivery": weak_method(self._on_delivery),
            "error_cb": weak_method(self._on_producer_error),
        }
        if self._exactly_once:
            producer_conf["transactional.id"] = instance_id
            producer_conf["transaction.timeout.ms"] = cfg.transaction_timeout_ms
        else:
            # Retries neither duplicate nor reorder within a partition (per session).
            producer_conf["enable.idempotence"] = True
            producer_conf["acks"] = "all"
        producer_conf.update(self._extra_producer)
        self._producer_conf = producer_conf
        if self._exactly_once:
            self._producer = Producer(producer_conf)
            producer = self._producer
            try:
                self._broker_call(
                    "init_transactions", lambda t: producer.init_transactions(t), txn=False
                )
            except _Abandoned as exc:
                self._note_abandoned(exc)  # stopped before anything was consumed
                return
            except KafkaException as exc:
                raise DeliveryError.from_kafka(
                    f"init_transactions for transactional.id {instance_id!r} failed: "
                    f"{exc.args[0]}; the broker must support transactions "
                    "(transaction.state.log.* settings)",
                    exc,
                ) from exc
        else:
            self._abort_leftover_transaction(instance_id)
            self._producer = Producer(producer_conf)
        self._consumer = self._new_consumer()
        if self._admin is None:  # (kept across consumer restarts; a test may set one)
            self._admin = AdminProcess(
                self.admin_config(),
                on_death=self.metrics.on_admin_helper_death if self.metrics else None,
            )
        subscription = [self.settings.session_topic_regex, self._control_topic]
        self._subscription = subscription
        self._subscribe()
        log.info(
            "router %s %s (group %s, %s, instance %s, linger.ms %s)",
            "subscribed to" if self._shard is None else f"is shard {self._shard} of",
            subscription,
            group,
            cfg.guarantee,
            instance_id,
            producer_conf.get("linger.ms"),
        )

    def admin_config(self) -> dict[str, Any]:
        """The admin helper's client configuration: the bootstrap, the security
        settings the consumer and producer get (``settings.security``, else the
        process's), and the security keys of ``extra_consumer_config``.  Plain
        values only (it travels to the child as JSON): no callbacks."""
        security = self.settings.security or current_security()
        return {
            "bootstrap.servers": self.settings.bootstrap,
            **security.confluent_config(),
            **{
                k: v
                for k, v in self._extra_consumer.items()
                if k.startswith(("security.", "sasl.", "ssl."))
            },
        }

    def _subscribe(self, *, without_control: bool = False) -> None:
        """(Re-)subscribe.  ``without_control`` drops ``<prefix>.control`` for a
        while: the only subscription change that makes librdkafka rejoin the group
        here (it revokes a partition; re-subscribing to the same or an equivalent
        list is a no-op), and a rejoin after a revoke makes the coordinator run a
        full rebalance with this member as a real leader."""
        assert self._consumer is not None
        if self._shard is not None:
            # (no group: a replaced consumer, or the start, assigns the shard anew)
            self._control_dropped = False
            self._assign_shard(None)
            return
        self._control_dropped = without_control
        topics = self._subscription[:1] if without_control else self._subscription
        try:
            self._consumer.subscribe(
                topics,
                on_assign=weak_method(self._on_assign),
                on_revoke=weak_method(self._on_revoke),
                on_lost=weak_method(self._on_lost),
            )
        except KafkaException as exc:
            if _is_fatal(exc.args[0]):
                raise _ConsumerFenced(f"subscribe: {exc.args[0]}") from exc
            raise

    def _admin_reaches_cluster(self) -> bool:
        """One metadata request through the admin helper (its own connections)."""
        assert self._admin is not None
        return self._admin.reaches_cluster(CALL_TIMEOUT_S)

    def _cluster_reachable(self) -> bool:
        """Did the last discovery check's metadata request (through the consumer)
        succeed, recently?  The paused and stall checks make their admin requests
        only then: no new request is made to find out.

        Why: an admin request made while the cluster is down only waits out its
        timeout, in the router's loop; and it is when librdkafka's admin client
        crashes (:mod:`streams.router.admin`), which costs the helper process a
        restart.
        """
        return time.monotonic() - self._metadata_ok_at <= 2 * DISCOVERY_CHECK_S

    def _group_owners(self) -> dict[str, Owner] | None:
        """Topic -> the member of the router group it is assigned to (None: the
        group description failed now; logged, and checked again next time)."""
        assert self._admin is not None
        group = self.config.resolved_group_id(self._prefix)
        desc = self._admin.describe_group(group, CALL_TIMEOUT_S)
        if desc is None:  # a broker hiccup (the reason is logged at debug level)
            log.info(
                "discovery check: describe_consumer_groups(%s) failed; not forcing a "
                "rebalance now, checking again in %.0f s",
                group,
                DISCOVERY_CHECK_S,
            )
            return None
        owners: dict[str, Owner] = {}
        for member in desc.members:
            for topic in member.topics:
                owners[topic] = Owner(member.member_id, member.instance_id)
        self._group_state = desc.state
        return owners

    def _refresh_metadata(self, consumer: Consumer, timeout: float) -> Any:
        """Full cluster metadata through the consumer: librdkafka re-matches the
        subscription regex on every full metadata response, this one included.

        The router makes these requests itself (every ``metadata_refresh_ms``, with
        its discovery check, and at once for an announcement); librdkafka's own
        periodic refresh is only a backstop (:data:`BACKSTOP_REFRESH_MS`).  An
        announced topic the response has leaves the pending ones: librdkafka has
        matched it, and the rejoin that places it follows.  Raises
        ``KafkaException`` when the request fails.
        """
        # (scheduled first: a failed request waits for its period too, whoever made it)
        self._next_refresh = time.monotonic() + self.config.metadata_refresh_ms / 1000.0
        md = consumer.list_topics(timeout=timeout)
        if self._shard is not None and consumer is self._consumer:
            self._assign_shard(md)
        if self._pending:
            # (with several routers, one placed elsewhere was never "assigned" here,
            # and the router refreshed, committing first, every 100 ms for 2 s per
            # new session topic: docs/chaos.md "Rejoins under session churn")
            self._pending.assigned(
                {name for name, meta in md.topics.items() if meta.error is None and meta.partitions}
            )
        return md

    def _check_discovery(self, consumer: Consumer) -> None:
        """Force a rebalance, or replace the consumer, when a session topic stays
        without a live owner (module docstring; the decision: :func:`plan_discovery`).

        Invariant: never forces anything for a topic another router owns, nor for one
        seen without a live owner only once (it may be mid-pickup).
        """
        now = time.monotonic()
        if now - self._last_discovery > 2 * DISCOVERY_CHECK_S:
            # The loop was held up (a long flush, a broker outage): the previous
            # check's suspects may have been placed meanwhile without a callback yet.
            self._unassigned_before = frozenset()
        self._last_discovery = now
        self._next_discovery = now + DISCOVERY_CHECK_S
        try:
            md = self._refresh_metadata(consumer, 2.0)
        except KafkaException as exc:
            # Counted only while the admin client (its own connections) reaches the
            # cluster: right after a broker restart the consumer may simply reconnect
            # later than a fresh request of the admin client does.
            if self._admin_reaches_cluster():
                self._metadata_failures += 1
            else:
                self._metadata_failures = 0
            if self._metadata_failures >= CUT_OFF_CHECKS:
                # the cluster answers another client: this consumer's connections are
                # what is broken (seen after a broker restart: 2 minutes of
                # "Broker transport failure", 0 partitions, nothing routed)
                self._metadata_failures = 0
                self.cut_off_restarts += 1
                self._restart_consumer(
                    f"the consumer's metadata requests failed at {CUT_OFF_CHECKS} discovery "
                    f"checks in a row (last: {exc.args[0]}) while the admin helper reached "
                    "the cluster at each of them",
                    "cut_off",
                )
                return
            log.info("discovery check: cluster metadata failed (%s); checking again", exc)
            return
        self._metadata_failures = 0
        self._metadata_ok_at = time.monotonic()
        if self._shard is not None:
            # the refresh assigned the shard's topics; the group must stay empty
            self._check_no_group_members()
            return
        missing = frozenset(
            name
            for name, meta in md.topics.items()
            if meta.error is None
            and meta.partitions
            and name not in self._assigned_topics
            and session_id_of_topic(self._prefix, name) is not None
        )
        owners: Mapping[str, Owner] = {}
        if missing:
            got = self._group_owners()
            if got is None:
                return
            owners = got
        plan = plan_discovery(
            missing,
            owners,
            instance_id=self.config.resolved_transactional_id(self._prefix),
            previous=self._unassigned_before,
            held_partitions=len(self._assigned),
            forced_before=self._forced_for,
        )
        self._unassigned_before = plan.suspects
        if plan.elsewhere:
            # INFO when this router holds nothing (the suspicious case); DEBUG
            # otherwise (with several routers every check sees some).
            log.log(
                logging.INFO if not self._assigned else logging.DEBUG,
                "discovery check: %d session topic(s) not held here (%d partition(s) "
                "here, group %s) are owned by other members, not forcing: %s",
                len(plan.elsewhere),
                len(self._assigned),
                self._group_state,
                sorted((t, f"{o.member_id}/{o.instance_id}") for t, o in plan.elsewhere.items())[
                    :3
                ],
            )
        if self._control_dropped:
            # One check after forcing: the announcements topic comes back (another
            # rejoin, cooperative: nothing else is revoked).
            if self._uncommitted_batch and not self._failed:
                self._commit()
            self._subscribe()
            return
        if plan.action == "none":
            if plan.suspects:
                log.info(
                    "discovery check: %d session topic(s) without a live owner (%d "
                    "partition(s) here, group %s, %d given to a ghost of this instance; "
                    "e.g. %s): acting if still so at the next check",
                    len(plan.suspects),
                    len(self._assigned),
                    self._group_state,
                    len(plan.ghosts),
                    sorted(plan.suspects)[:3],
                )
            return
        if plan.action == "restart":
            why = (
                f"{len(plan.stale)} session topic(s) without a live owner for "
                f"{DISCOVERY_CHECK_S:.0f} s (e.g. {sorted(plan.stale)[:3]}; {len(self._assigned)} "
                f"partition(s) held here, {len(plan.stale & plan.ghosts)} given by the group "
                f"(state {self._group_state}) to a ghost of this instance, "
                f"{len(plan.stale & self._forced_for)} not placed by a forced rebalance)"
            )
            self.forced_restarts += 1
            self._restart_consumer(why, "discovery")
            return
        log.warning(
            "%d session topic(s) unassigned for %.0f s (e.g. %s; created while no router "
            "ran?): re-subscribing to make the group rebalance",
            len(plan.stale),
            DISCOVERY_CHECK_S,
            sorted(plan.stale)[:3],
        )
        if self._uncommitted_batch and not self._failed:
            self._commit()  # a rejoin would fence offsets sent during it
        self._subscribe(without_control=True)
        self.forced_rebalances += 1
        self._forced_for = plan.stale
        self._unassigned_before = frozenset()

    def _check_no_group_members(self) -> None:
        """Static shard: stop (ConfigError naming ``shard``) when the router group has
        members, i.e. routers running without ``--shard`` beside this one.

        Why: they are assigned every session topic by the group, this shard assigns
        itself its share, and the broker takes the offset commits of both (a consumer
        outside the group commits with generation -1, accepted on Kafka 3.9 even with
        members present: measured), so both would route the same events.  Checked at
        every discovery check (every ``DISCOVERY_CHECK_S``, the first ~1 s after the
        start), so such a deployment fails within seconds instead of routing twice
        for good; what was routed twice meanwhile is what the worker's per-session
        ``seq`` dedupe absorbs.  A failed group description decides nothing.
        """
        assert self._admin is not None
        group = self.config.resolved_group_id(self._prefix)
        desc = self._admin.describe_group(group, CALL_TIMEOUT_S)
        if desc is None or not desc.members:
            return
        first = desc.members[0]
        raise ConfigError(
            "shard",
            f"the router group {group!r} has {len(desc.members)} member(s) (e.g. "
            f"{first.instance_id or first.member_id}): routers without --shard route the "
            f"same session topics as this static shard {self._shard}, so both would route "
            "them. Run every router of the deployment with --shard I/N, or none",
        )

    def _abort_leftover_transaction(self, transactional_id: str) -> None:
        """At-least-once start: abort a transaction an exactly-once predecessor with
        this id left open (SIGKILL), which would otherwise hold back read_committed
        readers of the partitions it wrote until ``transaction.timeout.ms``.  Best
        effort: a broker without transactions only gets a warning."""
        t0 = time.monotonic()
        fencer = Producer(
            {
                "bootstrap.servers": self.settings.bootstrap,
                **client_config(self.settings.security),
                "transactional.id": transactional_id,
                "transaction.timeout.ms": self.config.transaction_timeout_ms,
                **{
                    k: v
                    for k, v in self._extra_producer.items()
                    if k.startswith(("security.", "sasl.", "ssl."))
                },
            }
        )
        try:
            fencer.init_transactions(10.0)
        except KafkaException as exc:
            log.warning(
                "could not check for a leftover transaction of %r (%s); if an exactly-once "
                "router with this id was killed, read_committed readers may wait up to its "
                "transaction timeout",
                transactional_id,
                exc.args[0],
            )
        else:
            log.debug(
                "no open transaction left for %r (%.0f ms)",
                transactional_id,
                (time.monotonic() - t0) * 1000,
            )

    def request_stop(self) -> None:
        """Ask :meth:`run` to commit what it has and return (thread/signal safe)."""
        self._stop.set()

    def close(self) -> None:
        """Commit the open batch (unless failed), leave the group, flush the producer.

        After a stop the broker did not let complete (:class:`_Abandoned`) nothing
        more is sent: the open batch is left to the broker / the next start, and the
        producer is not flushed (exactly-once: those records belong to a transaction
        that will be aborted; at-least-once: their offsets were not committed).
        """
        if self._consumer is not None:
            try:
                if self._abandoned:
                    pass
                elif self._uncommitted_batch and not self._failed:
                    self._commit()
                elif (
                    self._settle_after_failure()
                    and self._txn_open
                    and self._exactly_once
                    and not self._producer_dead
                    and self._producer is not None
                ):
                    # After a bug: abort now, so read_committed readers are not held
                    # back until the transaction times out.
                    producer = self._producer
                    self._broker_call("abort_transaction", producer.abort_transaction)
                    self._in_txn = self._txn_open = False
            except _Abandoned as exc:
                self._note_abandoned(exc)
            # After a fatal producer error the open transaction is left to the broker:
            # it is aborted when this transactional id restarts (or on timeout).
            # on_revoke runs here (nothing is open any more), and the answers of the
            # offset commits still in flight: librdkafka waits for them
            self._close_consumer()
            if self._commit_failure is not None:
                log.error("at the stop: %s", self._commit_failure)
        if self._producer is not None:
            if self.close_abandoned and not self._producer_dead and not self._abandoned:
                # The broker does not answer: every record an offset commit covers was
                # delivered before that commit (at-least-once) or belongs to the open
                # transaction (aborted when this id starts again): a short best effort.
                self._producer.flush(CLOSE_FLUSH_S)
            elif not self._producer_dead and not self._abandoned:
                # (a fenced producer cannot deliver anything)
                # (at-least-once after a failure: what is delivered now is a duplicate
                # after the restart, never a loss: no offset covers it)
                self._producer.flush(10.0)
            self._producer = None
        if self._admin is not None:
            self._admin.close()  # (ends the child process)
            self._admin = None

    def _close_consumer(self) -> None:
        """Close the consumer (leave the group, settle the commits in flight), for at
        most :data:`CALL_TIMEOUT_S` once a stop was requested, else :data:`CLOSE_WAIT_S`.

        Why bounded: a broker that hangs without closing its connections (a long GC
        pause, a network black hole; SIGSTOP in ``tests/bench/bench_router_freeze.py``)
        makes librdkafka's close wait for its requests to the group coordinator until
        they time out, past the command's stop grace (py-spy: the router thread in
        ``rd_kafka_consumer_close``).  Nothing rides on the close by then: the open
        batch was committed, or given up, before it.  A close that does not return is
        left to a helper thread, the consumer kept referenced (:attr:`_retired_consumer`:
        its late callbacks are ignored, and it is never freed while librdkafka still
        works on it), and :attr:`close_abandoned` is set: the process should then end
        without finalizing that client (``trajectory router`` exits with ``os._exit``:
        destroying a consumer mid-close can block the interpreter's exit).
        """
        consumer, self._consumer = self._consumer, None
        assert consumer is not None
        try:
            self._bounded("closing the consumer", lambda _t: consumer.close(), limit=CLOSE_WAIT_S)
        except (_Wedged, _Abandoned) as exc:
            self._retired_consumer = consumer
            self.close_abandoned = True
            log.warning(
                "%s (broker not answering?): left closing in a helper thread; nothing is "
                "lost: offsets not committed are routed again by the next start",
                exc,
            )

    def __enter__(self) -> Router:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- main loop ---------------------------------------------------------
    def run(
        self,
        *,
        max_seconds: float | None = None,
        until: Callable[[RouterStats], bool] | None = None,
    ) -> RouterStats:
        """Route until :meth:`request_stop`, ``max_seconds`` or ``until(stats)`` is true.

        Returns the final stats.  The open batch is committed before returning.
        """
        if self._consumer is None and not self._abandoned:
            self.start()
        consumer = self._consumer
        if consumer is None:  # stopped during start (broker unreachable)
            return self.stats()
        try:
            return self._run(consumer, max_seconds, until)
        except _Abandoned as exc:
            self._note_abandoned(exc)
            return self.stats()
        except BaseException:
            # Not a bad message (those are dead-lettered) but a bug or a fatal error:
            # never commit after it -- the consumed position already covers the
            # message that failed.  Exactly-once: close() aborts the open transaction
            # (or, if the producer itself is dead, the broker does when this id
            # restarts).  At-least-once: no offset is committed any more.
            self._failed = True
            raise

    def _note_abandoned(self, exc: _Abandoned) -> None:
        self._abandoned = True
        self._failed = True  # never commit after this
        log.warning(
            "stop requested while the broker is unreachable (%s): stopping without "
            "committing the open batch of %d message(s); nothing is lost: %s",
            exc,
            self._txn_msgs if self._in_txn else 0,
            "the broker aborts the open transaction when this transactional id starts "
            "again, and the restarted router routes it then"
            if self._exactly_once
            else "its offsets were not committed, so a restart routes it again "
            "(duplicates, never a loss)",
        )

    def _broker_call(
        self,
        what: str,
        call: Callable[[float], object],
        *,
        txn: bool = True,
        direct: bool = False,
        stuck_s: float | None = None,
    ) -> None:
        """Run a blocking librdkafka call with :data:`CALL_TIMEOUT_S` per attempt.

        Retriable errors (a timeout while the broker is unreachable ...) are retried,
        as confluent-kafka's transactional API asks, for up to :data:`BROKER_WAIT_S`;
        abortable and fatal errors propagate (the caller aborts or stops).  Between
        attempts a stop request raises :class:`_Abandoned`, so SIGTERM is never
        swallowed by a blocked call.  ``txn=False``: not a transaction call (no
        abortable errors expected).  ``direct``: call it in this thread, not through
        :meth:`_bounded` (already in a helper thread that the loop watches: each
        extra thread hand-off waits for the GIL held by the busy loop).  ``stuck_s``:
        retriable errors for that long raise :class:`_Wedged` (see :data:`TXN_STUCK_S`).
        """
        started = time.monotonic()
        warned = 0.0
        while True:
            try:
                if direct:
                    call(CALL_TIMEOUT_S)
                else:
                    self._bounded(what, call, limit=TXN_CALL_WEDGED_S if txn else WEDGED_S)
                return
            except KafkaException as exc:
                kerr = exc.args[0]
                if kerr.fatal() or (txn and kerr.txn_requires_abort()) or not kerr.retriable():
                    raise
                now = time.monotonic()
                if self._stop.is_set():
                    raise _Abandoned(f"{what}: {kerr}") from exc
                if stuck_s is not None and now - started >= stuck_s:
                    raise _Wedged(
                        f"{what} kept failing for {now - started:.0f} s (last: {kerr})"
                    ) from exc
                if now - started >= BROKER_WAIT_S:
                    self._failed = True
                    raise DeliveryError.from_kafka(
                        f"{what} kept failing for {now - started:.0f} s (last: {kerr}); is the "
                        f"broker at {self.settings.bootstrap} up?  Stopping without committing: "
                        "a restart resumes from the last committed offsets",
                        exc,
                    ) from exc
                if now - warned >= 10.0:
                    warned = now
                    log.warning("%s: %s (retrying; broker unreachable?)", what, kerr)

    def _bounded(
        self, what: str, call: Callable[[float], object], *, limit: float = WEDGED_S
    ) -> None:
        """``call(CALL_TIMEOUT_S)`` in a helper thread, waited for in short slices.

        Raises what the call raised; :class:`_Abandoned` when a stop is requested
        and the call has run longer than :data:`CALL_TIMEOUT_S`; :class:`_Wedged`
        when it has not returned after ``limit`` (:data:`WEDGED_S`: see there).  The helper
        thread of an abandoned or wedged call is a daemon: it never holds up exit.
        """
        outcome: list[BaseException | None] = []

        def target() -> None:
            try:
                call(CALL_TIMEOUT_S)
            except BaseException as exc:
                outcome.append(exc)
            else:
                outcome.append(None)

        helper = threading.Thread(target=target, name=f"router-{what}", daemon=True)
        t0 = time.monotonic()
        helper.start()
        while True:
            helper.join(0.05)
            if not helper.is_alive():
                break
            ran = time.monotonic() - t0
            if self._stop.is_set() and ran >= CALL_TIMEOUT_S:
                raise _Abandoned(f"{what} has not returned after {ran:.1f} s")
            if ran >= limit:
                raise _Wedged(f"{what} has not returned after {ran:.0f} s")
        if outcome and outcome[0] is not None:
            raise outcome[0]

    def _new_consumer(self) -> Consumer:
        """A consumer whose ``on_commit`` answers are told apart from its
        predecessors' (held weakly, as :func:`weak_method`: no router <-> client
        cycle)."""
        self._consumer_gen += 1
        gen = self._consumer_gen
        ref = weakref.WeakMethod(self._on_offsets_answer)

        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            answer = ref()
            if answer is not None:
                answer(gen, err, partitions)

        return Consumer({**self._consumer_conf, "on_commit": on_commit})

    def _restart_consumer(self, why: str, reason: str, *, counted: bool = True) -> None:
        """Replace a consumer that hit a fatal error, or that the group no longer
        counts as itself (:meth:`_check_discovery`); see :data:`MAX_CONSUMER_RESTARTS`
        (``counted=False``: a restart that is no sign of a duplicate instance id, after
        a commit whose outcome is unknown, :meth:`_replace_producer`).

        The open batch is given up first (exactly-once: its transaction aborted;
        at-least-once: its offsets are not committed), so the new consumer starts
        from the committed offsets: nothing is lost, nothing doubled for
        read_committed readers (at-least-once: repeats, as after a crash).
        """
        self._consumer_fenced = self._commit_unknown = None  # (both settled by this restart)
        if counted:
            now = time.monotonic()
            if now - self._last_consumer_restart > CONSUMER_RESTART_WINDOW_S:
                self._consumer_restarts = 0  # (each broker restart fences the consumer once)
            self._last_consumer_restart = now
            self._consumer_restarts += 1
        if self._consumer_restarts > MAX_CONSUMER_RESTARTS:
            self._failed = True
            raise DeliveryError(
                f"{why} (consumer restarted {MAX_CONSUMER_RESTARTS} times already); if it "
                "says FENCED_INSTANCE_ID, another router runs with the same "
                "--transactional-id (ids must be unique, in either guarantee mode)"
            )
        log.error("%s: replacing the consumer (rejoins from the committed offsets)", why)
        if self.metrics is not None:
            self.metrics.on_consumer_replaced(reason)
        if self._inflight is not None:
            self._settle(rewind=False)  # (an abort leaves the rewind to the new consumer)
        if self._in_txn:
            if self._exactly_once:
                self._abort(why, rewind=False)
            else:
                self._batch_done()  # produced, offsets not committed: routed again
        old, self._consumer = self._consumer, None
        self._assigned.clear()
        self._assigned_topics.clear()
        self._uncommitted.clear()
        self._sent.clear()  # (the old consumer's answers are ignored from now on)
        self._sent_at.clear()
        self._paused.clear()  # the new consumer starts with nothing paused
        self._rewind_due = False  # the new consumer starts from the committed offsets
        self._first.clear()
        if old is not None:
            # Its rebalance callbacks are ignored from now on (they would edit the new
            # consumer's assignment), and its close is bounded: a consumer stuck in a
            # rejoin can sit in close() waiting for a commit that never completes.
            self._retired_consumer = old
            try:
                self._bounded("closing the replaced consumer", lambda _t: old.close())
            except (KafkaException, RuntimeError) as exc:
                log.debug("closing the replaced consumer: %s", exc)
            except _Wedged as exc:
                log.warning("%s: left behind in a helper thread", exc)
        self._consumer = self._new_consumer()
        self._subscribe()
        # The new consumer must join first (it takes over this instance's member, so
        # the group shows that "ghost" owning our topics until then): its first
        # discovery check comes later and starts with no suspects.
        self._forced_for = self._unassigned_before = frozenset()
        # ... and it gets a stall check's grace period, with no suspects of the old one
        self._last_consumed_at = time.monotonic()
        self._stall_suspects = frozenset()
        self._next_discovery = time.monotonic() + 2 * DISCOVERY_CHECK_S
        self._last_discovery = self._next_discovery

    def _replace_producer(self, why: str, *, rewind: bool = True, unknown: int = 0) -> None:
        """Exactly-once: give up a wedged producer (see :data:`WEDGED_S`).

        A new producer with the same transactional id runs ``init_transactions``,
        which fences the old one and ends its transaction on the broker: an open one
        is aborted, one whose ``EndTxn`` reached the coordinator is committed.
        ``unknown``: the messages of a given-up ``commit_transaction``
        (:class:`_WedgedCommit`), which may have been either: the consumer is then
        replaced at the end of the step, and the new one resumes from the group's
        committed offsets (written only by our transactions, and fetched stable:
        the consumer is read_committed), so a committed batch is not read again and
        an aborted one is.  Otherwise the consumer is rewound to the batch's first
        uncommitted message (no broker call).  Nothing is lost or doubled for
        read_committed readers.
        """
        aborted = self._txn_msgs - unknown
        log.error(
            "%s: replacing the transactional producer (%d message(s) of an open "
            "transaction aborted and routed again%s)",
            why,
            aborted,
            f"; {unknown} of a commit whose outcome is unknown: the consumer is replaced "
            "and resumes from the committed offsets"
            if unknown
            else "",
        )
        if self._producer is not None:
            # kept referenced, never destroyed here: librdkafka's destroy of a client
            # with a request stuck in a coordinator's queue can block (as a consumer's
            # close does: _close_consumer); the last few are enough (one per wedge)
            self._retired_producers = [*self._retired_producers[-3:], self._producer]
        self._producer = Producer(self._producer_conf)
        producer = self._producer
        try:
            self._broker_call(
                "init_transactions", lambda t: producer.init_transactions(t), txn=False
            )
        except (KafkaException, _Wedged) as exc:
            self._failed = True
            self._producer_dead = True
            raise DeliveryError.from_kafka(
                f"could not replace the wedged transactional producer: {exc}; stopping "
                "without committing (a restart resumes from the last committed offsets)",
                exc,
            ) from exc
        self._in_txn = self._txn_open = False
        self._queued.clear()
        self._ending.clear()
        self._uncommitted.clear()  # aborted: the rewind reads them again
        self._replaced_producers += 1
        if aborted or not unknown:
            self._aborts += 1
            self._aborted_msgs += aborted
        if unknown:
            self._unknown_commits += 1
            self._unknown_msgs += unknown
        if rewind and unknown:
            # (no committed-offset look-up here: after a broker restart one can block
            # the loop for minutes; a new consumer fetches them in the background)
            self._commit_unknown = why
        elif rewind:
            self._rewind_after_abort()

    def _run(
        self,
        consumer: Consumer,
        max_seconds: float | None,
        until: Callable[[RouterStats], bool] | None,
    ) -> RouterStats:
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        last_status = self.stats()
        cfg = self.config
        while not self._stop.is_set():
            try:
                if not self._step(deadline, cfg):
                    break
            except _ConsumerFenced as exc:
                self._restart_consumer(str(exc), "fenced")
            if cfg.status_interval_s:
                cur = self.stats()
                if cur.at_s - last_status.at_s >= cfg.status_interval_s:
                    log.info(format_status(last_status, cur, len(self._assigned), cfg.guarantee))
                    last_status = cur
            if until is not None and not self._uncommitted_batch and until(self.stats()):
                break
        if self._uncommitted_batch and not self._failed:
            self._commit()
        return self.stats()

    def _step(self, deadline: float | None, cfg: RouterConfig) -> bool:
        """One round of the loop: consume, handle, commit when due (False: time is up)."""
        consumer = self._consumer
        assert consumer is not None
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False
        room = max(1, min(1000, cfg.batch_max_messages - self._txn_msgs))
        # True when this round drained what the consumer had queued (a non-blocking
        # consume returned fewer than asked): exactly-once may then close the open
        # transaction early (RouterConfig.should_close_idle).
        caught_up = False
        if self._in_txn and self._exactly_once and cfg.batch_idle_ms and self._txn_msgs:
            # batching, but not past the point of being caught up: take what is there;
            # nothing there -> wait (for the first message only) until the minimum
            # age, and commit then if still nothing came (the next fetch response
            # cannot come sooner than the broker answers, fetch.wait.max.ms).
            msgs = consumer.consume(num_messages=room, timeout=0)
            caught_up = len(msgs) < room
            age = now - self._txn_started
            if not msgs and (age < cfg.batch_idle_ms / 1000.0 or self._inflight is not None):
                wait = min(cfg.batch_idle_ms, cfg.batch_max_ms) / 1000.0 - age
                if self._inflight is not None:
                    # the predecessor's commit runs: short slices (as below); this
                    # one cannot start before it settled anyway
                    wait = max(0.0, cfg.batch_max_ms / 1000.0 - age)
                    wait = min(wait, 0.005)
                first = consumer.poll(max(0.0, wait))
                msgs = [] if first is None else [first]
                # one message: the rest of its fetch response may be queued behind it
                caught_up = first is None
        elif self._in_txn and self._exactly_once:
            # batching: consume() waits for `room` messages or the batch window
            # (nothing is visible before the commit anyway)
            wait = max(0.0, cfg.batch_max_ms / 1000.0 - (now - self._txn_started))
            if self._inflight is not None:
                # short slices while a commit runs: its successor's queued records are
                # produced soon after it returns, not at the end of the batch window
                wait = min(wait, 0.005)
            msgs = consumer.consume(num_messages=room, timeout=wait)
        else:
            # take what is there; else wait for the FIRST message only (consume()
            # would sit out its whole timeout to fill the batch, which added up to
            # 100 ms to every transaction's latency).  At-least-once never holds
            # a message back: it waits at most until the next commit is due.
            msgs = consumer.consume(num_messages=room, timeout=0)
            if not msgs and self._inflight is not None:
                # Nothing to overlap the background commit with: wait for it (its
                # batch is counted, its ended sessions paused, without a 0.1 s lag).
                self._settle()
            if not msgs:
                wait = 0.1
                if self._in_txn:
                    wait = cfg.batch_max_ms / 1000.0 - (now - self._txn_started)
                    wait = min(0.1, max(0.0, wait))
                first = consumer.poll(wait)
                msgs = [] if first is None else [first]
        control = self._control_topic
        if msgs and (
            # the last one is a session record in the common case: no walk
            (msgs[-1].error() is None and msgs[-1].topic() != control)
            or any(m.topic() != control for m in msgs if m.error() is None)
        ):
            # a session record (the stall check's clock): announcements on the
            # control topic keep flowing while session partitions can be stuck
            # (seen after a broker restart: the router consumed one every few
            # seconds for 4 minutes and fetched no session record)
            self._last_consumed_at = time.monotonic()
        if self._commit_unknown is not None:
            # a commit given up with its outcome unknown (in a rebalance callback or
            # the settle above): the new consumer reads from the committed offsets
            msgs = []
            caught_up = False
        elif self._rewind_due:
            # an abort inside a rebalance callback (_rewind_after_abort): what this
            # call returned lies past the aborted batch; it is read again
            self._rewind_due = False
            self._seek_back(msgs)
            msgs = []
            caught_up = False
        if self.metrics is not None:
            self.metrics.maybe_sample(consumer, self._assigned)
        try:
            self._route(msgs)
        except _AbortableProduce as exc:
            # The rest of this batch is re-read after the rewind.
            self._note_consumed(msgs)
            self._abort(str(exc))
        if self._inflight is not None:
            self._settle(wait=False)  # done: produce the queued records now
        if not self._exactly_once:
            # Serve delivery reports now: a failed delivery stops the router before
            # its next offset commit could pass it.
            assert self._producer is not None
            self._producer.poll(0)
            self._raise_on_delivery_errors()
        age_ms = (time.monotonic() - self._txn_started) * 1000.0
        if self._in_txn and (
            cfg.should_commit(self._txn_msgs, age_ms)
            # caught up early: only once the predecessor's background commit has
            # settled (one transaction at a time; _start_commit would block on it)
            or (self._inflight is None and cfg.should_close_idle(self._txn_msgs, age_ms, caught_up))
        ):
            if caught_up and not cfg.should_commit(self._txn_msgs, age_ms):
                self._idle_closes += 1
            if self._background:
                self._start_commit()
            else:
                self._commit(periodic=True)
        elif (
            self._uncommitted
            and not self._exactly_once
            and not self._in_txn
            and not self._sent_at
            and time.monotonic() >= self._offsets_retry_at
        ):
            # at-least-once: offsets held back while another commit was in flight,
            # or refused, and no batch since to carry them
            self._commit_offsets(periodic=True)
        now = time.monotonic()
        discovery_due = self.first_assigned_at is not None and now >= self._next_discovery
        announced = bool(self._pending) and self._pending.refresh_due(now * 1000.0)
        if announced and self._uncommitted_batch and self._shard is None:
            # Commit the open batch first: the refresh triggers a rejoin, and
            # offsets sent during it fail with ILLEGAL_GENERATION (exactly-once:
            # abort + re-read; at-least-once: a refused commit).
            self._commit()
        if not discovery_due and (announced or now >= self._next_refresh):
            # A full metadata request makes librdkafka re-match the regex now (an
            # announced topic: at once; else every metadata_refresh_ms; the
            # discovery check's own request is the refresh when that is due).
            try:
                self._refresh_metadata(consumer, CALL_TIMEOUT_S)
            except KafkaException as exc:  # broker unreachable: retried when due
                log.debug("metadata refresh failed: %s", exc)
        if discovery_due:
            self._check_discovery(consumer)
        if self._paused and time.monotonic() >= self._next_paused_check:
            self._check_paused(consumer)
        if self._assigned and time.monotonic() >= self._next_stall_check:
            self._check_stall(consumer)
        if self._consumer_fenced is not None:
            raise _ConsumerFenced(self._consumer_fenced)
        if self._commit_unknown is not None:
            self._restart_consumer(self._commit_unknown, "commit_unknown", counted=False)
        if self._commit_failure is not None:
            self._failed = True
            raise self._commit_failure
        return True

    def stats(self) -> RouterStats:
        return RouterStats(
            routed=self._routed,
            dead_lettered=self._dlq,
            announcements=self._announcements,
            transactions=self._transactions,
            aborts=self._aborts,
            aborted_messages=self._aborted_msgs,
            rebalances=self._rebalances,
            commit_s=self._commit_s,
            offset_commits=self._offset_commits,
            failed_commits=self._failed_commits,
            idle_closes=self._idle_closes,
            unknown_commits=self._unknown_commits,
            unknown_messages=self._unknown_msgs,
            at_s=time.monotonic() - self._t0,
        )

    @property
    def admin_helper_pid(self) -> int | None:
        """The pid of the admin helper process (:mod:`streams.router.admin`), if one
        runs now: part of the router's cost."""
        return getattr(self._admin, "pid", None)

    @property
    def assigned_topics(self) -> frozenset[str]:
        return frozenset(self._assigned_topics)

    @property
    def paused_topics(self) -> frozenset[str]:
        """Session topics paused because their session ended (RouterConfig.paused_check_s)."""
        return frozenset(t for t, _ in self._paused)

    # -- per message -------------------------------------------------------
    def _begin(self) -> None:
        if self._exactly_once and self._inflight is None:
            self._begin_transaction()
        self._in_txn = True
        self._txn_started = time.monotonic()
        self._txn_msgs = self._txn_routed = self._txn_dlq = self._txn_announce = 0
        self._txn_errors.clear()
        self._ending.clear()

    def _begin_transaction(self) -> None:
        assert self._producer is not None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._fatal("begin_transaction", exc) from exc
        self._txn_open = True

    def _route(self, msgs: list[Message]) -> None:
        """Handle consumed messages in order: route each accepted event to
        ``<prefix>.events``, dead-letter what the check refuses, note announcements.

        One loop per consumed batch, with what it uses bound once per batch and the
        ``produce`` call made here (not through :meth:`_produce`) unless a
        background commit is in flight (its successor's records are queued).  Why:
        a call to a per-message handler and to ``_produce`` per event, and their
        attribute lookups, were ~1.3 us of Python per event against ~1.5 us for the
        ``produce`` call itself (docs/kafka-notes.md "Router: one source header,
        one loop").  Invariant: routing a batch in one call or message by message
        has the same effects (``tests/unit/router/test_router_route.py``).
        """
        if not msgs:
            return
        producer = self._producer
        assert producer is not None
        produce = producer.produce
        check = self._check
        keys = self._keys
        uncommitted = self._uncommitted
        first = self._first
        exactly_once = self._exactly_once
        control = self._control_topic
        events_topic = self._events_topic
        pause_ended = self._pause_ended
        metrics = self.metrics
        queue = self._inflight is not None  # set only by the commit, after this loop
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if _is_fatal(err):
                    raise _ConsumerFenced(f"consumer fatal error: {err}")
                # Informational (e.g. a topic deleted under us); librdkafka recovers.
                log.warning("consumer: %s", err)
                continue
            if not self._in_txn:
                self._begin()
            self._txn_msgs += 1
            topic = msg.topic()
            assert topic is not None
            partition = msg.partition() or 0
            offset = msg.offset() or 0
            # What the next commit sends (both guarantees): only the partitions that moved.
            source = (topic, partition)
            uncommitted[source] = offset + 1
            if exactly_once and source not in first:
                first[source] = offset
            if topic == control:
                self._handle_announcement(msg)
                continue
            value = msg.value()
            verdict = check(value, topic)
            if type(verdict) is not Accepted:
                assert isinstance(verdict, Rejected)
                self._dead_letter(msg, verdict)
                continue
            sid = verdict.session_id
            key = keys.get(sid)
            if key is None:
                if len(keys) >= 100_000:  # bounded: sessions come and go
                    keys.clear()
                key = keys[sid] = sid.encode("utf-8")
            # Where it came from, for the worker's dead letters (decode once): the
            # offset, and the partition when it is not 0.  The topic is implied: an
            # accepted event's session id is its topic's, and the key is that id,
            # so readers derive ``<prefix>.session.<key>`` (SRC_TOPIC, only ever
            # written by older routers).  One header instead of three: ~0.6 us of
            # CPU per event (docs/kafka-notes.md "Router: one source header, one loop").
            headers: Any = msg.headers() or []  # a fresh list per consumed message
            if partition:
                headers.append((SRC_PARTITION, b"%d" % partition))
            headers.append((SRC_OFFSET, b"%d" % offset))
            src_key = msg.key()
            if src_key != key:
                headers.append((SRC_KEY, src_key if src_key is not None else b""))
            ts = msg.timestamp()[1]
            if queue:
                self._produce(events_topic, value, key, headers, ts)
            else:
                when = ts if ts > 0 else 0  # 0 = "now": the source had no timestamp
                try:  # what _produce does, without the call
                    produce(events_topic, value, key, _ANY_PARTITION, None, None, when, headers)
                except BufferError:
                    self._produce(events_topic, value, key, headers, ts)  # waits for room
                except KafkaException as exc:
                    raise self._produce_error(events_topic, exc) from exc
            self._txn_routed += 1
            if pause_ended and verdict.type == "session_end":
                self._ending.add(source)
            if metrics is not None:
                metrics.on_accepted(verdict.type)

    def _dead_letter(self, msg: Message, rejected: Rejected) -> None:
        value = msg.value()
        original_size = None
        if value is not None and len(value) > self._max_bytes:
            original_size = len(value)
            value = value[:DLQ_PREVIEW_BYTES]
        topic = msg.topic() or ""
        headers = dlq_headers(
            rejected, topic, msg.partition() or 0, msg.offset() or 0, original_size
        )
        self._produce(self._dlq_topic, value, msg.key(), headers, msg.timestamp()[1])
        self._txn_dlq += 1
        if self.metrics is not None:
            self.metrics.on_rejected(rejected.error_class)

    def _handle_announcement(self, msg: Message) -> None:
        if not self.config.use_announcements:
            return
        try:
            topic = parse_announcement(msg.key(), msg.value(), self._prefix)
        except InvalidEventError as exc:
            self._dead_letter(msg, Rejected(reason=str(exc), error_class=type(exc).__name__))
            return
        self._txn_announce += 1
        if topic not in self._assigned_topics:
            self._pending.add(topic, time.monotonic() * 1000.0)

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Any,
        timestamp_ms: int,
    ) -> None:
        if self._inflight is not None:
            # The previous transaction is committing: this record goes into the next
            # one, produced when that commit has returned (_settle).
            self._queued.append((topic, value, key, headers, timestamp_ms))
            return
        producer = self._producer
        assert producer is not None
        # timestamp 0 = "now"; a negative one means the source had none.
        ts = timestamp_ms if timestamp_ms > 0 else 0
        while True:
            try:
                producer.produce(topic, value, key, _ANY_PARTITION, None, None, ts, headers)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as exc:
                raise self._produce_error(topic, exc) from exc

    def _produce_error(self, topic: str, exc: KafkaException) -> Exception:
        """What a refused ``produce`` raises: an abortable error inside an
        exactly-once transaction, else the router fails (:meth:`_fatal`)."""
        kerr = exc.args[0]
        if (
            self._exactly_once
            and not kerr.fatal()
            and (
                kerr.txn_requires_abort()
                # The open transaction failed meanwhile: an earlier record's
                # ProduceRequest was refused (e.g. MSG_SIZE_TOO_LARGE of a dead
                # letter) and librdkafka refuses every later produce of it with
                # _STATE ("Erroneous state") until it is aborted.  Seen in CI when
                # that answer beat the rest of the batch's produce() calls.  The
                # abort says whether the state was fatal instead (_abort raises then).
                or (kerr.code() == KafkaError._STATE and self._txn_open)
            )
        ):
            return _AbortableProduce(f"produce to {topic}: {kerr}")
        return self._fatal(f"produce to {topic}", exc)

    def _fatal(self, what: str, exc: KafkaException) -> DeliveryError:
        """Mark the router failed (nothing is committed after this) and explain why."""
        self._failed = True
        # A transactional producer is unusable after this; an idempotent one only
        # after a fatal error (else close() still flushes what it holds).
        self._producer_dead = self._exactly_once or exc.args[0].fatal()
        if self._fatal_cause is None and self._producer is not None:
            # A generic "Local: Fatal error" from produce(): polling a fatal producer
            # raises the underlying error (e.g. fenced by a newer instance).
            try:
                self._producer.poll(0)
            except KafkaException as underlying:
                self._fatal_cause = str(underlying.args[0])
        hint = (
            " If it says fenced, another router runs with the same transactional id "
            "(--transactional-id must be unique per instance)"
            if self._exactly_once
            else " Nothing was committed past it: a restart re-reads from the last "
            "committed offsets"
        )
        return DeliveryError.from_kafka(
            f"{what} failed fatally: {exc.args[0]}; underlying: "
            f"{self._fatal_cause or 'not reported'}; delivery errors: "
            f"{self._txn_errors or 'none reported'}.{hint}",
            exc,
            retriable=False,
        )

    def _on_producer_error(self, err: KafkaError) -> None:
        raise_if_security_error(err, self.settings.security)  # wrong password/CA: fail fast
        if err.fatal():
            self._fatal_cause = str(err)
            log.error("producer fatal error: %s", err)
        else:  # transient (broker down, ...): librdkafka retries by itself
            log.warning("producer: %s", err)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._delivery_errors += 1
            if len(self._txn_errors) < 5:
                self._txn_errors.append(f"{msg.topic()}: {err.str()}")

    def _raise_on_delivery_errors(self) -> None:
        """At-least-once: a failed delivery is fatal (never commit past it)."""
        if self._delivery_errors:
            self._failed = True
            raise DeliveryError(
                f"{self._delivery_errors} message(s) could not be delivered (first: "
                f"{self._txn_errors}); stopping without committing their offsets: a "
                "restart re-reads from the last committed offsets"
            )

    # -- commits -----------------------------------------------------------
    @property
    def _uncommitted_batch(self) -> bool:
        """A batch is open or still committing in the background (at-least-once: or
        offsets of a delivered batch are not sent yet)."""
        return self._in_txn or self._inflight is not None or bool(self._uncommitted)

    def _commit(self, *, periodic: bool = False) -> None:
        """Commit the open batch and wait for it: its transaction (after the one in
        the background, if any), or (at-least-once) its offsets, sent
        (``periodic``: unless another commit awaits its answer)."""
        if self._exactly_once:
            self._settle()
            if self._in_txn:
                self._commit_transaction()
        else:
            self._commit_offsets(periodic=periodic)

    def _batch_done(self) -> None:
        self._in_txn = False
        self._routed += self._txn_routed
        self._dlq += self._txn_dlq
        self._announcements += self._txn_announce
        if self._ending:
            self._pause(self._ending)
            self._ending.clear()

    # -- paused partitions of ended sessions (RouterConfig.paused_check_s) --
    def _pause(self, ended: set[tuple[str, int]]) -> None:
        """Pause the partitions of sessions whose end is now committed / delivered.

        Their offsets are committed (or recorded for the next offset commit), so a
        pause never holds back anything routed; it only keeps them out of fetches.
        """
        consumer = self._consumer
        if consumer is None:
            return
        tps = [
            TopicPartition(t, p)
            for t, p in ended
            if (t, p) not in self._paused and TopicPartition(t, p) in self._assigned
        ]
        if not tps:
            return
        positions = consumer.position(tps)
        consumer.pause(tps)
        for tp in positions:
            self._paused[(tp.topic, tp.partition)] = tp.offset
        self.paused_total += len(tps)
        if not self._next_paused_check:
            self._next_paused_check = time.monotonic() + self.config.paused_check_s

    def _end_offsets(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """End offsets (read_committed: the last stable offset) of ``keys``, in one
        ListOffsets request waited for once (never one timeout per partition).
        Only the partitions answered in time without an error are in the result;
        the callers ask again at their next check."""
        assert self._admin is not None
        return dict(self._admin.offsets(keys, CALL_TIMEOUT_S).ends)

    def _check_paused(self, consumer: Consumer) -> None:
        """Resume each paused partition that has records past where it was paused.

        One ListOffsets request (read_committed: the last stable offset) for all
        paused partitions; a failure (broker hiccup) is retried at the next check.
        Invariant: a paused partition with a record at or after its paused position
        is resumed within ``paused_check_s`` (+ the request) of that record.
        """
        self._next_paused_check = time.monotonic() + self.config.paused_check_s
        if not self._cluster_reachable():
            return
        asked = dict(self._paused)
        ends = self._end_offsets(list(asked))  # unanswered ones: asked again next time
        resume = [
            TopicPartition(t, p)
            for (t, p), end in ends.items()
            if (t, p) in self._paused and end > asked[(t, p)]
        ]
        if resume:
            consumer.resume(resume)
            for tp in resume:
                del self._paused[(tp.topic, tp.partition)]
            self.resumed_total += len(resume)
            log.info(
                "resumed %d paused partition(s) of ended sessions with new records (e.g. %s)",
                len(resume),
                resume[0].topic,
            )

    def _check_stall(self, consumer: Consumer) -> None:
        """Replace a consumer that holds partitions with records to route but has
        consumed nothing for two checks in a row (:data:`STALL_CHECK_S`,
        :func:`plan_stall`).

        Nothing is asked of the broker while records keep coming.  The committed
        offsets are read through the admin helper, not this consumer: its own
        coordinator requests may be what is stuck.  A check whose requests fail (the
        broker is down) decides nothing and forgets the suspects: an outage is not a
        stall of this consumer, and the next check starts afresh.
        """
        now = time.monotonic()
        self._next_stall_check = now + STALL_CHECK_S
        idle = now - self._last_consumed_at
        active = [tp for tp in self._assigned if (tp.topic, tp.partition) not in self._paused]
        if idle < STALL_CHECK_S or not active or not self._cluster_reachable():
            self._stall_suspects = frozenset()
            return
        assert self._admin is not None
        keys = [(tp.topic, tp.partition) for tp in active]
        view = self._admin.offsets(
            keys, CALL_TIMEOUT_S, committed_of=self.config.resolved_group_id(self._prefix)
        )
        ends, committed = view.ends, view.committed
        if committed is None or len(ends) < len(keys):  # not all answered: decide nothing
            self._stall_suspects = frozenset()
            return
        positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(active)}
        plan = plan_stall(committed, positions, ends, self._stall_suspects)
        self._stall_suspects = plan.suspects
        if not plan.restart:
            if plan.behind:
                log.info(
                    "stall check: nothing consumed for %.0f s, %d partition(s) behind "
                    "(e.g. %s); replacing the consumer if still so at the next check",
                    idle,
                    len(plan.behind),
                    sorted(plan.behind)[0],
                )
            return
        (topic, partition) = sorted(plan.stale)[0]
        done, pos, end = plan.behind[(topic, partition)]
        self.stall_restarts += 1
        self._restart_consumer(
            f"consumer stalled: nothing consumed for {idle:.0f} s although "
            f"{len(plan.stale)} assigned partition(s) have records to route (e.g. "
            f"{topic}[{partition}]: committed {done}, position {pos}, end {end})",
            "stall",
        )

    def _commit_offsets(self, *, periodic: bool = False) -> None:
        """At-least-once: flush (every produced record acknowledged), then send the
        next offsets of the partitions that moved in an asynchronous commit
        (``periodic``: not while another awaits its answer; the next takes them).  Every
        message below them was handled (produced) before this call, and nothing is
        handled during it (the revoke callback runs inside consume(), between
        batches).  The answer comes later, inside consume() (or close()), to
        :meth:`_on_offsets_answer`; in a revoke, librdkafka hands the partitions on
        only once the commits it has in flight are answered.

        Why not synchronous: ``Consumer.commit(asynchronous=False)`` takes no timeout
        (after a broker restart one hung for minutes), and since confluent-kafka 2.16
        a call from another thread waits for it to return, so it cannot be bounded
        from a helper thread either: the loop's next ``consume`` waited as long.
        """
        consumer, producer = self._consumer, self._producer
        assert consumer is not None and producer is not None
        t0 = time.monotonic()
        positions = [TopicPartition(t, p, o) for (t, p), o in self._uncommitted.items()]
        try:
            self._flush_all(producer)
        finally:
            self._commit_s += time.monotonic() - t0
        t_flushed = time.monotonic()
        if self.metrics is not None:
            self.metrics.on_flushed(t_flushed - t0)
        if self._in_txn:
            self._batch_done()  # delivered, whether or not the commit goes through
        if not positions:
            return
        if periodic and self._sent_at and t_flushed - self._sent_at[0][1] < OFFSET_COMMIT_ANSWER_S:
            # One periodic commit in flight at a time: the next one takes these
            # offsets too.  librdkafka holds a rebalance's next step (the rejoin
            # after an incremental revoke) until no commit of this consumer is in
            # flight; one sent every batch while answers took longer than a batch
            # kept it held: the group sat in PreparingRebalance and refused every
            # commit with ILLEGAL_GENERATION (seen in test_router_faults.py's
            # scale-out test, at-least-once).
            return
        self._uncommitted.clear()
        for tp in positions:
            self._sent[(tp.topic, tp.partition)] = tp.offset
        self._sent_at.append((t0, t_flushed))
        try:
            consumer.commit(offsets=positions, asynchronous=True)
        except KafkaException as exc:  # refused before it was sent
            self._on_offsets_answer(self._consumer_gen, exc.args[0], positions)

    def _on_offsets_answer(
        self, gen: int, err: KafkaError | None, partitions: list[TopicPartition]
    ) -> None:
        """The answer to an asynchronous offset commit (``on_commit``: called inside
        consume() or close(), in the loop's thread).

        Refused offsets of partitions still held go back to ``_uncommitted`` (unless
        a newer offset of the partition is sent or waiting already), so the next
        commit covers them; a partition no longer held is its next owner's (it
        re-reads from the last committed offset: duplicates, never a loss).  A
        fencing replaces the consumer and too many refusals in a row stop the router,
        both from the loop (:meth:`_step`), never from inside this callback.
        """
        if gen != self._consumer_gen:
            log.debug("ignored: an offset commit answer of a replaced consumer (%s)", err)
            return
        now = time.monotonic()
        t0 = self._sent_at.popleft()[0] if self._sent_at else now
        cause = err
        for tp in partitions:
            key = (tp.topic, tp.partition)
            refused = err is not None or tp.error is not None
            if cause is None and tp.error is not None:
                cause = tp.error
            sent = self._sent.get(key)
            if sent == tp.offset:
                del self._sent[key]
            if (
                refused
                and (sent is None or sent <= tp.offset)
                and key not in self._uncommitted
                and TopicPartition(tp.topic, tp.partition) in self._assigned
            ):
                self._uncommitted[key] = tp.offset
        # What is left (held back meanwhile, or refused now) goes with the next batch
        # or, without one, after a batch window (_step); after a refusal not sooner
        # than REFUSED_RETRY_S (a commit the coordinator cannot take yet would be
        # refused again at once, and refusals in a row stop the router).  Not added to
        # commit_s: the loop did not wait for this answer.
        window = self.config.batch_max_ms / 1000.0
        self._offsets_retry_at = now + (window if cause is None else max(window, REFUSED_RETRY_S))
        if self.metrics is not None:
            self.metrics.on_offsets_commit(now - t0, ok=cause is None)
        if cause is None:
            self._offset_commits += 1
            self._consecutive_aborts = 0
            return
        self._failed_commits += 1
        self._consecutive_aborts += 1
        if cause.code() in (KafkaError.FENCED_INSTANCE_ID, KafkaError._FATAL):
            # The group replaced this consumer (seen after every broker restart: a
            # JoinGroup retried during the outage took this instance id).  The
            # consumer is dead now: the loop replaces it at the end of this step,
            # whether or not its fatal error is ever consumed.
            self._consumer_fenced = f"offset commit: {cause}"
            return
        if cause.fatal():
            self._commit_failure = DeliveryError.from_kafka(
                f"offset commit failed fatally: {cause}", cause, retriable=False
            )
            return
        log.warning("offset commit refused (%s); the next commit covers it", cause)
        if self._consecutive_aborts >= self.config.max_consecutive_aborts:
            self._commit_failure = DeliveryError(
                f"{self._consecutive_aborts} offset commits in a row were refused (last: "
                f"{cause}); stopping rather than retrying forever"
            )

    def _flush_all(self, producer: Producer) -> None:
        """Wait until every produced record is acknowledged; raise on any failure."""
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while True:
            left = producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            self._raise_on_delivery_errors()
            if left == 0:
                return
            if self._stop.is_set():
                raise _Abandoned(f"flush: {left} message(s) not delivered")
            if time.monotonic() >= deadline:
                self._failed = True
                raise DeliveryError(
                    f"{left} message(s) still undelivered after {FLUSH_TIMEOUT_S:.0f} s "
                    f"(last producer error: {self._fatal_cause or 'none reported'}); "
                    "stopping without committing their offsets"
                )
            log.warning("flush: %d message(s) not yet delivered; waiting", left)

    def _transaction_calls(
        self, positions: list[TopicPartition], metadata: object | None, *, direct: bool = False
    ) -> None:
        """``send_offsets_to_transaction`` (if any moved) + ``commit_transaction``."""
        producer = self._producer
        assert producer is not None
        if positions:
            self._broker_call(
                "send_offsets_to_transaction",
                lambda t: producer.send_offsets_to_transaction(positions, metadata, t),
                direct=direct,
                stuck_s=TXN_STUCK_S,
            )
        try:
            self._broker_call(
                "commit_transaction",
                producer.commit_transaction,
                direct=direct,
                stuck_s=TXN_STUCK_S,
            )
        except _Wedged as exc:  # (its EndTxn may have reached the coordinator)
            raise _WedgedCommit(str(exc)) from exc

    def _start_commit(self) -> None:
        """Exactly-once: commit the open batch's transaction in a helper thread.

        The batch is closed here (the next message opens a new one, whose records
        wait in ``_queued``); :meth:`_settle` collects the outcome.  The offsets
        and the group generation (``consumer_group_metadata``) are taken now, in
        the loop's thread, so a later rebalance cannot slip other partitions'
        offsets into this commit, and a commit the group has fenced meanwhile
        fails (abortable) instead of committing a lost partition.
        """
        self._settle()  # one transaction at a time (normally long done)
        if not self._in_txn:
            return  # (aborted by that settle)
        consumer = self._consumer
        assert consumer is not None
        positions = [TopicPartition(t, p, o) for (t, p), o in self._uncommitted.items()]
        metadata = consumer.consumer_group_metadata() if positions else None
        inflight = _InflightCommit(
            self._uncommitted,
            msgs=self._txn_msgs,
            routed=self._txn_routed,
            dlq=self._txn_dlq,
            announce=self._txn_announce,
            ending=self._ending,
            txn_started=self._txn_started,
        )
        inflight.group_metadata = metadata

        def target() -> None:
            try:
                # (directly in this thread: _settle watches it for WEDGED_S and stops)
                self._transaction_calls(positions, metadata, direct=True)
            except BaseException as exc:  # handed to the loop by _settle
                inflight.error = exc
            inflight.done_at = time.monotonic()

        inflight.first = self._first
        self._uncommitted = {}
        self._first = {}
        self._ending = set()
        self._in_txn = self._txn_open = False
        inflight.thread = threading.Thread(target=target, name="router-commit", daemon=True)
        self._inflight = inflight
        inflight.thread.start()

    def _settle(self, *, wait: bool = True, rewind: bool = True) -> None:
        """Finish the background commit (:meth:`_start_commit`), if there is one.

        ``wait=False``: only if it has already returned.  Success: its batch is
        counted and the open batch's queued records are produced in a new
        transaction.  An abortable error aborts that transaction and drops the open
        batch too (nothing of it was produced): the rewind reads both again.  A
        wedged call replaces the producer (same).  Fatal errors, a stop while the
        broker is unreachable and DeliveryError are raised here, in the loop.
        """
        inflight = self._inflight
        if inflight is None:
            return
        thread = inflight.thread
        assert thread is not None
        if thread.is_alive():
            if not wait:
                return
            t0 = time.monotonic()
            try:
                exc_now = self._wait_for(inflight)
            finally:
                self._commit_s += time.monotonic() - t0
        else:
            exc_now = None
        self._inflight = None
        exc = exc_now or inflight.error
        if exc is None:
            self._committed(inflight)
            if self._in_txn:
                self._produce_queued()
            return
        # Failed: the producer's transaction is still the background batch's.  What
        # the abort gives up (and the rewind reads again): both batches.
        self._txn_msgs = inflight.msgs + (self._txn_msgs if self._in_txn else 0)
        self._in_txn = self._txn_open = True
        for key, offset in self._first.items():  # (the older batch's offsets come first)
            inflight.first.setdefault(key, offset)
        self._first = inflight.first
        self._queued.clear()
        self._ending.clear()
        if isinstance(exc, _Wedged):
            unknown = inflight.msgs if isinstance(exc, _WedgedCommit) else 0
            self._replace_producer(str(exc), rewind=rewind, unknown=unknown)
            return
        if isinstance(exc, KafkaException):
            kerr = exc.args[0]
            if not kerr.txn_requires_abort():
                raise self._fatal("commit", exc) from exc
            self._abort(self._refusal(kerr, inflight.group_metadata), rewind=rewind)
            return
        raise exc

    def _wait_for(self, inflight: _InflightCommit) -> _Wedged | None:
        """Wait for a background commit as :meth:`_bounded` waits for a call: a stop
        request gives up after :data:`CALL_TIMEOUT_S` (:class:`_Abandoned`), and a
        commit still running after :data:`WEDGED_S` is left in its thread (returned
        as :class:`_Wedged`: the producer is replaced)."""
        thread = inflight.thread
        assert thread is not None
        while True:
            thread.join(0.05)
            if not thread.is_alive():
                return None
            ran = time.monotonic() - inflight.started_at
            if self._stop.is_set() and ran >= CALL_TIMEOUT_S:
                raise _Abandoned(f"the transaction commit has not returned after {ran:.1f} s")
            if ran >= WEDGED_S:
                # (it may be inside commit_transaction, or enter it still)
                return _WedgedCommit(f"the transaction commit has not returned after {ran:.0f} s")

    def _produce_queued(self) -> None:
        """Begin the open batch's transaction and produce what waited for it."""
        self._begin_transaction()
        queued, self._queued = self._queued, []
        try:
            for topic, value, key, headers, ts in queued:
                self._produce(topic, value, key, headers, ts)
        except _AbortableProduce as exc:
            self._abort(str(exc))  # the rewind reads the rest again

    def _committed(self, inflight: _InflightCommit) -> None:
        """A background commit succeeded: count its batch, pause its ended sessions."""
        if self.metrics is not None:
            self.metrics.on_commit(
                inflight.done_at - inflight.txn_started, inflight.done_at - inflight.started_at
            )
        self._consecutive_aborts = 0
        self._transactions += 1
        self._routed += inflight.routed
        self._dlq += inflight.dlq
        self._announcements += inflight.announce
        if inflight.ending:
            self._pause(inflight.ending)

    def _settle_after_failure(self) -> bool:
        """close() after a failure: wait for a background commit (no other call may
        use the producer meanwhile), report its outcome instead of raising it (the
        failure that stopped the router is the one to see), and drop the queued
        records.  Returns True, for use in a condition."""
        inflight, self._inflight = self._inflight, None
        self._queued.clear()
        if inflight is None or inflight.thread is None:
            return True
        inflight.thread.join(WEDGED_S)
        if inflight.thread.is_alive():
            log.warning("background commit still running after %.0f s; left to it", WEDGED_S)
            self._producer_dead = True  # (in use by that thread: close() leaves it alone)
            return True
        if inflight.error is None:
            self._committed(inflight)
        else:
            # its transaction is still open: close() aborts it (unless the producer died)
            self._txn_open = True
            log.warning("background commit failed too: %s", inflight.error)
        return True

    def _commit_transaction(self) -> None:
        """Send consumed offsets and commit; abort + rewind on abortable errors."""
        consumer, producer = self._consumer, self._producer
        assert consumer is not None and producer is not None
        t0 = time.monotonic()
        positions = [TopicPartition(t, p, o) for (t, p), o in self._uncommitted.items()]
        metadata = None
        try:
            metadata = consumer.consumer_group_metadata() if positions else None
            self._transaction_calls(positions, metadata)
        except _Wedged as exc:
            self._commit_s += time.monotonic() - t0
            unknown = self._txn_msgs if isinstance(exc, _WedgedCommit) else 0
            self._replace_producer(str(exc), unknown=unknown)
            return
        except KafkaException as exc:
            self._commit_s += time.monotonic() - t0
            kerr = exc.args[0]
            if not kerr.txn_requires_abort():
                raise self._fatal("commit", exc) from exc
            self._abort(self._refusal(kerr, metadata))
            return
        self._commit_s += time.monotonic() - t0
        self._first.clear()
        self._uncommitted.clear()
        if self.metrics is not None:
            done = time.monotonic()
            self.metrics.on_commit(done - self._txn_started, done - t0)
        self._consecutive_aborts = 0
        self._transactions += 1
        self._txn_open = False
        self._batch_done()

    @staticmethod
    def _refusal(kerr: KafkaError, metadata: object) -> str:
        """Why a transaction is aborted: the error, and for a group error the group
        metadata its offsets were sent with (docs/chaos.md, "Follow-up")."""
        if metadata is None or kerr.code() not in _GROUP_REFUSALS:
            return str(kerr)
        return f"{kerr} (offsets sent with {describe_group_metadata(metadata)})"

    def _abort(self, why: str, *, rewind: bool = True) -> None:
        consumer, producer = self._consumer, self._producer
        assert consumer is not None and producer is not None
        log.warning(
            "aborting transaction of %d message(s): %s; delivery errors: %s",
            self._txn_msgs,
            why,
            self._txn_errors or "none reported",
        )
        if self._txn_open:
            try:
                self._broker_call("abort_transaction", producer.abort_transaction, txn=False)
            except _Wedged as exc:
                self._replace_producer(str(exc), rewind=rewind)
                return
            except KafkaException as exc:
                raise self._fatal("abort_transaction", exc) from exc
        self._in_txn = self._txn_open = False
        self._queued.clear()
        self._ending.clear()
        self._uncommitted.clear()  # the rewind (or the next owner) reads them again
        if self.metrics is not None:
            self.metrics.on_abort(self._txn_msgs)
        self._aborts += 1
        self._aborted_msgs += self._txn_msgs
        self._consecutive_aborts += 1
        if self._consecutive_aborts >= self.config.max_consecutive_aborts:
            self._failed = True
            raise DeliveryError(
                f"{self._consecutive_aborts} transactions in a row were aborted (last: {why}; "
                f"delivery errors: {self._txn_errors or 'none reported'}); stopping rather "
                "than retrying forever"
            )
        if rewind:
            self._rewind_after_abort()
        if self._consecutive_aborts > 1:
            time.sleep(min(2.0, 0.05 * self._consecutive_aborts))  # back off repeated aborts

    def _rewind_after_abort(self) -> None:
        """Seek back what the aborted batch consumed (:meth:`_seek_back`), now or,
        inside a rebalance callback, right after the consume() call that runs it.

        Why deferred: that consume() call may return messages it had taken before
        running the callback, from positions past the aborted batch; handled, they
        would be routed again after the seek (duplicates).  The loop drops what the
        call returned and seeks back to before it.
        """
        if self._in_rebalance:
            self._rewind_due = True
        else:
            self._seek_back()

    def _note_consumed(self, msgs: list[Message]) -> None:
        """Exactly-once: consumed messages that were not handled (dropped before an
        abort's seek back) must be read again too: note where, unless an earlier
        message of their partition is noted already."""
        if not self._exactly_once:
            return
        for m in msgs:
            topic = m.topic()
            if m.error() is None and topic is not None:
                self._first.setdefault((topic, m.partition() or 0), m.offset() or 0)

    def _seek_back(self, unhandled: list[Message] | None = None) -> None:
        """Seek every assigned partition that moved since its last committed
        transaction back to its first uncommitted message (``_first``), so the
        aborted batch is read again; ``unhandled``: messages consumed after it and
        dropped.  No broker call."""
        consumer = self._consumer
        assert consumer is not None
        if unhandled:
            self._note_consumed(unhandled)
        targets, self._first = self._first, {}
        for (topic, partition), offset in targets.items():
            tp = TopicPartition(topic, partition)
            if tp in self._assigned:
                _seek(consumer, TopicPartition(topic, partition, offset))
                if self._paused.pop((topic, partition), None) is not None:
                    # paused (its session_end committed) while the aborted batch held
                    # later records of it: fetch them again
                    consumer.resume([tp])

    # -- rebalance callbacks (run inside consume()) -------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is self._retired_consumer:
            log.info(
                "ignored: %s of %d partition(s) by the replaced consumer", "assign", len(partitions)
            )
            return
        self._rebalances += 1
        self._note_assigned(consumer, partitions)

    def _note_assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Bookkeeping of partitions added to the assignment (by the group, or by a
        static shard itself)."""
        if self.first_assigned_at is None and partitions:
            self.first_assigned_at = time.monotonic()
            self._next_discovery = self.first_assigned_at + 1.0
        if self._pause_ended and partitions:
            # librdkafka keeps a partition paused across a revoke and a later
            # re-assignment (measured): one paused here before it was revoked, and
            # forgotten then, would never be fetched again.  Resuming before the
            # assignment is a no-op for the others.
            consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in partitions])
        for tp in partitions:
            self._assigned.add(TopicPartition(tp.topic, tp.partition))
            self._assigned_topics.add(tp.topic)
        self._pending.assigned(self._assigned_topics)
        log.info(
            "%sassigned %d partition(s), %d held now (e.g. %s)",
            "" if self._shard is None else f"shard {self._shard}: ",
            len(partitions),
            len(self._assigned),
            [f"{tp.topic}[{tp.partition}]" for tp in partitions[:3]],
        )

    def _assign_shard(self, md: Any | None) -> None:
        """Static shard: assign the consumer every partition of ``<prefix>.control``
        and of the session topics this shard owns in ``md`` (full cluster metadata;
        None: ask for it now), and drop the topics the cluster no longer has.

        Why (:mod:`streams.router.shards`): a partition added here revokes nothing
        anywhere, so no transaction is interrupted and no other router takes part;
        it starts from the group's committed offset (fetched stable: the consumer is
        read_committed), else the earliest, as after a group assignment.  A topic
        missing from a full metadata response was deleted: its partitions leave the
        assignment with their uncommitted offsets (nothing is left to resume there).
        A failed metadata request or assignment is logged and retried at the next
        refresh (every ``metadata_refresh_ms``, and at once for an announcement).
        """
        consumer = self._consumer
        shard = self._shard
        assert consumer is not None and shard is not None
        if md is None:
            try:
                md = consumer.list_topics(timeout=CALL_TIMEOUT_S)
            except KafkaException as exc:
                log.warning(
                    "shard %s: cluster metadata failed (%s); assigning at the next refresh",
                    shard,
                    exc,
                )
                return
        add: list[TopicPartition] = []
        for name, meta in md.topics.items():
            if meta.error is not None or not meta.partitions:
                continue
            if name != self._control_topic:
                sid = session_id_of_topic(self._prefix, name)
                if sid is None or not shard.owns(sid):
                    continue
            add.extend(
                tp for p in meta.partitions if (tp := TopicPartition(name, p)) not in self._assigned
            )
        gone = [tp for tp in self._assigned if tp.topic not in md.topics]
        try:
            if gone:
                consumer.incremental_unassign(gone)
                self._forget(gone)
                log.info(
                    "shard %s: %d partition(s) of deleted topics dropped, %d held now",
                    shard,
                    len(gone),
                    len(self._assigned),
                )
            if add:
                consumer.incremental_assign(add)
                self._note_assigned(consumer, add)
        except KafkaException as exc:
            if _is_fatal(exc.args[0]):
                raise _ConsumerFenced(f"shard {shard}: assign: {exc.args[0]}") from exc
            log.warning(
                "shard %s: assignment failed (%s); retrying at the next refresh", shard, exc
            )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is self._retired_consumer:
            log.info(
                "ignored: %s of %d partition(s) by the replaced consumer", "revoke", len(partitions)
            )
            return
        # Commit what we consumed while we still own the partitions (KIP-447:
        # the group generation in consumer_group_metadata() fences late commits;
        # at-least-once: flush, then commit, so the next owner starts after them).
        # A background commit is waited for first (it holds offsets of partitions we
        # still own here), then the open batch, queued records included, commits.
        self._rebalances += 1
        self._in_rebalance = True
        try:
            if self._uncommitted_batch and not self._failed:
                self._commit()
        finally:
            self._in_rebalance = False
        self._forget(partitions)
        log.info("revoked %d partition(s), %d held now", len(partitions), len(self._assigned))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is self._retired_consumer:
            log.info(
                "ignored: %s of %d partition(s) by the replaced consumer", "lost", len(partitions)
            )
            return
        # Ownership is already gone: committing offsets would be fenced; abort.
        # (At-least-once: nothing to undo; the next owner re-reads from the last
        # committed offsets, i.e. duplicates, and our next commit skips these.)
        # A background commit is waited for (no abort while it runs); the group
        # fences it if the generation has moved on, which aborts it here.
        self._rebalances += 1
        self._forget(partitions)
        log.warning(
            "lost %d partition(s) (session timeout or fenced generation), %d held now",
            len(partitions),
            len(self._assigned),
        )
        self._in_rebalance = True
        try:
            if self._inflight is not None and not self._failed:
                self._settle()
            if self._in_txn and self._exactly_once and not self._failed:
                self._abort("partitions lost (session timeout or fenced generation)")
        finally:
            self._in_rebalance = False

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.discard(TopicPartition(tp.topic, tp.partition))
            # (not ours any more: the next owner starts at the last committed offset)
            self._uncommitted.pop((tp.topic, tp.partition), None)
            self._first.pop((tp.topic, tp.partition), None)
            self._paused.pop((tp.topic, tp.partition), None)
        self._assigned_topics = {tp.topic for tp in self._assigned}


__all__ = [
    "DLQ_PREVIEW_BYTES",
    "FLUSH_TIMEOUT_S",
    "Router",
    "default_decoder",
    "ensure_topics",
]
