"""AgentV's ``TraceSummary`` of a session: the compact record AgentV always persists.

Fields (AgentV's names in :meth:`TraceSummary.to_json`): ``eventCount``,
``toolNames`` (unique, sorted), ``toolCallsByName`` (tool → number of calls),
``errorCount``.

What counts, and why:

* **Events** are AgentV's five types only (``model_step``, ``tool_call``,
  ``tool_result``, ``message``, ``error``).  Our control events
  (``session_start``/``session_end``/``budget``/``snapshot``/``restore``) steer the
  observer and are not part of the trajectory; counting them would make the
  same run's ``eventCount`` differ between an AgentV trace and our import of it.
  AgentV itself counts every event of its trace (which only has the five types),
  so on AgentV input the numbers agree.
* **Tool calls** are ``tool_call`` events with a ``tool_name``, as in AgentV.
* **Errors** are ``error`` events (AgentV's definition) *plus* ``tool_result``
  events with ``is_error=True``.  AgentV represents a failed tool as an ``error``
  event; our model (and every importer) represents it as a failed
  ``tool_result`` instead, so counting only ``error`` events would report 0
  errors for a run whose every command failed.  The two never double count: a
  failure is either one ``error`` event or one failed ``tool_result``.

The summary is computed incrementally (:class:`SummaryBuilder`) so it can run
over a stream of many sessions without holding their events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.errors import InvalidEventError
from streams.core.events import AGENTV_EVENT_TYPES, TraceEvent


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """One session's summary.  Invariant: ``tool_names == tuple(sorted(tool_calls_by_name))``."""

    session_id: str
    event_count: int
    tool_names: tuple[str, ...]
    tool_calls_by_name: Mapping[str, int] = field(default_factory=dict)
    error_count: int = 0

    def to_json(self) -> dict[str, Any]:
        """AgentV's JSON shape (camelCase keys), with the session id."""
        return {
            "session_id": self.session_id,
            "eventCount": self.event_count,
            "toolNames": list(self.tool_names),
            "toolCallsByName": dict(sorted(self.tool_calls_by_name.items())),
            "errorCount": self.error_count,
        }


class SummaryBuilder:
    """Accumulates :class:`TraceSummary` values per session, in first-seen order."""

    def __init__(self) -> None:
        self._events: dict[str, int] = {}
        self._calls: dict[str, dict[str, int]] = {}
        self._errors: dict[str, int] = {}

    def add(self, event: TraceEvent) -> None:
        sid = event.session_id
        if sid not in self._events:
            self._events[sid] = 0
            self._calls[sid] = {}
            self._errors[sid] = 0
        if event.type not in AGENTV_EVENT_TYPES:
            return
        self._events[sid] += 1
        if event.type == "tool_call" and event.tool_name:
            calls = self._calls[sid]
            calls[event.tool_name] = calls.get(event.tool_name, 0) + 1
        if event.type == "error" or (event.type == "tool_result" and event.is_error):
            self._errors[sid] += 1

    def summaries(self) -> list[TraceSummary]:
        return [
            TraceSummary(
                session_id=sid,
                event_count=count,
                tool_names=tuple(sorted(self._calls[sid])),
                tool_calls_by_name=dict(sorted(self._calls[sid].items())),
                error_count=self._errors[sid],
            )
            for sid, count in self._events.items()
        ]


def summarize_events(events: Iterable[TraceEvent]) -> list[TraceSummary]:
    """The summary of every session in *events*, in the order sessions first appear."""
    builder = SummaryBuilder()
    for event in events:
        builder.add(event)
    return builder.summaries()


def compute_trace_summary(events: Iterable[TraceEvent]) -> TraceSummary:
    """The summary of one session's events (AgentV's ``computeTraceSummary``).

    Raises :class:`InvalidEventError` (field ``session_id``) when *events* span
    several sessions (use :func:`summarize_events`); an empty input gives an
    all-zero summary with an empty session id.
    """
    summaries = summarize_events(events)
    if not summaries:
        return TraceSummary(session_id="", event_count=0, tool_names=())
    if len(summaries) > 1:
        ids = ", ".join(s.session_id for s in summaries[:5])
        raise InvalidEventError(
            "session_id",
            f"expected the events of one session, got {len(summaries)} ({ids}, ...); "
            "use summarize_events for several",
        )
    return summaries[0]


__all__ = ["SummaryBuilder", "TraceSummary", "compute_trace_summary", "summarize_events"]
