"""The consumer side of live detection: follow sessions' assessments (and patterns).

::

    from streams.sdk.subscriber import AssessmentSubscriber

    with AssessmentSubscriber(settings, trees=["run-42"], min_severity="caution") as sub:
        sub.run(print)                      # callback style, until sub.close()

    async with AssessmentSubscriber(settings, globs=["ci-*"], patterns=True) as sub:
        async for record in sub:            # AssessmentWire | PatternRecord
            ...

What a subscriber reads: ``<prefix>.assessments`` (compacted, key = session id,
value :class:`~streams.serde.avro.AssessmentWire`) and, with ``patterns=True``,
``<prefix>.patterns`` (:class:`~streams.serde.avro.PatternRecord`), with
``isolation.level=read_committed`` so an aborted worker transaction is never seen.

Every record read goes through these stages, in order; each stage that drops a
record counts it in :class:`SubscriberStats` (nothing is dropped uncounted):

1. decode (a malformed value raises :class:`MalformedMessageError` naming
   topic/partition/offset, or is counted in ``decode_errors`` with
   ``on_decode_error="count"``); a tombstone (empty value) is counted in
   ``tombstones`` (and delivered as :class:`Tombstone` with ``tombstones=True``);
2. tree learning: ``parent_session_id`` of *every* record read (even one that is
   filtered out later) is remembered and, in tree mode, so is every SDK session
   announcement on ``<prefix>.control`` (read from its beginning whatever
   ``start`` says), see :class:`SessionMatcher`;
3. minimum severity (info < caution < warning; a record without severity counts
   as info; a severity this reader does not know is never filtered out)
   -> ``below_severity``;
4. pattern types (applies to pattern records only) -> ``pattern_type_filtered``;
5. selection (``sessions`` / ``globs`` / ``trees``; none given = every session)
   -> ``not_selected``.  A record whose tree membership is not known yet (its
   parent's link has not been read: another partition or topic may be behind)
   is *held* (``tree_pending``) until a link decides it, at most
   ``pending_capacity`` records for ``pending_max_age_s``; one given up on is
   counted in ``tree_unresolved``;
6. dedupe: a record whose key was already delivered by this subscriber is
   suppressed -> ``duplicates_suppressed``.  Keys: assessments
   ``(session_id, seq, trigger)`` plus ``timestamp_ms`` for timer-triggered ones
   (two timer assessments at the same ``seq`` are different assessments; a
   re-published one has the same event time); patterns
   ``(session_id, seq, pattern_type)``.  The memory is an LRU of
   ``dedupe_capacity`` keys: a re-publish older than that is delivered again;
7. sampling: deterministic by a BLAKE2b hash of ``(salt, session_id, seq)``, so
   the same records are kept on every run and the assessment and the patterns of
   one event are kept or dropped together -> ``sampled_out``;
8. rate limit: a token bucket (``rate_limit`` records/s, ``burst``); a record
   over the limit is dropped *for this subscriber* -> ``rate_limited`` (the
   session's latest assessment stays on the compacted topic: ``context_for``);
9. delivered -> ``delivered``.

Start position: ``start="latest"`` delivers records produced after the
subscriber was opened; ``"beginning"`` replays the topics (for the compacted
assessments topic: each session's latest assessment, then live ones).  Without a
``group_id`` the subscriber assigns itself every partition (no group join, no
commits; the random ``group.id`` is never used for coordination) at exactly the
high watermark it read at assignment time, so "latest" loses nothing produced
after :meth:`AssessmentSubscriber.wait_ready` returned; a topic that did not
exist yet when the subscriber opened is read from its beginning once it appears
(everything in it is newer than the subscriber).  With a ``group_id`` it joins
that group (partitions shared between members, offsets committed after each
record is processed); a partition the group has no committed offset for starts at
the beginning or at the high watermark read at assignment time.  Tree following
in a group is weaker: ``<prefix>.control`` is read only if it existed at open,
its partitions are shared between members, and records are not held back until
it was read (in manual mode they are).

Thread-safety: :meth:`close` may be called from any thread (it waits for an
in-flight poll, at most ``poll_interval_s``); the other methods are meant for
one consumer thread (or one asyncio task).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from streams.core.assessment import SEVERITIES, severity_rank
from streams.errors import BrokerError, ConfigError, MalformedMessageError, SerdeError
from streams.security import client_config, weak_method
from streams.serde.avro import AssessmentSerde, AssessmentWire, PatternRecord, PatternSerde
from streams.settings import Settings

Record: TypeAlias = AssessmentWire | PatternRecord
StartFrom: TypeAlias = Literal["latest", "beginning"]

#: Longest parent chain followed when testing tree membership (guards cycles).
MAX_TREE_DEPTH: Final = 1000
_MAX_BATCH: Final = 500


# --------------------------------------------------------------------------
# pure parts (unit-tested without Kafka)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null value on a topic (a deleted session), delivered only on request."""

    session_id: str
    topic: str


