"""Apply events to the worker's tables, write-behind (pure: the tables are mappings).

The Faust agent is a thin shell around :class:`EventProcessor` so the logic can
be unit-tested with plain dicts and reused by anything that owns key/value
tables.

**Write-behind (a record cache flushed on commit, as in Kafka Streams).**  Each
session's decoded values (counters, budget, latest minute, core engine) live in
memory; an event changes them there and marks the keys *dirty*.  Nothing is
encoded or written per event: re-encoding the whole engine state (tens of KB)
on every event was the worker's main cost.  :meth:`EventProcessor.collect`
encodes every dirty value once and hands back :class:`TableWrite` values; the
worker writes them (local store + changelog) right before it commits offsets,
so a committed offset never runs ahead of the state it covers (see
docs/guarantees.md for the ordering and the crash analysis).

Invariants:

* The processor is the only writer of the tables it is given (one Faust agent,
  concurrency 1); otherwise the caches would go stale.
* Every value changed since the last :meth:`collect` is in a dirty set, and
  :meth:`collect` returns each dirty key once, with its value *at the time of
  the call* (later changes mark the key dirty again).
* :meth:`drop_caches` refuses to run while anything is dirty: the caches may
  only be dropped after a flush (partitions revoked), never instead of one.
* The caches are bounded: :meth:`evict` (called after every flush) forgets
  clean sessions that ended, then the least recently touched clean ones above
  ``max_sessions``.  A dirty session is never evicted, nor one with a value
  *in flight*; an evicted one is read back from its table on its next event.
* **In flight**: a value taken by :meth:`take_dirty` / :meth:`take_engines` is
  not in the table until the worker wrote it and called :meth:`written` (the
  worker awaits a producer flush in between).  Until then every load (an event,
  :meth:`adopt`) reads the in-flight value, never the older table value: reading
  the table there and flushing later would write the older value over the newer
  one (issue #15: sessions evicted in that gap went backwards).  A flush that
  fails hands its values back with :meth:`untake` (dirty again), so a later flush
  writes them: a failed flush never loses state.
* **Sessions wait** (:meth:`EventProcessor.plan_engines`): a session whose engine
  is dirty may stay dirty over several commits, its counters, budget and minutes
  with it; the commit then holds its partition's offset back to the first event
  the session has not written, so a crash redelivers every event a stored value
  lacks.  A session's counters are never taken after its engine (they carry its
  pattern tallies).
* An event whose ``seq`` a value already covers changes nothing in it, but
  marks it dirty: after a crash the local store can be ahead of the changelog
  (the flush writes the store first), and a redelivery is the moment to write
  the value to the changelog again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from streams.core.engine import EngineOutput, SessionEngine, SessionState
from streams.core.events import TraceEvent
from streams.core.frozen import quick_init
from streams.core.jsonl import event_to_json
from streams.core.statecodec import EncodeMemo, decode_state, encode_state
from streams.errors import InvalidEventError, StateDecodeError
from streams.worker.state import (
    BudgetState,
    MinuteCounts,
    SessionCounters,
    SessionWork,
    canonical_text,
    minute_key,
    minute_start,
)

if TYPE_CHECKING:
    from streams.core.assessment import CurrentAssessment
    from streams.core.config import EngineConfig

TableName = Literal["sessions", "budgets", "minutes", "engines"]


class BytesTable(Protocol):
    """The part of a Faust table (or a dict) the processor uses.

    Keys are **bytes** (UTF-8 of the session id / minute key): Faust's memory
    store does not serialize keys, and after a changelog recovery it holds the
    raw ``bytes`` keys, so a ``str`` key written live would never match them.
    """

    def get(self, key: bytes, /) -> bytes | None: ...

    def __setitem__(self, key: bytes, value: bytes, /) -> None: ...


@quick_init
@dataclass(frozen=True, slots=True)
class TableWrite:
    """One encoded value to write to ``table`` in ``partition`` (store + changelog)."""

    table: TableName
    partition: int | None
    key: bytes
    value: bytes


@quick_init
@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A dirty value taken by :meth:`EventProcessor.take_dirty`, to be encoded."""

    table: TableName
    partition: int | None
    key: bytes
    value: SessionCounters | BudgetState | MinuteCounts | SessionState
    #: The session the value belongs to (a minute key is ``<session_id>@<minute>``).
    session_id: str = ""
    #: The session's codec memo (engine states): the next flush re-writes only
    #: what changed (``streams.core.statecodec.EncodeMemo``).
    memo: EncodeMemo | None = None

    def encode(self) -> TableWrite:
        v = self.value
        if isinstance(v, SessionState):
            data = encode_state(v, compress=True, memo=self.memo)
        else:
            data = v.encode()
        return TableWrite(self.table, self.partition, self.key, data)


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """What :meth:`EventProcessor.plan_engines` decided for one commit."""

    #: sessions whose engine the commit takes (with their counters)
    due: tuple[str, ...]
    #: events partition -> the lowest offset a waiting engine has not written: the
    #: commit of that partition goes no further
    hold: dict[int, int]
    #: the sessions whose engine waits: their counters, budget and minutes wait too
    #: (``take_dirty(waiting=...)``)
    waiting_ids: frozenset[str] = frozenset()

    @property
    def waiting(self) -> int:
        """How many changed sessions wait (not due)."""
        return len(self.waiting_ids)


