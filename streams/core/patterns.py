"""Pattern values, the tool-call record and the detector seams.

Why here (and not in ``analysis``): detectors import these types and the
builder imports the detectors, so the shared vocabulary lives in a module with
no dependency on either.

Invariants:

* Every pattern is a frozen value; ``confidence`` is in ``[0, 1]``;
  ``evidence`` cites concrete calls as ``#<call_index> <tool>(<params>)``.
* ``key`` says *which* instance of a pattern type it is (the loop's actions, the
  error signature, ...).  The builder emits a pattern when it is newly detected
  or its key changes, and counts ``occurrences`` per ``(pattern_type, key)``.
* ``first_seen_ms`` is event time of the call that made the pattern fire.

Confidence scale (shared by all built-in detectors, so a consumer can map
type + confidence to a severity):

* >= 0.9 — near-certain: an exact action repeated ``threshold`` times with
  identical results, or ``threshold + 1`` times (``doom_loop``); 1.0 beyond.
* 0.6-0.9 — strong: exact multi-action cycles, the same informative error from
  the same invocation (``repeated_error``), long failure streaks.
* < 0.6 — weak/heuristic: fuzzy cycles (<= 0.6), no-progress stalls (<= 0.6),
  thrashing (<= 0.8, usually 0.3-0.5), drift (<= 0.7), context degradation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from streams.core.events import JsonValue
from streams.core.frozen import quick_init
from streams.core.similarity import ActionKind
from streams.core.statecodec import state_type


@state_type("tool_call_record/1")
@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One completed tool call (see the architecture contract).

    ``call_index`` is 1-based over the session's completed calls.  The fields
    after ``output_summary`` are derived once at completion
    (:func:`streams.core.similarity.describe_action`) so detectors never re-parse
    arguments.
    """

    call_index: int
    tool_name: str
    params_summary: str
    params: JsonValue
    success: bool
    error_message: str | None
    timestamp_ms: int
    call_id: str | None = None
    latency_ms: int | None = None
    output_summary: str | None = None
    exact_key: str = ""
    coarse_key: str = ""
    verb: str = ""
    kind: ActionKind = "other"
    resource: str | None = None
    error_signature: str | None = None
    output_key: str = ""

    def cite(self) -> str:
        """Evidence form ``#12 bash(ls -la /tmp)``."""
        return f"#{self.call_index} {self.tool_name}({self.params_summary})"