@dataclass(frozen=True, slots=True)
class Selection:
    """Which sessions a subscriber follows; all empty = every session.

    A session is selected when it is one of ``sessions``, matches one of
    ``globs`` (:func:`fnmatch.fnmatchcase`: ids are case-sensitive), or belongs to
    the originator tree of one of ``trees`` (the root itself, its sub-agent
    sessions, theirs, ...).
    """

    sessions: frozenset[str] = frozenset()
    globs: tuple[str, ...] = ()
    trees: frozenset[str] = frozenset()

    @property
    def everything(self) -> bool:
        return not (self.sessions or self.globs or self.trees)


class SessionMatcher:
    """:class:`Selection` plus the originator links learned while reading.

    Links come from the ``parent_session_id`` of every record read and, in tree
    mode, from the SDK's session announcements on ``<prefix>.control`` (read
    from its beginning: it names the parent of every announced session, even one
    that never published an assessment).  A session seen with no parent is a
    known root.

    :meth:`verdict` is True (selected), False (not selected) or None (not known
    yet: its chain of known parents ends at a session of which nothing has been
    read).  The subscriber holds records with a None verdict (see
    :class:`RecordFilter`) instead of deciding too early: the records of a
    grandchild may be read before its parent's link (other partitions, other
    topics).  Memory: one entry per session with a parent, at most ``max_links``
    (oldest forgotten first), plus the known roots (same cap).
    """

    def __init__(self, selection: Selection, *, max_links: int = 1_000_000) -> None:
        if max_links < 1:
            raise ConfigError("max_links", f"must be >= 1, got {max_links}")
        self.selection = selection
        self.max_links = max_links
        self._parents: OrderedDict[str, str] = OrderedDict()
        self._roots: OrderedDict[str, None] = OrderedDict()

    def observe(self, session_id: str, parent_session_id: str | None) -> bool:
        """Remember ``session_id``'s parent (the latest one read wins; None = a root).

        Returns True when what is known about ``session_id`` changed.
        """
        if parent_session_id == session_id:
            parent_session_id = None
        if parent_session_id is None:
            if session_id in self._parents or session_id in self._roots:
                return False  # a record without a parent never erases a known link
            self._roots[session_id] = None
            if len(self._roots) > self.max_links:
                self._roots.popitem(last=False)
            return True
        changed = self._parents.get(session_id) != parent_session_id
        self._parents[session_id] = parent_session_id
        self._parents.move_to_end(session_id)
        self._roots.pop(session_id, None)
        if len(self._parents) > self.max_links:
            self._parents.popitem(last=False)
        return changed

    def parent_of(self, session_id: str) -> str | None:
        return self._parents.get(session_id)

    def tree_verdict(self, session_id: str) -> bool | None:
        """In one of the trees (True), not (False), or not known yet (None)."""
        roots = self.selection.trees
        if not roots:
            return False
        current = session_id
        seen: set[str] = set()
        while len(seen) < MAX_TREE_DEPTH:
            if current in roots:
                return True
            seen.add(current)
            parent = self._parents.get(current)
            if parent is None:
                return False if current in self._roots else None
            if parent in seen:
                return False  # a cycle never reaches a root
            current = parent
        return False

    def verdict(self, session_id: str) -> bool | None:
        sel = self.selection
        if sel.everything or session_id in sel.sessions:
            return True
        if any(fnmatch.fnmatchcase(session_id, g) for g in sel.globs):
            return True
        return self.tree_verdict(session_id)

    def matches(self, session_id: str) -> bool:
        """Selected as far as is known now (None counts as not selected)."""
        return self.verdict(session_id) is True


def check_severity(value: str, key: str = "min_severity") -> str:
    """``value`` if it is info, caution or warning, else a ConfigError naming ``key``."""
    if value not in SEVERITIES:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(SEVERITIES)}")
    return value


