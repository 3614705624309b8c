"""Assessments: what observers say, and how it is rendered for the agent's prompt.

The markdown produced by :meth:`Assessment.render` and
:meth:`CurrentAssessment.render` is exactly the one of the trajectory-observers
specification; the agent's prompt (and the tests) depend on it byte for byte.
Fields the specification does not render (``suggested_tools``, ``trigger``,
``trend``...) never appear in the markdown.

Times are event-time epoch milliseconds (``*_ms``), never the wall clock, so a
replay of the same events renders the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from streams.core.frozen import quick_init
from streams.core.statecodec import state_type

Severity: TypeAlias = Literal["info", "caution", "warning"]
Trend: TypeAlias = Literal["escalating", "steady", "de-escalating"]
TriggerKind: TypeAlias = Literal["event", "timer"]

SEVERITIES: Final[tuple[Severity, ...]] = ("info", "caution", "warning")
_RANK: Final[dict[str, int]] = {s: i for i, s in enumerate(SEVERITIES)}


def severity_rank(severity: str) -> int:
    """0 for info, 1 for caution, 2 for warning (raises ValueError otherwise)."""
    try:
        return _RANK[severity]
    except KeyError:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}") from None


def max_severity(*severities: Severity) -> Severity:
    """The most severe of ``severities`` by rank (not by string order: the
    specification's ``max(severity, "caution")`` would compare strings, and
    ``"info" > "caution"`` alphabetically, which is not what its examples show)."""
    best: Severity = "info"
    best_rank = 0
    for s in severities:  # severity_rank, inlined (it runs several times per assessment)
        rank = _RANK.get(s)
        if rank is None:
            severity_rank(s)  # raises ValueError naming it
        elif rank > best_rank:
            best, best_rank = s, rank
    return best


@state_type("assessment.observation/1")
@quick_init
@dataclass(frozen=True, slots=True)
class Observation:
    """A single observation about the trajectory; ``evidence`` cites calls."""

    category: str
    description: str
    evidence: str | None = None


@state_type("assessment/1")
@quick_init
@dataclass(frozen=True, slots=True)
class Assessment:
    """The structured output of one observer run.

    ``suggested_tools`` names tools the suggestions recommend; it is not
    rendered, the engine feeds it to ``TrajectoryBuilder.note_suggestion`` so
    the tool-avoidance detector knows what was recommended.

    ``tracked`` is the observer's memory of what it has already told the agent
    (the specification's "assessment history" extension), not rendered: one
    ``(pattern_type, fired_at_call, first_reported_at_call)`` per pattern
    instance reported at caution or above.  The next assessment of the same
    observer reads it back (through :class:`AssessmentHistory`) to say since
    which call a problem was first reported and to escalate when it goes on.
    """

    observer_name: str
    summary: str
    observations: tuple[Observation, ...] = ()
    suggestions: tuple[str, ...] = ()
    severity: Severity = "info"
    timestamp_ms: int = 0
    suggested_tools: tuple[str, ...] = ()
    tracked: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        severity_rank(self.severity)

    def render(self) -> str:
        """Concise markdown for context injection (the specification's format)."""
        lines = [f"### {self.observer_name} [{self.severity}]", ""]
        lines.append(self.summary)
        if self.observations:
            lines.append("")
            for obs in self.observations:
                lines.append(f"**{obs.category}**: {obs.description}")
                if obs.evidence:
                    lines.append(f"```\n{obs.evidence}\n```")
        if self.suggestions:
            lines.append("")
            lines.append("**Suggestions**:")
            for suggestion in self.suggestions:
                lines.append(f"- {suggestion}")
        return "\n".join(lines)


@state_type("assessment.current/1")
@quick_init
@dataclass(frozen=True, slots=True)
class CurrentAssessment:
    """The latest assessments of one session, for prompt injection.

    ``call_index`` is the number of tool calls the session had made when it was
    generated (the "#N" of the rendering).  ``trigger`` tells whether an event
    (replayable) or a timer (wall-clock driven, not replayable) produced it;
    ``seq`` is the last applied event's sequence number at that point.
    ``trend`` compares this assessment's top severity with the previous one's.
    """

    assessments: tuple[Assessment, ...] = ()
    generated_at_ms: int = 0
    call_index: int = 0
    session_id: str = ""
    seq: int = -1
    trigger: TriggerKind = "event"
    trend: Trend = "steady"

    @property
    def severity(self) -> Severity:
        """The most severe severity among the assessments (info when empty)."""
        return max_severity(*(a.severity for a in self.assessments))

    def render(self) -> str:
        """All assessments as a single context block ("" when there are none)."""
        if not self.assessments:
            return ""
        lines = [
            "## Trajectory Assessment",
            "",
            f"_Generated after tool call #{self.call_index}_",
            "",
        ]
        for assessment in self.assessments:
            lines.append(assessment.render())
            lines.append("")
        return "\n".join(lines)

    def is_stale(self, current_call_index: int, max_age_calls: int = 20) -> bool:
        """True when more than ``max_age_calls`` calls happened since it was made."""
        return (current_call_index - self.call_index) > max_age_calls


def severity_trend(previous: Severity | None, current: Severity) -> Trend:
    """Escalating / steady / de-escalating from one severity to the next."""
    if previous is None:
        return "steady"
    diff = severity_rank(current) - severity_rank(previous)
    if diff > 0:
        return "escalating"
    if diff < 0:
        return "de-escalating"
    return "steady"


@state_type("assessment.history/1")
@dataclass(frozen=True, slots=True)
class AssessmentHistory:
    """The last ``max_entries`` current assessments of a session, oldest first.

    Invariant: ``len(entries) <= max_entries``.  The specification keeps only the
    latest assessment for injection; the history exists for trend analysis.
    """

    entries: tuple[CurrentAssessment, ...] = ()
    max_entries: int = 10

    def __post_init__(self) -> None:
        if self.max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {self.max_entries}")
        if len(self.entries) > self.max_entries:
            raise ValueError(f"{len(self.entries)} entries exceed max_entries={self.max_entries}")

    def add(self, current: CurrentAssessment) -> AssessmentHistory:
        """A new history with ``current`` appended (the oldest dropped when full)."""
        entries = (*self.entries, current)[-self.max_entries :]
        return AssessmentHistory(entries=entries, max_entries=self.max_entries)

    @property
    def latest(self) -> CurrentAssessment | None:
        return self.entries[-1] if self.entries else None

    def trend(self, observer_name: str | None = None) -> Trend:
        """Severity trend over the last two entries (of one observer, if named)."""
        sev: list[Severity] = []
        for entry in self.entries:
            if observer_name is None:
                sev.append(entry.severity)
            else:
                sev.extend(
                    a.severity for a in entry.assessments if a.observer_name == observer_name
                )
        if len(sev) < 2:
            return "steady"
        return severity_trend(sev[-2], sev[-1])

    def last_for(self, observer_name: str) -> Assessment | None:
        """The most recent assessment produced by ``observer_name``, if any."""
        for entry in reversed(self.entries):
            for a in entry.assessments:
                if a.observer_name == observer_name:
                    return a
        return None


def build_context(
    current: CurrentAssessment | None,
    current_call_index: int,
    *,
    max_age_calls: int = 20,
) -> str:
    """The assessment text to inject into the next prompt, or "".

    Unlike the specification's sketch (which compares against the assessment's
    own call index, so nothing is ever stale), staleness is measured against
    the session's *current* tool call count.
    """
    if current is None or current.is_stale(current_call_index, max_age_calls):
        return ""
    return current.render()


__all__ = [
    "SEVERITIES",
    "Assessment",
    "AssessmentHistory",
    "CurrentAssessment",
    "Observation",
    "Severity",
    "Trend",
    "TriggerKind",
    "build_context",
    "max_severity",
    "severity_rank",
    "severity_trend",
]
