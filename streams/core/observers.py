"""Trajectory observers: when they run and what they see.

An observer is a pure object (:class:`TrajectoryObserver`) that reads an
:class:`ObserverContext` and returns an :class:`~streams.core.assessment.Assessment`.
When it runs is declared by an :class:`ObserverTrigger`; the engine keeps one
:class:`ObserverState` per observer, so each observer counts its own calls and
its own time since its last assessment.

Deviations from the specification, all forced by running on a stream:

* Time is *event time*: ``every_n_seconds`` compares the current event's (or the
  timer's) ``timestamp_ms`` with the observer's last assessment, never the wall
  clock.  Before an observer's first assessment the session's first event time
  is the reference (the specification never fires a time trigger until some
  other trigger did, which would make a time-only observer silent forever).
* There is no ``Session`` object: the context carries the analysis, the budget
  and the times directly, and ``should_run``/``observe`` take only the context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streams.core.assessment import Assessment, AssessmentHistory
from streams.core.errors import ConfigError
from streams.core.events import Budget
from streams.core.frozen import quick_init
from streams.core.statecodec import state_type


class ToolCallView(Protocol):
    """What observers read from a ``ToolCallRecord`` (see ``streams.core.analysis``)."""

    @property
    def call_index(self) -> int: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def params_summary(self) -> str: ...
    @property
    def success(self) -> bool: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def timestamp_ms(self) -> int: ...


class PatternView(Protocol):
    """What observers read from a ``TrajectoryPattern``."""

    @property
    def pattern_type(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def evidence(self) -> tuple[str, ...]: ...
    @property
    def first_seen_ms(self) -> int: ...
    @property
    def occurrences(self) -> int: ...
    @property
    def call_index(self) -> int: ...


class AnalysisView(Protocol):
    """What observers read from a ``TrajectoryAnalysis``."""

    @property
    def tool_call_count(self) -> int: ...
    @property
    def error_count(self) -> int: ...
    @property
    def consecutive_errors(self) -> int: ...
    def recent_tool_calls(self, n: int) -> Sequence[ToolCallView]: ...
    def patterns(self) -> Mapping[str, PatternView]: ...


def _positive(key: str, value: float | None, *, integer: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or (integer and not isinstance(value, int)):
        raise ConfigError(key, f"expected a positive integer, got {value!r}")
    if not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(key, f"expected a positive number, got {value!r}")


@dataclass(frozen=True, slots=True)
class ObserverTrigger:
    """When an observer runs; the conditions are OR'd (any one suffices).

    ``every_n_seconds`` is counted in event time (see the module docstring).
    """

    every_n_calls: int | None = None
    after_consecutive_errors: int | None = None
    every_n_seconds: float | None = None
    on_every_call: bool = False

    def __post_init__(self) -> None:
        _positive("trigger.every_n_calls", self.every_n_calls, integer=True)
        _positive("trigger.after_consecutive_errors", self.after_consecutive_errors, integer=True)
        _positive("trigger.every_n_seconds", self.every_n_seconds, integer=False)
        if not isinstance(self.on_every_call, bool):
            raise ConfigError(
                "trigger.on_every_call", f"expected true/false, got {self.on_every_call!r}"
            )

    @property
    def is_empty(self) -> bool:
        """True when no condition is set (such an observer never runs)."""
        return (
            self.every_n_calls is None
            and self.after_consecutive_errors is None
            and self.every_n_seconds is None
            and not self.on_every_call
        )


@state_type("observers.observer_state/1")
@quick_init
@dataclass(frozen=True, slots=True)
class ObserverState:
    """Per-observer execution counters (the specification's slice, in event ms)."""

    tool_calls_since_assessment: int = 0
    last_assessment_ms: int | None = None
    last_assessment_call_index: int = 0
    total_assessments: int = 0


@quick_init
@dataclass(frozen=True, slots=True)
class ObserverContext:
    """Everything an observer may look at, frozen at one point of the session.

    ``budget.tokens_used`` already includes the tokens the engine counted on
    ``model_step`` events.  ``new_patterns`` are the patterns that fired on the
    current event (empty on timer runs).  ``history`` holds the session's
    previous assessments, for trends and "has this changed?" decisions.
    """

    session_id: str
    analysis: AnalysisView
    observer_state: ObserverState
    budget: Budget
    now_ms: int
    session_start_ms: int
    new_patterns: tuple[PatternView, ...] = ()
    history: AssessmentHistory = field(default_factory=AssessmentHistory)

    @property
    def call_index(self) -> int:
        """Tool calls made so far (1-based index of the latest call)."""
        return self.analysis.tool_call_count

    @property
    def elapsed_ms(self) -> int:
        return max(0, self.now_ms - self.session_start_ms)

    def recent_tool_calls(self, n: int) -> Sequence[ToolCallView]:
        """The ``n`` most recent tool call records (bounded by the analysis window)."""
        if n <= 0:
            return ()
        return self.analysis.recent_tool_calls(n)

    def tool_calls_since(self, timestamp_ms: int) -> Sequence[ToolCallView]:
        """Records in the window whose call happened at or after ``timestamp_ms``."""
        records = self.analysis.recent_tool_calls(max(self.analysis.tool_call_count, 1))
        return [r for r in records if r.timestamp_ms >= timestamp_ms]

    def error_rate(self, window: int) -> float:
        """Share of failed calls among the last ``window`` calls (0.0 if none)."""
        recent = self.recent_tool_calls(window)
        if not recent:
            return 0.0
        return sum(1 for r in recent if not r.success) / len(recent)


@runtime_checkable
class TrajectoryObserver(Protocol):
    """Programmatic assessment of an agent's trajectory (pure, deterministic).

    Invariant: an observer holds no per-session state (what it remembers lives in
    the engine's ``ObserverState``): the engine builds one instance per observer
    configuration and every session of that configuration runs it.
    """

    @property
    def name(self) -> str: ...

    def should_run(self, context: ObserverContext) -> bool: ...

    def observe(self, context: ObserverContext) -> Assessment: ...


@runtime_checkable
class DeadlineAware(Protocol):
    """An observer that should also run when the session's deadline passes,
    even if the session is quiet (the engine's timer checks this)."""

    @property
    def reports_deadline(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ObserverConfig:
    """An observer with its trigger."""

    observer: TrajectoryObserver
    trigger: ObserverTrigger


def time_trigger_due(
    trigger: ObserverTrigger, state: ObserverState, now_ms: int, session_start_ms: int
) -> bool:
    """``every_n_seconds`` has elapsed (event time) since the last assessment."""
    if trigger.every_n_seconds is None:
        return False
    anchor = state.last_assessment_ms if state.last_assessment_ms is not None else session_start_ms
    return now_ms - anchor >= trigger.every_n_seconds * 1000


def should_trigger(
    trigger: ObserverTrigger,
    state: ObserverState,
    analysis: AnalysisView,
    *,
    now_ms: int,
    session_start_ms: int,
    call_step: bool,
    failure_completed: bool,
) -> bool:
    """Whether any trigger condition holds for this event.

    ``call_step`` is True on events that made or completed a tool call (the
    specification's "after each tool call"); ``failure_completed`` is True when
    the event recorded a failed call, so a streak of N errors fires once per
    new failure and not again on the next, unrelated event.
    """
    if call_step and trigger.on_every_call:
        return True
    if (
        call_step
        and trigger.every_n_calls
        and state.tool_calls_since_assessment >= trigger.every_n_calls
    ):
        return True
    if (
        failure_completed
        and trigger.after_consecutive_errors
        and analysis.consecutive_errors >= trigger.after_consecutive_errors
    ):
        return True
    return time_trigger_due(trigger, state, now_ms, session_start_ms)


__all__ = [
    "AnalysisView",
    "DeadlineAware",
    "ObserverConfig",
    "ObserverContext",
    "ObserverState",
    "ObserverTrigger",
    "PatternView",
    "ToolCallView",
    "TrajectoryObserver",
    "should_trigger",
    "time_trigger_due",
]