def severity_passes(severity: str | None, min_severity: str) -> bool:
    """``severity`` (None = info) is at least ``min_severity``.

    A severity unknown to this reader (written by a newer worker) passes: it is
    better shown than hidden by a filter that cannot rank it.
    """
    if severity is None:
        severity = "info"
    if severity not in SEVERITIES:
        return True
    return severity_rank(severity) >= severity_rank(min_severity)


def sample_keep(session_id: str, seq: int, rate: float, salt: str = "") -> bool:
    """Deterministic sampling: keep iff hash(salt, session_id, seq) < rate * 2**64.

    Stable across processes and runs (BLAKE2b, not ``hash()``); about ``rate`` of
    all (session, seq) pairs are kept; ``rate >= 1`` keeps all, ``<= 0`` none.
    """
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(f"{salt}\x00{session_id}\x00{seq}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * 2**64


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved; starts full.

    ``clock`` is injected (monotonic seconds) so tests need no sleeping.
    """

    def __init__(
        self, rate: float, burst: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not rate > 0:
            raise ConfigError("rate_limit", f"must be > 0 records per second, got {rate}")
        if not burst >= 1:
            raise ConfigError("burst", f"must be >= 1 record, got {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()

    def take(self) -> bool:
        """Consume one token if there is one."""
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


DedupeKey: TypeAlias = tuple[object, ...]


def dedupe_key(record: Record) -> DedupeKey:
    """What identifies a delivered record (see the module docstring, stage 6)."""
    if isinstance(record, AssessmentWire):
        stamp = record.timestamp_ms if record.trigger == "timer" else None
        return ("assessment", record.session_id, record.seq, record.trigger, stamp)
    return ("pattern", record.session_id, record.seq, record.pattern_type)


class DeliveredKeys:
    """LRU set of the last ``capacity`` delivered keys."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ConfigError("dedupe_capacity", f"must be >= 1, got {capacity}")
        self.capacity = capacity
        self._keys: OrderedDict[DedupeKey, None] = OrderedDict()

    def __contains__(self, key: DedupeKey) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: DedupeKey) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self.capacity:
            self._keys.popitem(last=False)


@dataclass(frozen=True, slots=True)
class SubscriberStats:
    """Counters since the subscriber opened; see the module docstring's stages."""

    received: int = 0
    delivered: int = 0
    tombstones: int = 0
    decode_errors: int = 0
    not_selected: int = 0
    below_severity: int = 0
    pattern_type_filtered: int = 0
    duplicates_suppressed: int = 0
    sampled_out: int = 0
    rate_limited: int = 0
    consumer_errors: int = 0
    #: Records held because their tree membership is not known yet (a gauge).
    tree_pending: int = 0
    #: Held records given up on (capacity / age): never delivered.
    tree_unresolved: int = 0


