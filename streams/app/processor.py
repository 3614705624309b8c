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
from typing import Protocol, TypeVar

from streams.app.state import BudgetState, MinuteCounts, SessionCounters, minute_key, minute_start
from streams.core.events import TraceEvent


class BytesTable(Protocol):
    """The part of a Faust table (or a dict) the processor uses."""

    def get(self, key: str, /) -> bytes | None: ...

    def __setitem__(self, key: str, value: bytes, /) -> None: ...


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one event did: ``applied`` is False for an already-applied seq."""

    applied: bool
    session: SessionCounters
    budget_written: bool
    minute_written: bool


_V = TypeVar("_V")


class EventProcessor:
    """Applies events to the session, budget and per-minute tables exactly once."""

    def __init__(self, sessions: BytesTable, budgets: BytesTable, minutes: BytesTable) -> None:
        self.sessions = sessions
        self.budgets = budgets
        self.minutes = minutes
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
            raw = table.get(key)
            value = make() if raw is None else decode(raw)
            cache[key] = value
        return value

    def apply(self, event: TraceEvent) -> ApplyResult:
        sid = event.session_id
        session = self._load(
            self._sessions,
            self.sessions,
            sid,
            SessionCounters.decode,
            lambda: SessionCounters(session_id=sid),
        )
        new_session = session.apply(event)
        if new_session is not None:
            self.sessions[sid] = new_session.encode()
            self._sessions[sid] = new_session
            self.applied += 1
        else:
            # Redelivered (its offset was never committed).  The local store may hold
            # this event's effect while its changelog write was lost with the crashed
            # process: re-write the current value so the changelog has it again.
            self.sessions[sid] = session.encode()
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
                self.budgets[sid] = new_budget.encode()
                self._budgets[sid] = new_budget
                budget_written = True
            elif event.seq <= budget.last_seq:
                self.budgets[sid] = budget.encode()  # redelivery: see the session case
                budget_written = True

        minute_written = False
        if MinuteCounts.counts(event):
            key = minute_key(sid, event.timestamp_ms)
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
        )


__all__ = ["ApplyResult", "BytesTable", "EventProcessor"]
