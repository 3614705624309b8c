"""The normalized trace event model: the one shape every part of the project speaks.

A session is an ordered stream of :class:`TraceEvent` values.  The Avro schema in
``schemas/trace_event.avsc`` mirrors this class field for field, the JSON Lines form
(:mod:`streams.core.jsonl`) is a superset of AgentV's ``TraceEvent``, and every
importer produces these values.

Invariants:

* ``timestamp_ms`` is *event time* (int epoch milliseconds, as Kafka and Avro have
  it).  Nothing in the core reads the wall clock, so the same events always give
  the same answers.
* ``seq`` is a per-session, strictly increasing sequence number assigned by the
  publisher (0-based).  Consumers use it to apply each event exactly once.
* ``input`` / ``output`` are plain JSON values (``None``, bool, int, float, str,
  list, dict with str keys).  They may be absent in summary-only privacy mode, in
  which case ``params_summary`` still carries an abbreviated description.
* A tool failure is a ``tool_result`` with ``is_error=True`` (and usually an
  ``error_message``); an ``error`` event with a ``call_id`` is the failed result of
  that call, one without a ``call_id`` is an agent-level error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from streams.core.frozen import quick_init
from streams.core.statecodec import state_type

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

EventType: TypeAlias = Literal[
    "model_step",
    "tool_call",
    "tool_result",
    "message",
    "error",
    "session_start",
    "session_end",
    "budget",
    "snapshot",
    "restore",
]

#: The five AgentV event types, in AgentV's order.
AGENTV_EVENT_TYPES: Final[tuple[str, ...]] = (
    "model_step",
    "tool_call",
    "tool_result",
    "message",
    "error",
)
#: Control events: they steer the observer, they are not part of the trajectory.
CONTROL_EVENT_TYPES: Final[tuple[str, ...]] = (
    "session_start",
    "session_end",
    "budget",
    "snapshot",
    "restore",
)
EVENT_TYPES: Final[tuple[str, ...]] = AGENTV_EVENT_TYPES + CONTROL_EVENT_TYPES

#: Metadata keys with a meaning to the observer.
META_OBSERVER_PROFILE: Final = "observer_profile"  # on session_start: which profile to run
META_SNAPSHOT_ID: Final = "snapshot_id"  # on snapshot / restore control events
META_TASK: Final = "task"  # on session_start: the task text (scope for drift)
META_INPUT_TRUNCATED: Final = "input_truncated"  # "true" when input was size-capped
META_OUTPUT_TRUNCATED: Final = "output_truncated"


@state_type("events.budget/1")
@quick_init
@dataclass(frozen=True, slots=True)
class Budget:
    """Resource constraints of a session, as set by its last ``budget`` event.

    ``None`` means "no limit of that kind".  ``tokens_used`` is what the agent
    reported; the observer adds token usage it sees on ``model_step`` events.
    """

    deadline_ms: int | None = None
    max_tokens: int | None = None
    tokens_used: int | None = None
    max_tool_calls: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One event of one session's trajectory (see the module docstring)."""

    type: EventType
    session_id: str
    seq: int
    timestamp_ms: int
    agent_id: str | None = None
    parent_session_id: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    input: JsonValue = None
    output: JsonValue = None
    params_summary: str | None = None
    is_error: bool = False
    error_message: str | None = None
    text: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    budget: Budget | None = None

    @property
    def is_control(self) -> bool:
        return self.type in CONTROL_EVENT_TYPES

    @property
    def total_tokens(self) -> int:
        return (self.input_tokens or 0) + (self.output_tokens or 0)


__all__ = [
    "AGENTV_EVENT_TYPES",
    "CONTROL_EVENT_TYPES",
    "EVENT_TYPES",
    "META_INPUT_TRUNCATED",
    "META_OBSERVER_PROFILE",
    "META_OUTPUT_TRUNCATED",
    "META_SNAPSHOT_ID",
    "META_TASK",
    "Budget",
    "EventType",
    "JsonValue",
    "TraceEvent",
]