@dataclass
class RecordFilter:
    """The filtering stages of the module docstring, pure (no Kafka).

    ``offer(record)`` returns the records to deliver now, in arrival order: the
    offered one (if it passes) after any held records its links resolved.  A
    record whose tree membership is not known yet is held (at most
    ``pending_capacity`` records for at most ``pending_max_age_s`` seconds of
    ``clock``); one evicted unresolved is counted in ``tree_unresolved``.
    ``counts`` holds the :class:`SubscriberStats` counters by name.
    """

    matcher: SessionMatcher
    min_severity: str = "info"
    pattern_types: frozenset[str] | None = None
    sample_rate: float = 1.0
    sample_salt: str = ""
    bucket: TokenBucket | None = None
    delivered_keys: DeliveredKeys = field(default_factory=lambda: DeliveredKeys(100_000))
    pending_capacity: int = 10_000
    pending_max_age_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(SubscriberStats.__dataclass_fields__, 0)
    )
    _pending: deque[tuple[float, Record]] = field(default_factory=deque)

    def offer(self, record: Record) -> list[Record]:
        """Count ``record``; the records to deliver now (each marked delivered)."""
        c = self.counts
        c["received"] += 1
        released = self.learn(record.session_id, record.parent_session_id)
        severity = record.max_severity if isinstance(record, AssessmentWire) else record.severity
        if not severity_passes(severity, self.min_severity):
            c["below_severity"] += 1
            return released
        if (
            self.pattern_types is not None
            and isinstance(record, PatternRecord)
            and record.pattern_type not in self.pattern_types
        ):
            c["pattern_type_filtered"] += 1
            return released
        verdict = self.matcher.verdict(record.session_id)
        if verdict is None:
            self._pending.append((self.clock(), record))
            c["tree_pending"] = len(self._pending)
            self.expire()
            return released
        if not verdict:
            c["not_selected"] += 1
            return released
        return released + self._deliverable(record)

    def learn(self, session_id: str, parent_session_id: str | None) -> list[Record]:
        """Take a link into account; the held records it lets through."""
        if not self.matcher.observe(session_id, parent_session_id) or not self._pending:
            return []
        out: list[Record] = []
        keep: deque[tuple[float, Record]] = deque()
        for item in self._pending:
            verdict = self.matcher.verdict(item[1].session_id)
            if verdict is None:
                keep.append(item)
            elif verdict:
                out.extend(self._deliverable(item[1]))
            else:
                self.counts["not_selected"] += 1
        self._pending = keep
        self.counts["tree_pending"] = len(keep)
        return out

    def expire(self) -> None:
        """Give up on held records over capacity or older than ``pending_max_age_s``."""
        pending = self._pending
        if not pending:
            return
        oldest_kept = self.clock() - self.pending_max_age_s
        while pending and (len(pending) > self.pending_capacity or pending[0][0] < oldest_kept):
            pending.popleft()
            self.counts["tree_unresolved"] += 1
        self.counts["tree_pending"] = len(pending)

    def _deliverable(self, record: Record) -> list[Record]:
        c = self.counts
        key = dedupe_key(record)
        if key in self.delivered_keys:
            c["duplicates_suppressed"] += 1
            return []
        if not sample_keep(record.session_id, record.seq, self.sample_rate, self.sample_salt):
            c["sampled_out"] += 1
            return []
        if self.bucket is not None and not self.bucket.take():
            c["rate_limited"] += 1
            return []
        self.delivered_keys.add(key)
        c["delivered"] += 1
        return [record]

    def stats(self) -> SubscriberStats:
        return SubscriberStats(**self.counts)