@state_type("pattern/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class TrajectoryPattern:
    """Base of every detected pattern (see the module invariants)."""

    pattern_type: str
    confidence: float
    evidence: tuple[str, ...]
    first_seen_ms: int
    occurrences: int = 1
    call_index: int = 0

    @property
    def key(self) -> str:
        """Identity of this instance within its type (subclasses refine it)."""
        return self.pattern_type

    @property
    def first_seen(self) -> datetime:
        """``first_seen_ms`` as an aware UTC datetime (the spec's field)."""
        return datetime.fromtimestamp(self.first_seen_ms / 1000, tz=UTC)


@state_type("pattern.doom_loop/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class DoomLoop(TrajectoryPattern):
    """The same cycle of actions repeated: the agent is going in circles."""

    pattern_type: str = "doom_loop"
    cycle_length: int
    repetitions: int
    cycle_actions: tuple[str, ...]
    exact: bool = True
    signature: str = ""

    @property
    def key(self) -> str:
        return self.signature or "|".join(self.cycle_actions)


@state_type("pattern.repeated_error/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RepeatedError(TrajectoryPattern):
    """The same (normalized) error keeps coming back within the error window."""

    pattern_type: str = "repeated_error"
    error_signature: str
    count: int
    tool_name: str

    @property
    def key(self) -> str:
        return self.error_signature


@state_type("pattern.progress_stall/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressStall(TrajectoryPattern):
    """No progress signal (success, new file, passing test, ...) for a while."""

    pattern_type: str = "progress_stall"
    stall_duration: timedelta
    actions_during_stall: int
    reason: str = "no_success"
    stall_start_index: int = 0

    @property
    def key(self) -> str:
        return f"{self.reason}@{self.stall_start_index}"


@state_type("pattern.tool_avoidance/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolAvoidance(TrajectoryPattern):
    """A tool the session's own assessments suggested keeps not being used."""

    pattern_type: str = "tool_avoidance"
    avoided_tool: str
    alternative_attempts: int
    suggestions: int = 0

    @property
    def key(self) -> str:
        return self.avoided_tool


@state_type("pattern.context_degradation/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextDegradation(TrajectoryPattern):
    """Signs the agent lost track of its context (re-reads, repeats, contradictions)."""

    pattern_type: str = "context_degradation"
    symptoms: tuple[str, ...]

    @property
    def key(self) -> str:
        return "|".join(sorted({s.split(":", 1)[0] for s in self.symptoms}))


@state_type("pattern.error_cascade/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorCascade(TrajectoryPattern):
    """Consecutive failures; ``dominant_signature`` names a systemic cause if any."""

    pattern_type: str = "error_cascade"
    length: int
    signatures: tuple[str, ...]
    dominant_signature: str
    dominant_share: float
    start_index: int = 0

    @property
    def key(self) -> str:
        return str(self.start_index)


@state_type("pattern.thrashing/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Thrashing(TrajectoryPattern):
    """Same tool over and over, or read→write→read→write alternation."""

    pattern_type: str = "thrashing"
    mode: str
    subject: str
    count: int

    @property
    def key(self) -> str:
        return f"{self.mode}:{self.subject}"


@state_type("pattern.drift/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Drift(TrajectoryPattern):
    """Most recent activity is on paths unrelated to the task's initial scope."""

    pattern_type: str = "drift"
    out_of_scope_fraction: float
    recent_paths: tuple[str, ...]
    scope: tuple[str, ...]

    @property
    def key(self) -> str:
        return "drift"


@state_type("pattern.file_churn/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class FileChurn(TrajectoryPattern):
    """One file modified again and again in a short window (plugin example)."""

    pattern_type: str = "file_churn"
    churned_file: str
    modification_count: int

    @property
    def key(self) -> str:
        return self.churned_file


@state_type("pattern.monologue/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Monologue(TrajectoryPattern):
    """The agent said the same (or nearly the same) thing again and again with no
    tool call in between: it talks instead of acting."""

    pattern_type: str = "monologue"
    repetitions: int
    message: str

    @property
    def key(self) -> str:
        return "monologue"


@state_type("pattern.context_loop/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextLoop(TrajectoryPattern):
    """Context-window errors or condensations keep coming with no progress between them."""

    pattern_type: str = "context_loop"
    count: int
    kinds: tuple[str, ...]
    start_index: int = 0

    @property
    def key(self) -> str:
        return f"context@{self.start_index}"


@state_type("pattern.alternating_cycle/1")
@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AlternatingCycle(TrajectoryPattern):
    """Two different actions alternating A-B-A-B with near-identical arguments
    (exact A-B cycles are the doom loop's): ``repetitions`` A-B pairs."""

    pattern_type: str = "alternating_cycle"
    cycle_actions: tuple[str, ...]
    repetitions: int
    cycle_length: int = 2
    identical_results: bool = False
    signature: str = ""

    @property
    def key(self) -> str:
        return self.signature or "|".join(self.cycle_actions)


class AnalysisView(Protocol):
    """What a detector may read: a live view or a built :class:`TrajectoryAnalysis`.

    ``last_call`` is the record just completed (detectors run once per
    completed call); ``last_compact`` is the same record without ``params`` and
    ``error_message`` — store that one in detector state to keep snapshots
    small; ``recent_tool_calls(n)`` is newest-last and O(n).
    """

    @property
    def turn_count(self) -> int: ...
    @property
    def tool_call_count(self) -> int: ...
    @property
    def error_count(self) -> int: ...
    @property
    def consecutive_errors(self) -> int: ...
    @property
    def last_call(self) -> ToolCallRecord | None: ...
    @property
    def last_compact(self) -> ToolCallRecord | None: ...
    @property
    def task(self) -> str | None: ...
    @property
    def duration_ms(self) -> int: ...
    def recent_tool_calls(self, n: int) -> tuple[ToolCallRecord, ...]: ...
    def recent_errors(self, n: int) -> tuple[ToolCallRecord, ...]: ...
    def tool_frequency(self) -> dict[str, int]: ...
    def suggested_tools(self) -> Mapping[str, int]: ...


@runtime_checkable
class PatternDetector(Protocol):
    """A detection algorithm (spec protocol): ``name``, ``detect``, ``reset``.

    ``detect`` is called once per completed tool call with the live analysis
    view; it returns the pattern currently present (or ``None``).  The builder,
    not the detector, decides when that counts as a new firing.
    """

    @property
    def name(self) -> str: ...
    def detect(self, analysis: AnalysisView) -> TrajectoryPattern | None: ...
    def reset(self) -> None: ...


@runtime_checkable
class SnapshottingDetector(PatternDetector, Protocol):
    """A stateful detector whose state can be captured as a plain frozen value."""

    def snapshot(self) -> Any: ...


@runtime_checkable
class DetectorFactory(Protocol):
    """A detector's frozen configuration: builds the per-session logic object.

    ``build(analysis_config, snapshot)`` returns a fresh detector, resumed from
    ``snapshot`` (a value its ``snapshot()`` returned) when one is given.  This is
    the bytewax windower shape: config → logic → snapshot → logic.
    """

    @property
    def name(self) -> str: ...
    def build(self, analysis_config: Any, snapshot: Any = None) -> PatternDetector: ...


@runtime_checkable
class EventDetector(Protocol):
    """A detector that also looks at events that are not completed tool calls
    (agent messages, model steps, agent-level errors, tool calls as they open).

    The builder calls ``on_event(event, analysis)`` after applying *every* event;
    like ``detect`` it returns the pattern currently present (or ``None``, which
    clears it).  ``detect`` still runs on each completed call.
    """

    def on_event(self, event: Any, analysis: AnalysisView) -> TrajectoryPattern | None: ...


def record_from_mapping(data: Mapping[str, Any]) -> ToolCallRecord:
    """Rebuild a record from its ``dataclasses.asdict`` form (for state codecs)."""
    return ToolCallRecord(**dict(data))


__all__ = [
    "AlternatingCycle",
    "AnalysisView",
    "ContextDegradation",
    "ContextLoop",
    "DetectorFactory",
    "DoomLoop",
    "Drift",
    "ErrorCascade",
    "EventDetector",
    "FileChurn",
    "Monologue",
    "PatternDetector",
    "ProgressStall",
    "RepeatedError",
    "SnapshottingDetector",
    "Thrashing",
    "ToolAvoidance",
    "ToolCallRecord",
    "TrajectoryPattern",
    "record_from_mapping",
]
