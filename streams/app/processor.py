"""Apply one event to the worker's three tables (pure: the tables are mappings).

The Faust agent is a thin shell around :class:`EventProcessor` so the logic can
be unit-tested with plain dicts and reused by anything that owns key/value
tables.  Why caches: decoding a session's state bytes on every event would cost
more than applying the event; the cache holds the decoded value, while every
applied event still *writes* the table, so the changelog stays the truth.

Invariants:

* The processor is the only writer of the tables it is given (one Faust agent,
  concurrency 1); otherwise the caches would go stale.
* :meth:`EventProcessor.drop_caches` must be called whenever partitions are
  revoked: after a rebalance the table (recovered from its changelog) is the
  truth, not the cache.
* An event whose ``seq`` a table value already covers changes nothing in it;
  its current value is written again (same bytes), because after a crash the
  local store can be ahead of the changelog and a redelivery is the moment to
  repair that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from streams.app.state import BudgetState, MinuteCounts, SessionCounters, minute_key, minute_start
from streams.core.codec import decode_state, encode_state
from streams.core.engine import EngineOutput, SessionEngine, SessionState
from streams.core.events import TraceEvent

if TYPE_CHECKING:
    from streams.core.config import EngineConfig


class BytesTable(Protocol):
    """The part of a Faust table (or a dict) the processor uses.

    Keys are **bytes** (UTF-8 of the session id / minute key): Faust's memory
    store does not serialize keys, and after a changelog recovery it holds the
    raw ``bytes`` keys, so a ``str`` key written live would never match them.
    """

    def get(self, key: bytes, /) -> bytes | None: ...

    def __setitem__(self, key: bytes, value: bytes, /) -> None: ...


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one event did: ``applied`` is False for an already-applied seq."""

    applied: bool
    session: SessionCounters
    budget_written: bool
    minute_written: bool
    #: The core engine's output (patterns fired, new assessment); None without engine table.
    engine: EngineOutput | None = None


_V = TypeVar("_V")


class EventProcessor:
    """Applies events to the session, budget, per-minute and engine tables exactly once.

    With an ``engines`` table the core :class:`~streams.core.engine.SessionEngine`
    runs first: it validates the event and raises
    :class:`~streams.core.errors.InvalidEventError` *before any table changed*, so
    the caller can dead-letter the event and carry on.
    """

    def __init__(
        self,
        sessions: BytesTable,
        budgets: BytesTable,
        minutes: BytesTable,
        engines: BytesTable | None = None,
        engine_config: EngineConfig | None = None,
    ) -> None:
        self.sessions = sessions
        self.budgets = budgets
        self.minutes = minutes
        self.engines = engines
        self.engine_config = engine_config
        #: session id -> (engine, bytes of its last written state)
        self._engines: dict[str, tuple[SessionEngine, bytes | None]] = {}
        self._sessions: dict[str, SessionCounters] = {}
        self._budgets: dict[str, BudgetState] = {}
        #: Only the latest touched minute of each session is cached (events are mostly in order).
        self._minutes: dict[str, MinuteCounts] = {}
        self.applied = 0
        self.duplicates = 0

    def drop_caches(self) -> None:
        """Forget decoded values; the next event of each session re-reads its table."""
        self._sessions.clear()
        self._budgets.clear()
        self._minutes.clear()
        self._engines.clear()

    @staticmethod
    def _load(
        cache: dict[str, _V],
        table: BytesTable,
        key: str,
        decode: Callable[[bytes], _V],
        make: Callable[[], _V],
    ) -> _V:
        value = cache.get(key)
        if value is None:
            raw = table.get(key.encode())
            value = make() if raw is None else decode(raw)
            cache[key] = value
        return value

    def _engine(self, sid: str) -> tuple[SessionEngine, bytes | None]:
        assert self.engines is not None
        cached = self._engines.get(sid)
        if cached is None:
            raw = self.engines.get(sid.encode())
            if raw is None:
                engine = SessionEngine.create(sid, self.engine_config)
            else:
                cfg = self.engine_config
                if cfg is None:
                    from streams.core.config import EngineConfig

                    cfg = self.engine_config = EngineConfig()
                engine = SessionEngine.build(cfg, decode_state(raw))
            cached = (engine, raw)
            self._engines[sid] = cached
        return cached

    def engine_state(self, session_id: str) -> SessionState:
        """The session's engine state right now (e.g. for a snapshot record)."""
        return self._engine(session_id)[0].snapshot()

    def _run_engine(self, event: TraceEvent) -> EngineOutput | None:
        if self.engines is None:
            return None
        sid = event.session_id
        engine, last = self._engine(sid)
        out = engine.on_event(event)  # may raise InvalidEventError: nothing changed yet
        if out.applied:
            data = encode_state(engine.snapshot())
            self.engines[sid.encode()] = data
            self._engines[sid] = (engine, data)
        elif last is not None:
            self.engines[sid.encode()] = last  # redelivery: see the session case below
        return out

    def apply(self, event: TraceEvent) -> ApplyResult:
        sid = event.session_id
        tkey = sid.encode()
        engine_out = self._run_engine(event)
        session = self._load(
            self._sessions,
            self.sessions,
            sid,
            SessionCounters.decode,
            lambda: SessionCounters(session_id=sid),
        )
        new_session = session.apply(event)
        if new_session is not None and engine_out is not None and engine_out.patterns:
            new_session = new_session.with_patterns(
                tuple(str(d.pattern.pattern_type) for d in engine_out.patterns)
            )
        if new_session is not None:
            self.sessions[tkey] = new_session.encode()
            self._sessions[sid] = new_session
            self.applied += 1
        else:
            # Redelivered (its offset was never committed).  The local store may hold
            # this event's effect while its changelog write was lost with the crashed
            # process: re-write the current value so the changelog has it again.
            self.sessions[tkey] = session.encode()
            self.duplicates += 1

        budget_written = False
        if event.type in ("budget", "model_step"):
            budget = self._load(
                self._budgets,
                self.budgets,
                sid,
                BudgetState.decode,
                lambda: BudgetState(session_id=sid),
            )
            new_budget = budget.apply(event)
            if new_budget is not None:
                self.budgets[tkey] = new_budget.encode()
                self._budgets[sid] = new_budget
                budget_written = True
            elif event.seq <= budget.last_seq:
                self.budgets[tkey] = budget.encode()  # redelivery: see the session case
                budget_written = True

        minute_written = False
        if MinuteCounts.counts(event):
            key = minute_key(sid, event.timestamp_ms).encode()
            start = minute_start(event.timestamp_ms)
            cached = self._minutes.get(sid)
            if cached is None or cached.minute_start_ms != start:
                raw = self.minutes.get(key)
                cached = (
                    MinuteCounts(session_id=sid, minute_start_ms=start)
                    if raw is None
                    else MinuteCounts.decode(raw)
                )
            new_minute = cached.apply(event)
            self._minutes[sid] = new_minute or cached
            if new_minute is not None:
                self.minutes[key] = new_minute.encode()
                minute_written = True
            elif event.seq <= cached.last_seq:
                self.minutes[key] = cached.encode()  # redelivery: see the session case
                minute_written = True

        return ApplyResult(
            applied=new_session is not None,
            session=new_session or session,
            budget_written=budget_written,
            minute_written=minute_written,
            engine=engine_out,
        )


__all__ = ["ApplyResult", "BytesTable", "EventProcessor"]