@quick_init
@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one event did: ``applied`` is False for an already-applied seq."""

    applied: bool
    #: The session's working counters, live: later events change them (``freeze()``
    #: for a value as of now).  Not a frozen value, which would cost a copy per event.
    session: SessionWork
    budget_written: bool
    minute_written: bool
    #: The core engine's output (patterns fired, new assessment); None without engine table.
    engine: EngineOutput | None = None


@dataclass(frozen=True, slots=True)
class Lineage:
    """What an assessment record needs from a session's events besides the engine."""

    session_id: str
    parent_session_id: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class TimerAssessment:
    """An assessment ``SessionEngine.on_timer`` made for a quiet session."""

    lineage: Lineage
    assessment: CurrentAssessment


_V = TypeVar("_V")
_Value = SessionCounters | BudgetState | MinuteCounts | SessionState


class EventProcessor:
    """Applies events to the session, budget, per-minute and engine values exactly once.

    With an ``engines`` table the core :class:`~streams.core.engine.SessionEngine`
    runs first: it validates the event and raises
    :class:`~streams.errors.InvalidEventError` *before any value changed*, so
    the caller can dead-letter the event and carry on.
    """

    def __init__(
        self,
        sessions: BytesTable,
        budgets: BytesTable,
        minutes: BytesTable,
        engines: BytesTable | None = None,
        engine_config: EngineConfig | None = None,
        *,
        max_sessions: int = 10_000,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions={max_sessions}: keep at least one session in memory")
        self.max_sessions = max_sessions
        #: session ids, least recently touched first (re-inserted on every event)
        self._recency: dict[str, None] = {}
        self.evicted = 0
        self.sessions = sessions
        self.budgets = budgets
        self.minutes = minutes
        self.engines = engines
        self.engine_config = engine_config
        self._engines: dict[str, SessionEngine] = {}
        #: session -> the codec memo of its engine state (kept and dropped with the engine)
        self._memos: dict[str, EncodeMemo] = {}
        #: session id -> its counters, changed in place; frozen only when taken for a flush
        self._sessions: dict[str, SessionWork] = {}
        self._budgets: dict[str, BudgetState] = {}
        #: Only the latest touched minute of each session is cached (events are mostly in order).
        self._minutes: dict[str, MinuteCounts] = {}
        self._lineage: dict[str, Lineage] = {}
        #: session id -> partition of its events (= of its table rows, co-partitioned)
        self._partition: dict[str, int | None] = {}
        self._dirty_sessions: set[str] = set()
        self._dirty_budgets: set[str] = set()
        #: session id -> when its engine became dirty: the time given to the
        #: :meth:`plan_engines` call before that (``-inf`` for a change to flush at the
        #: next commit); insertion-ordered, like a set
        self._dirty_engines: dict[str, float] = {}
        #: session id -> (partition, offset) of the first event applied to its engine
        #: since it was last taken (offset None: not given, so the engine cannot wait)
        self._engine_first: dict[str, tuple[int | None, int | None]] = {}
        #: engines created new (nothing stored yet) and not yet taken
        self._new_engines: set[str] = set()
        #: the ``now_s`` of the last :meth:`plan_engines` (stamps newly dirty engines)
        self._plan_s = float("-inf")
        #: the fraction of an engine flush :meth:`plan_engines` carries to the next
        #: plan (a few sessions over many commits still get their share)
        self._flush_credit = 0.0
        #: minute key -> (session id, value): older minutes must survive until the flush
        self._dirty_minutes: dict[str, tuple[str, MinuteCounts]] = {}
        #: (table, key) -> (session id, value) taken for a flush and not yet written
        self._inflight: dict[tuple[TableName, bytes], tuple[str, _Value]] = {}
        self.applied = 0
        self.duplicates = 0
        self.flushed_values = 0

    # ------------------------------------------------------------------ caches

    @property
    def dirty(self) -> int:
        """How many values are changed in memory and not yet collected."""
        return (
            len(self._dirty_sessions)
            + len(self._dirty_budgets)
            + len(self._dirty_engines)
            + len(self._dirty_minutes)
        )

    def drop_caches(self) -> None:
        """Forget decoded values; the next event of each session re-reads its table.

        Raises ``RuntimeError`` if anything is dirty: dropping it would lose state
        whose offsets may already be committed.
        """
        if self.dirty or self._inflight:
            raise RuntimeError(
                f"drop_caches with {self.dirty} unflushed and {len(self._inflight)} "
                "taken-but-unwritten value(s): flush and write them (written) first"
            )
        self._sessions.clear()
        self._budgets.clear()
        self._minutes.clear()
        self._engines.clear()
        self._memos.clear()
        self._lineage.clear()
        self._partition.clear()
        self._recency.clear()
        self._new_engines.clear()

    def evict(self) -> int:
        """Forget clean sessions: every ended one, then the least recently touched
        beyond ``max_sessions``.  Returns how many were forgotten.

        Only sessions with nothing dirty (nothing to flush) and nothing in flight
        (taken but not yet written) go; their values are in the tables and are read
        back on the session's next event.  Ended sessions
        are not walked by the timer anyway.
        """
        dirty = (
            self._dirty_sessions
            | self._dirty_budgets
            | self._dirty_engines.keys()
            | {sid for sid, _ in self._dirty_minutes.values()}
            | {sid for sid, _ in self._inflight.values()}
        )
        ended = [
            sid
            for sid in self._recency
            if sid not in dirty and (c := self._sessions.get(sid)) is not None and c.ended
        ]
        for sid in ended:
            self._forget(sid)
        over = len(self._recency) - self.max_sessions
        if over > 0:
            oldest = [sid for sid in self._recency if sid not in dirty][:over]
            for sid in oldest:
                self._forget(sid)
            ended += oldest
        self.evicted += len(ended)
        return len(ended)

    def _forget(self, sid: str) -> None:
        for cache in (
            self._sessions,
            self._budgets,
            self._minutes,
            self._engines,
            self._memos,
            self._lineage,
            self._partition,
            self._recency,
        ):
            cache.pop(sid, None)
        self._new_engines.discard(sid)

    def sessions_in_memory(self) -> tuple[str, ...]:
        return tuple(self._sessions)

    def counters(self, session_id: str) -> SessionCounters | None:
        """The in-memory (possibly not yet flushed) counters of a session, if cached."""
        work = self._sessions.get(session_id)
        return None if work is None else work.freeze()

    def _load(
        self,
        name: TableName,
        cache: dict[str, _V],
        table: BytesTable,
        key: str,
        decode: Callable[[bytes], _V],
        make: Callable[[], _V],
    ) -> _V:
        cached = cache.get(key)
        if cached is not None:
            return cached
        bkey = key.encode()
        held = self._inflight.get((name, bkey))
        value: _V
        if held is not None:  # taken, not yet in the table: the table is older
            # _inflight[(name, key)] holds a value of table `name`, i.e. of this cache's type
            value = cast(_V, held[1])
        else:
            raw = table.get(bkey)
            value = make() if raw is None else decode(raw)
        cache[key] = value
        return value

    def _load_session(self, sid: str) -> SessionWork:
        """The session's counters to work on: the in-flight value, else the table's
        (see the invariants), else new; cached in ``_sessions``."""
        bkey = sid.encode()
        held = self._inflight.get(("sessions", bkey))
        value: SessionCounters
        if held is not None:  # taken, not yet in the table: the table is older
            assert isinstance(held[1], SessionCounters)
            value = held[1]
        else:
            raw = self.sessions.get(bkey)
            value = SessionCounters(session_id=sid) if raw is None else SessionCounters.decode(raw)
        work = self._sessions[sid] = SessionWork(value)
        return work

    def _stored_engine_state(self, sid: str) -> SessionState | None:
        """The engine state a load must start from: the in-flight snapshot, else the table's.

        An in-flight snapshot is copied through the codec (rare: a session evicted or
        dropped while its value was in flight) so the new engine shares nothing with
        the value still being encoded.
        """
        assert self.engines is not None
        held = self._inflight.get(("engines", sid.encode()))
        if held is not None:
            assert isinstance(held[1], SessionState)
            raw: bytes | None = encode_state(held[1])
        else:
            raw = self.engines.get(sid.encode())
        if raw is None:
            return None
        state = decode_state(raw)
        if not isinstance(state, SessionState):
            raise StateDecodeError(
                f"engines table, session {sid!r}: decoded {type(state).__name__}, "
                "not a SessionState (a value written by another program?)"
            )
        return state

    def _engine(self, sid: str) -> SessionEngine:
        assert self.engines is not None
        engine = self._engines.get(sid)
        if engine is None:
            cfg = self.engine_config
            if cfg is None:  # built once: EngineConfig() is not cheap to build
                from streams.core.config import EngineConfig

                cfg = self.engine_config = EngineConfig()
            state = self._stored_engine_state(sid)
            if state is None:
                engine = SessionEngine.create(sid, cfg)
                self._new_engines.add(sid)  # flushed at the next commit (plan_engines)
            else:
                engine = SessionEngine.build(cfg, state)
            self._engines[sid] = engine
            self._recency.setdefault(sid, None)  # evictable like the other caches
        return engine

    def engine_state(self, session_id: str) -> SessionState:
        """The session's engine state right now (e.g. for a snapshot record)."""
        return self._engine(session_id).snapshot()

    def held_assessment(self, session_id: str) -> tuple[bool, CurrentAssessment | None]:
        """``(True, current)`` when the session's engine is in memory (its current
        assessment, possibly newer than the engines table: engines wait for their
        flush, see :meth:`plan_engines`), else ``(False, None)``; never loads one."""
        engine = self._engines.get(session_id)
        if engine is None:
            return False, None
        return True, engine.current

    def held_budget(self, session_id: str) -> BudgetState | None:
        """The session's budget value if it is in memory (possibly newer than the
        budgets table), else None; never loads one."""
        return self._budgets.get(session_id)

    def held_minutes(self, session_id: str) -> list[MinuteCounts]:
        """The session's minute values newer than the minutes table: taken and not yet
        written, dirty, and the latest one in memory (a later one of the same minute
        replaces an earlier); never loads one.  A view merges them over the table's."""
        by_start: dict[int, MinuteCounts] = {}
        for (table, _), (sid, value) in self._inflight.items():
            if table == "minutes" and sid == session_id:
                assert isinstance(value, MinuteCounts)
                by_start[value.minute_start_ms] = value
        for sid, value in self._dirty_minutes.values():
            if sid == session_id:
                by_start[value.minute_start_ms] = value
        latest = self._minutes.get(session_id)
        if latest is not None:
            by_start[latest.minute_start_ms] = latest
        return [by_start[k] for k in sorted(by_start)]

    def held_state(self, session_id: str) -> SessionState | None:
        """The state of the session's engine if it is in memory (a snapshot, possibly
        newer than the engines table), else None; never loads one."""
        engine = self._engines.get(session_id)
        return None if engine is None else engine.snapshot()

    def current_assessment(self, session_id: str) -> CurrentAssessment | None:
        """The session engine's current assessment (e.g. after a ``restore``)."""
        return self._engine(session_id).current

    # ------------------------------------------------------------------- apply

    def apply(
        self, event: TraceEvent, partition: int | None = None, offset: int | None = None
    ) -> ApplyResult:
        """Apply ``event`` (from ``partition`` of the source topic, at ``offset``) in memory.

        ``offset`` lets the session's values wait for a later commit's flush
        (:meth:`plan_engines` holds that partition's offset commit back to it); a
        session changed by an event without one is flushed at the next commit.

        Raises :class:`~streams.errors.InvalidEventError` before any value
        changed if the event is invalid, including one whose content cannot be
        stored (see :func:`check_storable`): the caller dead-letters it.
        """
        event_json, event_text = storable_json(event)
        sid = event.session_id
        engine_out: EngineOutput | None = None
        if self.engines is not None:
            # may raise InvalidEventError: nothing changed yet
            engine_out = self._engine(sid).on_event(event)
            # applied, or a redelivery (see the invariants)
            self._dirty_engines.setdefault(sid, self._plan_s)
            # the first event since the engine was taken (a timer change records none)
            self._engine_first.setdefault(sid, (partition, offset))
        self._partition[sid] = partition
        recency = self._recency
        if sid in recency:
            del recency[sid]
        recency[sid] = None
        parent = event.parent_session_id
        agent = event.agent_id
        lineage = self._lineage.get(sid)
        if lineage is None or (
            (parent is not None or agent is not None)
            and (lineage.parent_session_id != parent or lineage.agent_id != agent)
        ):  # a new value only when it changes (most events repeat the last one)
            self._lineage[sid] = Lineage(sid, parent, agent)
        session = self._sessions.get(sid) or self._load_session(sid)
        applied = session.apply(event, event_json, event_text)
        if applied and engine_out is not None and engine_out.patterns:
            session.add_patterns(str(d.pattern.pattern_type) for d in engine_out.patterns)
        self._dirty_sessions.add(sid)
        if applied:
            self.applied += 1
        else:
            self.duplicates += 1

        budget_written = False
        if event.type in ("budget", "model_step"):
            budget = self._budgets.get(sid) or self._load(
                "budgets",
                self._budgets,
                self.budgets,
                sid,
                BudgetState.decode,
                lambda: BudgetState(session_id=sid),
            )
            new_budget = budget.apply(event)
            if new_budget is not None:
                self._budgets[sid] = new_budget
                self._dirty_budgets.add(sid)
                budget_written = True
            elif event.seq <= budget.last_seq:
                self._dirty_budgets.add(sid)  # redelivery: see the invariants
                budget_written = True

        minute_written = False
        if MinuteCounts.counts(event):
            mkey = minute_key(sid, event.timestamp_ms)
            start = minute_start(event.timestamp_ms)
            cached = self._minutes.get(sid)
            if cached is None or cached.minute_start_ms != start:
                pending = self._dirty_minutes.get(mkey)
                held = self._inflight.get(("minutes", mkey.encode()))
                if pending is not None:
                    cached = pending[1]
                elif held is not None:  # taken, not yet written: newer than the table
                    assert isinstance(held[1], MinuteCounts)
                    cached = held[1]
                else:
                    raw = self.minutes.get(mkey.encode())
                    cached = (
                        MinuteCounts(session_id=sid, minute_start_ms=start)
                        if raw is None
                        else MinuteCounts.decode(raw)
                    )
            new_minute = cached.apply(event)
            value = new_minute or cached
            self._minutes[sid] = value
            if new_minute is not None or event.seq <= cached.last_seq:
                self._dirty_minutes[mkey] = (sid, value)
                minute_written = True

        return ApplyResult(
            applied=applied,
            session=session,
            budget_written=budget_written,
            minute_written=minute_written,
            engine=engine_out,
        )

    # ------------------------------------------------------------------- timer

    def adopt(self, session_id: str, partition: int | None) -> bool:
        """Load a quiet session from the tables so the timer walks it.

        After a restart or a rebalance a session is in memory only once one of its
        events arrives; one waiting on a slow tool sends none, so its deadline would
        never be reported.  The worker adopts its partitions' open sessions after
        table recovery.  Returns False (and loads nothing) for a session already in
        memory, unknown to the tables, or ended.
        """
        if self.engines is None or session_id in self._engines:
            return False
        held = self._inflight.get(("sessions", session_id.encode()))
        work = self._sessions.get(session_id)
        counters = None if work is None else work.freeze()
        if counters is None and held is not None:
            assert isinstance(held[1], SessionCounters)
            counters = held[1]
        if counters is None:
            raw = self.sessions.get(session_id.encode())
            if raw is None:
                return False
            counters = SessionCounters.decode(raw)
        if counters.ended or (
            ("engines", session_id.encode()) not in self._inflight
            and self.engines.get(session_id.encode()) is None
        ):
            return False
        if work is None:
            self._sessions[session_id] = SessionWork(counters)
        self._partition[session_id] = partition
        self._engine(session_id)
        return True

    def on_timer(self, now_ms: int) -> list[TimerAssessment]:
        """Run ``SessionEngine.on_timer(now_ms)`` for every session in memory.

        Sessions that ended (``session_end`` applied) are skipped.  Each session
        that produced an assessment becomes dirty (its engine state changed).
        """
        if self.engines is None:
            return []
        out: list[TimerAssessment] = []
        for sid, engine in self._engines.items():
            counters = self._sessions.get(sid)
            if counters is not None and counters.ended:
                continue
            current = engine.on_timer(now_ms)
            if current is None:
                continue
            # no event, so no offset to hold back: a timer-made change waits like any
            # (lost in a crash, the timer makes it again)
            self._dirty_engines.setdefault(sid, self._plan_s)
            if current.assessments:
                out.append(TimerAssessment(self._lineage.get(sid, Lineage(sid)), current))
        return out

    # ------------------------------------------------------------------- flush

    def plan_engines(self, now_s: float, wait_s: float) -> EnginePlan:
        """Which dirty engines a commit at ``now_s`` flushes, and how far each events
        partition's offset commit may go while the other engines wait.

        Why: an engine state is tens of KB to snapshot and encode, the counters a few
        hundred bytes; flushing each session's engine at every 1 s commit was most of
        the worker's CPU at one event per session per second (docs/faust-notes.md
        "Measured costs").  So an engine waits about ``wait_s`` (``--engine-flush-
        interval``) and covers the events of several commits in one write, and the
        session's counters, budget and minutes wait with it (``EnginePlan.waiting_ids``
        for :meth:`take_dirty`): writing those at every commit still cost a value,
        a store write and a changelog record per table per session-second, while
        the views read the values in memory anyway.

        Which engines are *due*, oldest change first: as many as the share of
        ``wait_s`` elapsed since the last plan makes of all dirty engines (fractions
        carried to the next plan; at a 1 s commit and 5 s, a fifth of them per
        commit: each engine waits about
        ``wait_s``, and the flushes are spread over the commits instead of all
        sessions' engines falling due at one commit, which they did, 1,000 at once,
        when sessions with one event per second all got dirty in the same second);
        besides those, every engine dirty for ``2 * wait_s`` or more (``now_s`` is
        any monotonic clock; a change is stamped with the ``now_s`` of the plan
        before it), one of which nothing is stored yet (a new session: the views and
        :meth:`adopt` read the table), whose session ended, that :meth:`untake`
        handed back, or that an event without ``partition`` and ``offset`` changed
        (nothing to hold back).  ``wait_s`` 0 makes every dirty engine due.

        Invariant (never lose an event): ``hold[p]`` is the lowest offset of an event
        in partition ``p`` that changed a waiting session since its engine was last
        taken (every event changes the engine, so this is also the first event its
        waiting counters, budget and minutes lack).  The worker commits no offset
        above it, so after a crash every event a stored value lacks is delivered
        again and applied to it (each table value checks ``seq`` on its own).  The
        counters are never taken *after* the engine: an engine ahead of its counters
        would skip a redelivered event and its patterns would never be tallied in
        the counters (see :meth:`take_dirty`).
        """
        dirty = self._dirty_engines
        if wait_s <= 0:
            budget = len(dirty)
        else:
            elapsed = min(wait_s, max(0.0, now_s - self._plan_s))
            credit = self._flush_credit + len(dirty) * elapsed / wait_s
            budget = min(len(dirty), int(credit + 1e-9))
            self._flush_credit = min(1.0, max(0.0, credit - budget))
        self._plan_s = now_s
        cutoff = now_s - 2 * wait_s
        due: list[str] = []
        waiting: list[str] = []
        hold: dict[int, int] = {}
        first = self._engine_first
        new = self._new_engines
        sessions = self._sessions
        # insertion order is the order engines became dirty: oldest first
        for sid, since in dirty.items():
            at = first.get(sid)
            if budget > 0:
                budget -= 1
                due.append(sid)
            elif (
                since <= cutoff
                or sid in new
                or (at is not None and (at[0] is None or at[1] is None))
                or ((c := sessions.get(sid)) is not None and c.ended)
            ):
                due.append(sid)
            else:
                waiting.append(sid)
                if at is not None:
                    partition, offset = at
                    assert partition is not None and offset is not None
                    held = hold.get(partition)
                    if held is None or offset < held:
                        hold[partition] = offset
        return EnginePlan(tuple(due), hold, frozenset(waiting))

    def take_dirty(
        self,
        *,
        engines: bool = True,
        later: Collection[str] | None = None,
        waiting: Collection[str] = (),
    ) -> list[PendingWrite]:
        """Every dirty value *as of now* (immutable, not yet encoded); clears the dirty sets.

        Cheap: the budgets and minutes are frozen values already, the counters are
        frozen here (``SessionWork.freeze``: the only copy of them per flush, not per
        event), and an engine snapshot is a tree of frozen values (no encoding), so the worker takes
        this under the batch lock and encodes afterwards in chunks, letting batches
        run in between (``PendingWrite.encode`` gives the bytes of the value at the
        time of this call, whatever the session does next).

        ``engines=False`` takes no engine and leaves the counters of the sessions in
        ``later`` (default: every dirty engine's) dirty too: the worker takes those
        engines a few at a time with :meth:`take_engines`, which takes their counters
        with them, because snapshotting them all at once held the batch lock too long
        (docs/faust-notes.md "Measured costs behind the worker's code").  The
        counters of a dirty engine *not* in ``later`` are taken here, unless the
        session is in ``waiting`` (``EnginePlan.waiting_ids``): then its counters,
        budget and minutes stay dirty and wait with its engine (:meth:`plan_engines`).
        """
        part = self._partition.get
        pending: list[PendingWrite] = []
        # A session's counters carry the engine's pattern tallies: an engine taken
        # later than this call (a later slice of the same commit) may cover more
        # events, so it takes its counters with it (take_engines) and the counters
        # are never behind it.
        deferred: Collection[str]
        wait: Collection[str]
        if engines:
            deferred = wait = frozenset()
        else:
            wait = waiting if isinstance(waiting, set | frozenset) else frozenset(waiting)
            # later None: every dirty engine's counters wait for take_engines
            deferred = self._dirty_engines.keys() if later is None else set(later) | wait
        taken = [sid for sid in self._dirty_sessions if sid not in deferred]
        for sid in taken:
            s = self._sessions.get(sid)
            if s is not None:
                pending.append(PendingWrite("sessions", part(sid), sid.encode(), s.freeze(), sid))
        self._dirty_sessions.difference_update(taken)
        budgets = [sid for sid in self._dirty_budgets if sid not in wait]
        for sid in budgets:
            b = self._budgets.get(sid)
            if b is not None:
                pending.append(PendingWrite("budgets", part(sid), sid.encode(), b, sid))
        self._dirty_budgets.difference_update(budgets)
        minutes = [(k, sm) for k, sm in self._dirty_minutes.items() if sm[0] not in wait]
        for mkey, (sid, m) in minutes:
            pending.append(PendingWrite("minutes", part(sid), mkey.encode(), m, sid))
        if len(minutes) == len(self._dirty_minutes):
            self._dirty_minutes.clear()
        else:
            for mkey, _ in minutes:
                del self._dirty_minutes[mkey]
        self.flushed_values += len(pending)
        self._hold(pending)
        if engines:
            pending += self.take_engines(list(self._dirty_engines))
        return pending

    def dirty_engine_ids(self) -> list[str]:
        """The sessions whose engine changed since it was last taken."""
        return list(self._dirty_engines)

    def take_engines(self, session_ids: Iterable[str]) -> list[PendingWrite]:
        """Snapshots of those of ``session_ids`` whose engine is still dirty, as of now,
        with their counters if dirty; each taken value is clean until its next change.

        A session taken later than the rest of a flush may cover more events than
        the offsets the flush commits; that is safe, as after a crash any value may
        be ahead of the committed offsets (see the invariants: a redelivered event
        changes nothing in a value that covers its seq).
        """
        part = self._partition.get
        pending: list[PendingWrite] = []
        dirty = self._dirty_engines
        for sid in session_ids:
            if dirty.pop(sid, None) is None:
                continue
            self._engine_first.pop(sid, None)
            self._new_engines.discard(sid)
            # The counters before the engine: values are written in this order, and a
            # worker killed between the two must not leave the engine ahead of the
            # counters.  Else, after the restart, the engine skips the redelivered
            # events (its seq covers them) and fires nothing, while the counters apply
            # them: their pattern tallies (patterns_fired) missed those events' patterns
            # for good (seen in a chaos run, 2026-11-29).  Counters ahead of the
            # engine are safe: the engine fires again (identical outputs repeated) and
            # the counters, which counted those patterns already, skip the events.
            if sid in self._dirty_sessions:
                self._dirty_sessions.discard(sid)
                c = self._sessions.get(sid)
                if c is not None:
                    pending.append(
                        PendingWrite("sessions", part(sid), sid.encode(), c.freeze(), sid)
                    )
            e = self._engines.get(sid)
            if e is not None:
                memo = self._memos.get(sid)
                if memo is None:
                    memo = self._memos[sid] = EncodeMemo()
                pending.append(
                    PendingWrite("engines", part(sid), sid.encode(), e.snapshot(), sid, memo)
                )
        self.flushed_values += len(pending)
        self._hold(pending)
        return pending

    def _hold(self, pending: Iterable[PendingWrite]) -> None:
        inflight = self._inflight
        for p in pending:
            inflight[(p.table, p.key)] = (p.session_id, p.value)

    @property
    def in_flight(self) -> int:
        """How many taken values are not yet confirmed written (:meth:`written`)."""
        return len(self._inflight)

    def written(self, pending: Iterable[PendingWrite]) -> None:
        """The worker wrote ``pending`` to the tables: loads may read them there now.

        A value taken again since (a newer one in flight) stays in flight.
        """
        inflight = self._inflight
        for p in pending:
            k = (p.table, p.key)
            held = inflight.get(k)
            if held is not None and held[1] is p.value:
                del inflight[k]

    def untake(self, pending: Iterable[PendingWrite]) -> None:
        """A flush of ``pending`` failed: make the values dirty again (the next flush
        writes them, or a newer value of the same key), and out of flight.

        The in-memory caches still hold each value or a newer one (a session with a
        value in flight is never evicted), except a minute the session moved on from,
        which is dirty again here with its taken value unless a newer one is.
        """
        inflight = self._inflight
        for p in pending:
            sid = p.session_id
            if p.table == "sessions":
                if sid in self._sessions:
                    self._dirty_sessions.add(sid)
            elif p.table == "budgets":
                if sid in self._budgets:
                    self._dirty_budgets.add(sid)
            elif p.table == "engines":
                if sid in self._engines:
                    # never written: due at the next plan (no offset to hold back by)
                    self._dirty_engines[sid] = float("-inf")
            else:
                assert isinstance(p.value, MinuteCounts)
                self._dirty_minutes.setdefault(p.key.decode(), (sid, p.value))
            k = (p.table, p.key)
            held = inflight.get(k)
            if held is not None and held[1] is p.value:
                del inflight[k]

    def collect(self) -> list[TableWrite]:
        """Encode every dirty value (once) and clear the dirty sets.

        For callers that write the values before anything else touches the
        processor (no ``await`` in between): they are not kept in flight.  The
        worker's commit, which awaits between take and write, uses
        :meth:`take_dirty` + :meth:`written` instead.
        """
        pending = self.take_dirty()
        try:
            return [p.encode() for p in pending]
        except BaseException:
            self.untake(pending)
            raise
        finally:
            self.written(pending)

    def flush(self) -> int:
        """Take, encode and write into the tables given to the constructor (dict tables,
        unit tests, offline use); the Faust worker writes partition-explicitly instead."""
        pending = self.take_dirty()
        try:
            writes = [p.encode() for p in pending]
        except BaseException:
            self.untake(pending)
            raise
        write_all(writes, self._tables())
        self.written(pending)
        return len(writes)

    def _tables(self) -> dict[TableName, BytesTable]:
        tables: dict[TableName, BytesTable] = {
            "sessions": self.sessions,
            "budgets": self.budgets,
            "minutes": self.minutes,
        }
        if self.engines is not None:
            tables["engines"] = self.engines
        return tables


def check_storable(event: TraceEvent) -> dict[str, Any]:
    """Raise ``InvalidEventError`` if ``event`` cannot be part of a table value.

    Returns ``event_to_json(event)``, the form the session counters keep (their
    ``recent`` window), so the event is turned into JSON once per apply.
    :func:`storable_json` also returns its canonical text.
    """
    return storable_json(event)[0]


def storable_json(event: TraceEvent) -> tuple[dict[str, Any], str]:
    """``event_to_json(event)`` and its canonical JSON text (``canonical_bytes`` of it,
    as ``str``), or ``InvalidEventError`` if ``event`` cannot be part of a table value.

    The text is made anyway to check the event (below); the session counters keep it
    so their flush writes it instead of dumping the entry again.

    Every table value is strict JSON (``streams.worker.state.canonical_bytes``) or
    the state codec, which both refuse NaN/Infinity, lone surrogates and
    over-deep nesting.  An event carrying one (``{"x": NaN}`` in ``input_json``
    passed the decoder) used to be applied and then crash the worker at the
    flush, for every session in it (issue #15).  Checked at apply time, before
    anything changed, it is dead-lettered with this reason instead: invariant,
    **whatever the processor applied can be flushed**.
    """
    try:
        as_json = event_to_json(event)
        text = canonical_text(as_json)
        text.encode("utf-8")  # a lone surrogate cannot be stored
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidEventError(
            "input/output/metadata",
            f"cannot be stored as strict JSON: {exc} (send finite numbers, no NaN/Infinity, "
            "valid Unicode text and nesting the decoder accepts)",
        ) from exc
    return as_json, text


def write_all(writes: Iterable[TableWrite], tables: dict[TableName, BytesTable]) -> None:
    for w in writes:
        tables[w.table][w.key] = w.value


__all__ = [
    "ApplyResult",
    "BytesTable",
    "EnginePlan",
    "EventProcessor",
    "Lineage",
    "PendingWrite",
    "TableWrite",
    "TimerAssessment",
    "check_storable",
    "storable_json",
    "write_all",
]