def _names(value: str | Iterable[str] | None, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = (value,) if isinstance(value, str) else tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{key}[{i}]", f"expected a non-empty string, got {item!r}")
    return items


# --------------------------------------------------------------------------
# the Kafka consumer


class AssessmentSubscriber:
    """Follow live assessments (and patterns); see the module docstring.

    ``consumer_config`` entries are passed to librdkafka last (they override);
    ``isolation.level`` cannot be weakened.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        sessions: str | Iterable[str] | None = None,
        globs: str | Iterable[str] | None = None,
        trees: str | Iterable[str] | None = None,
        min_severity: str = "info",
        pattern_types: Iterable[str] | None = None,
        assessments: bool = True,
        patterns: bool = False,
        start: StartFrom | str = "latest",
        group_id: str | None = None,
        sample_rate: float = 1.0,
        sample_salt: str = "",
        rate_limit: float | None = None,
        burst: float | None = None,
        dedupe_capacity: int = 100_000,
        pending_capacity: int = 10_000,
        pending_max_age_s: float = 30.0,
        tombstones: bool = False,
        on_decode_error: Literal["raise", "count"] | str = "raise",
        poll_interval_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        consumer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        if start not in ("latest", "beginning"):
            raise ConfigError("start", f"{start!r}: use 'latest' or 'beginning'")
        if on_decode_error not in ("raise", "count"):
            raise ConfigError("on_decode_error", f"{on_decode_error!r}: use 'raise' or 'count'")
        if not assessments and not patterns:
            raise ConfigError("assessments", "nothing to read: enable assessments or patterns")
        if not 0.0 <= sample_rate <= 1.0:
            raise ConfigError("sample_rate", f"must be within [0, 1], got {sample_rate}")
        if not poll_interval_s > 0:
            raise ConfigError("poll_interval_s", f"must be > 0, got {poll_interval_s}")
        if burst is not None and rate_limit is None:
            raise ConfigError("burst", "only meaningful with rate_limit")
        selection = Selection(
            sessions=frozenset(_names(sessions, "sessions")),
            globs=_names(globs, "globs"),
            trees=frozenset(_names(trees, "trees")),
        )
        types = None if pattern_types is None else frozenset(_names(pattern_types, "pattern_types"))
        self.filter = RecordFilter(
            matcher=SessionMatcher(selection),
            min_severity=check_severity(min_severity),
            pattern_types=types,
            sample_rate=float(sample_rate),
            sample_salt=sample_salt,
            bucket=None
            if rate_limit is None
            else TokenBucket(
                rate_limit, burst if burst is not None else max(1.0, rate_limit), clock=clock
            ),
            delivered_keys=DeliveredKeys(dedupe_capacity),
            pending_capacity=pending_capacity,
            pending_max_age_s=pending_max_age_s,
            clock=clock,
        )
        self.start: str = start
        self.deliver_tombstones = tombstones
        self.on_decode_error = on_decode_error
        self.poll_interval_s = poll_interval_s
        s = self.settings
        framing = "confluent" if s.schema_registry_url else "single-object"
        self._serdes: dict[str, AssessmentSerde | PatternSerde] = {}
        if assessments:
            self._serdes[s.assessments_topic] = AssessmentSerde(
                framing, registry=s.schema_registry_url, max_bytes=s.max_message_bytes
            )
        if patterns:
            self._serdes[s.patterns_topic] = PatternSerde(
                framing, registry=s.schema_registry_url, max_bytes=s.max_message_bytes
            )
        self.topics: tuple[str, ...] = tuple(self._serdes)
        #: Read from its beginning in tree mode (announced parent links), if it exists.
        self.control_topic: str | None = s.control_topic if selection.trees else None
        self._wanted = self.topics + ((self.control_topic,) if self.control_topic else ())
        self.group_id = group_id
        config: dict[str, Any] = {
            "bootstrap.servers": s.bootstrap,
            "allow.auto.create.topics": False,
            "group.id": group_id or f"{s.prefix}.subscriber.{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest" if start == "beginning" else "latest",
            "enable.auto.commit": group_id is not None,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            **client_config(s.security),
        }
        config.update(consumer_config or {})
        config["isolation.level"] = "read_committed"
        self._consumer = Consumer(config)
        self._lock = threading.Lock()
        self._closed = False
        self._pending: deque[Record | Tombstone] = deque()
        self._assigned: set[str] = set()
        self._missing_at_open: set[str] = set()
        self._partitions: dict[tuple[str, int], bool] = {}  # (topic, p) -> reached EOF
        self._last_error: KafkaError | None = None
        self._retry_at = 0.0
        self._control_read = False
        self._paused: list[TopicPartition] = []
        try:
            if group_id is None:
                with self._lock:
                    self._assign_available(first=True)
            else:
                topics = list(self.topics)
                if self.control_topic is not None and self.control_topic in self._existing():
                    topics.append(self.control_topic)
                # weakly held: no subscriber <-> consumer cycle for the collector
                self._consumer.subscribe(topics, on_assign=weak_method(self._on_group_assign))
        except BaseException:
            self.close()  # no half-open consumer left behind
            raise

    # -- assignment ----------------------------------------------------------
    def _existing(self) -> dict[str, list[int]]:
        """Partitions of every existing topic (all-topics metadata: a request naming a
        topic could auto-create it on brokers that allow that)."""
        try:
            md = self._consumer.list_topics(timeout=10)
        except KafkaException as exc:
            raise BrokerError.from_kafka(
                f"cannot read topic metadata from Kafka at {self.settings.bootstrap}: {exc} "
                "(is the broker running? `trajectory broker start`)",
                exc,
            ) from exc
        return {
            name: sorted(tm.partitions)
            for name, tm in md.topics.items()
            if tm.error is None and tm.partitions
        }

    def _assign_available(self, *, first: bool = False) -> None:
        """Assign every partition of the topics that exist now (manual mode)."""
        todo = [t for t in self._wanted if t not in self._assigned]
        if not todo:
            return
        existing = self._existing()
        new: list[TopicPartition] = []
        for topic in todo:
            partitions = existing.get(topic)
            if not partitions:
                if first:
                    self._missing_at_open.add(topic)
                continue
            from_start = (
                self.start == "beginning"
                or topic in self._missing_at_open
                or topic == self.control_topic
            )
            for p in partitions:
                tp = TopicPartition(topic, p)
                if from_start:
                    tp.offset = OFFSET_BEGINNING
                else:
                    _, high = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                    tp.offset = high
                new.append(tp)
                self._partitions[(topic, p)] = False
            self._assigned.add(topic)
        if new:
            self._consumer.incremental_assign(new)
        self._hold_data_until_control_read()

    def _hold_data_until_control_read(self) -> None:
        """In tree mode, judge no record before the announcements were read once.

        Without this, a record could be read before the announcement linking its
        session (partitions are fetched concurrently) and be decided too early.
        """
        if self.control_topic not in self._assigned or self._control_read:
            return
        control = [k for k in self._partitions if k[0] == self.control_topic]
        if all(self._partitions[k] for k in control):
            self._control_read = True
            if self._paused:
                self._consumer.resume(self._paused)
                self._paused = []
            return
        paused = {(x.topic, x.partition) for x in self._paused}
        data = [
            TopicPartition(t, p)
            for (t, p) in self._partitions
            if t != self.control_topic and (t, p) not in paused
        ]
        if data:
            self._consumer.pause(data)
            self._paused.extend(data)

    def _on_group_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = consumer.committed(partitions, timeout=10)
        for tp, c in zip(partitions, committed, strict=True):
            if tp.topic == self.control_topic:
                tp.offset = OFFSET_BEGINNING  # links are re-learned on every assignment
            elif c.offset >= 0:
                tp.offset = c.offset
            elif self.start == "beginning":
                tp.offset = OFFSET_BEGINNING
            else:
                _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                tp.offset = high
            self._partitions[(tp.topic, tp.partition)] = False
            self._assigned.add(tp.topic)
        consumer.assign(partitions)

    @property
    def ready(self) -> bool:
        """Every topic has partitions assigned (manual mode: all of them)."""
        return set(self.topics) <= self._assigned

    @property
    def caught_up(self) -> bool:
        """Ready, and every assigned partition reached its end at least once."""
        return self.ready and all(self._partitions.values())

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until assigned (records read meanwhile are kept for delivery)."""
        self._wait(lambda: self.ready, timeout_s, "assigned")

    def wait_caught_up(self, timeout_s: float = 30.0) -> None:
        """Block until every partition was read to its end once (kept for delivery)."""
        self._wait(lambda: self.caught_up, timeout_s, "caught up")

    def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline:
                missing = [t for t in self.topics if t not in self._assigned]
                hint = (
                    f"topic(s) {', '.join(missing)} do not exist (the worker creates them: "
                    "start `trajectory worker`)"
                    if missing
                    else "partitions did not reach their end"
                )
                raise BrokerError(
                    f"subscriber not {what} after {timeout_s:g}s on {self.settings.bootstrap}: "
                    f"{hint}"
                )
            self._pending.extend(self._fetch(min(self.poll_interval_s, timeout_s)))

    # -- reading -------------------------------------------------------------
    def _fetch(self, timeout_s: float) -> list[Record | Tombstone]:
        with self._lock:
            if self._closed:
                return []
            if (
                self.group_id is None
                and len(self._assigned) < len(self._wanted)
                and time.monotonic() >= self._retry_at
            ):
                # a missing topic is looked for again at most once a second
                self._retry_at = time.monotonic() + 1.0
                self._assign_available()
            if self.group_id is None and not self._assigned:
                time.sleep(timeout_s)
                return []
            # poll returns as soon as one message is there (consume would wait the
            # whole timeout for a full batch); then take what is already fetched
            first = self._consumer.poll(timeout_s)
            messages = [] if first is None else [first]
            if first is not None:
                messages.extend(self._consumer.consume(_MAX_BATCH, 0))
            out: list[Record | Tombstone] = []
            for msg in messages:
                err = msg.error()
                if err is not None:
                    self._on_error(err, msg)
                    continue
                out.extend(self._process(msg))
                if self.group_id is not None and msg.topic() != self.control_topic:
                    self._consumer.store_offsets(message=msg)
            if self.group_id is None:
                self._hold_data_until_control_read()
            self.filter.expire()
            return out

    def _on_error(self, err: KafkaError, msg: Any) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            self._partitions[(msg.topic(), msg.partition())] = True
            return
        if err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise BrokerError.from_kafka(
                f"consuming {msg.topic() or ', '.join(self.topics)}: {err.str()}",
                err,
                topic=msg.topic() or None,
                partition=msg.partition() if msg.partition() is not None else None,
            )
        # transient (broker down, transport): librdkafka retries; counted, exposed
        self.filter.counts["consumer_errors"] += 1
        self._last_error = err

    def _process(self, msg: Any) -> list[Record | Tombstone]:
        topic = msg.topic()
        self._partitions[(topic, msg.partition())] = False
        value = msg.value()
        if topic == self.control_topic:
            return list(self._announcement(msg, value))
        if not value:
            self.filter.counts["tombstones"] += 1
            if not self.deliver_tombstones:
                return []
            key = msg.key()
            return [Tombstone(key.decode("utf-8", "replace") if key else "", topic)]
        try:
            record: Record = self._serdes[topic].decode(value)
        except SerdeError as exc:
            if self.on_decode_error == "count":
                self.filter.counts["decode_errors"] += 1
                return []
            raise MalformedMessageError(
                f"{topic} partition {msg.partition()} offset {msg.offset()}: {exc} "
                "(pass on_decode_error='count' to skip and count such records)"
            ) from exc
        return list(self.filter.offer(record))

    def _announcement(self, msg: Any, value: bytes | None) -> list[Record]:
        """Learn a parent link from an SDK session announcement (JSON, key = session)."""
        if not value:
            return []  # a deleted announcement teaches nothing
        try:
            obj = json.loads(value)
            sid = obj["session_id"]
            parent = obj.get("parent_session_id")
            if not isinstance(sid, str) or not (parent is None or isinstance(parent, str)):
                raise TypeError("session_id / parent_session_id must be strings")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if self.on_decode_error == "count":
                self.filter.counts["decode_errors"] += 1
                return []
            raise MalformedMessageError(
                f"{msg.topic()} partition {msg.partition()} offset {msg.offset()}: not a "
                f"session announcement ({type(exc).__name__}: {exc}); expected JSON with "
                "session_id and parent_session_id (pass on_decode_error='count' to skip)"
            ) from exc
        return self.filter.learn(sid, parent)

    def poll(self, timeout_s: float | None = None) -> list[Record | Tombstone]:
        """The records delivered within ``timeout_s`` (default ``poll_interval_s``)."""
        if self._pending:
            out = list(self._pending)
            self._pending.clear()
            return out
        return self._fetch(self.poll_interval_s if timeout_s is None else timeout_s)

    def run(
        self,
        callback: Callable[[Record | Tombstone], object],
        *,
        stop: threading.Event | None = None,
    ) -> None:
        """Call ``callback`` for each delivered record until closed or ``stop`` is set.

        An exception from ``callback`` propagates; the records after the failing
        one stay queued for the next poll / run (none is lost).
        """
        while not self._closed and not (stop is not None and stop.is_set()):
            batch = self.poll()
            for i, item in enumerate(batch):
                try:
                    callback(item)
                except BaseException:
                    self._pending.extendleft(reversed(batch[i + 1 :]))
                    raise

    def __iter__(self) -> AssessmentSubscriber:
        return self

    def __next__(self) -> Record | Tombstone:
        while not self._pending:
            if self._closed:
                raise StopIteration
            self._pending.extend(self._fetch(self.poll_interval_s))
        return self._pending.popleft()

    def __aiter__(self) -> AssessmentSubscriber:
        return self

    async def __anext__(self) -> Record | Tombstone:
        """Polls in a worker thread so the event loop stays free.

        Cancelling the awaiting task (``asyncio.wait_for`` ...) loses no record:
        what the in-flight poll returns is kept for the next ``__anext__``.
        """
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            # the thread appends to _pending itself: a cancelled await loses nothing
            await asyncio.to_thread(self._fill, self.poll_interval_s)
        return self._pending.popleft()

    def _fill(self, timeout_s: float) -> None:
        self._pending.extend(self._fetch(timeout_s))

    # -- counters and lifecycle ---------------------------------------------
    def stats(self) -> SubscriberStats:
        return self.filter.stats()

    @property
    def duplicates_suppressed(self) -> int:
        return self.filter.counts["duplicates_suppressed"]

    @property
    def last_error(self) -> KafkaError | None:
        """The last transient consumer error (counted in ``consumer_errors``)."""
        return self._last_error

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Leave the group (committing stored offsets) and free the consumer; idempotent."""
        self._closed = True
        with self._lock:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None  # type: ignore[assignment]
                consumer.close()

    def __enter__(self) -> AssessmentSubscriber:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> AssessmentSubscriber:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)


__all__ = [
    "MAX_TREE_DEPTH",
    "AssessmentSubscriber",
    "DeliveredKeys",
    "Record",
    "RecordFilter",
    "Selection",
    "SessionMatcher",
    "StartFrom",
    "SubscriberStats",
    "TokenBucket",
    "Tombstone",
    "check_severity",
    "dedupe_key",
    "sample_keep",
    "severity_passes",
]
