"""Context-window loop: context-window errors or condensations with no progress between.

A *context event* is

* an error (an agent-level ``error`` event, or a failed tool call) whose message
  says the context window overflowed (``context window``, ``maximum context
  length``, ``context_length_exceeded``, ``prompt is too long``, ...), or
* a condensation: a tool call named ``condensation``/``condense`` (OpenHands'
  ``CondensationAction`` as imported), or any event with
  ``metadata["condensation"] == "true"``.

*Progress* is a successful tool call that is not itself a context event; it
ends the streak.  The pattern is present while ``threshold`` or more context
events happened since the last progress: confidence 0.7 at ``threshold``,
+0.1 per further one (0.9, a warning, two later).  O(1) state per session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, ContextLoop
from streams.core.statecodec import state_type

CONTEXT_ERROR: Final = re.compile(
    r"context[ _-]?(window|length)|maximum context|context_length_exceeded|"
    r"prompt is too long|too many tokens|token limit|contextwindowexceeded",
    re.IGNORECASE,
)
CONDENSATION_TOOLS: Final = frozenset({"condensation", "condense", "context_condensation"})


@state_type("context_loop.snapshot/1")
@dataclass(frozen=True, slots=True)
class ContextLoopSnapshot:
    """Plain state of :class:`ContextLoopLogic`."""

    count: int
    start_index: int
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContextLoopDetector:
    """Config: ``threshold`` context events with no progress between them (>= 2)."""

    threshold: int = 3

    @property
    def name(self) -> str:
        return "context_loop"

    def build(
        self, analysis_config: Any, snapshot: ContextLoopSnapshot | None = None
    ) -> ContextLoopLogic:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int):
            raise ConfigError(
                "context_loop.threshold", f"expected an integer, got {self.threshold!r}"
            )
        if self.threshold < 2:
            raise ConfigError("context_loop.threshold", f"must be >= 2, got {self.threshold}")
        logic = ContextLoopLogic(self.threshold)
        if snapshot is not None:
            logic.count, logic.start, logic.kinds = (
                snapshot.count,
                snapshot.start_index,
                list(snapshot.kinds),
            )
        return logic


class ContextLoopLogic:
    """Per-session context-loop state (see the module docstring)."""

    __slots__ = ("count", "kinds", "start", "thr")

    def __init__(self, threshold: int) -> None:
        self.thr = threshold
        self.reset()

    @property
    def name(self) -> str:
        return "context_loop"

    def reset(self) -> None:
        self.count = 0
        self.start = 0
        self.kinds: list[str] = []

    def snapshot(self) -> ContextLoopSnapshot:
        return ContextLoopSnapshot(self.count, self.start, tuple(self.kinds))

    def _note(self, kind: str, call_index: int) -> None:
        if self.count == 0:
            self.start = call_index
        self.count += 1
        self.kinds = [*self.kinds, kind][-3:]

    def detect(self, analysis: AnalysisView) -> ContextLoop | None:
        rec = analysis.last_call
        if rec is None:
            return None
        if rec.tool_name.lower() in CONDENSATION_TOOLS:
            self._note(f"#{rec.call_index} condensation", rec.call_index)
        elif not rec.success and CONTEXT_ERROR.search(
            f"{rec.error_message or ''} {rec.output_summary or ''}"
        ):
            self._note(f"#{rec.call_index} {rec.tool_name}: context window error", rec.call_index)
        elif rec.success:
            self.reset()
        return self._pattern(rec.timestamp_ms, rec.call_index)

    def on_event(self, event: Any, analysis: AnalysisView) -> ContextLoop | None:
        etype = event.type
        calls = analysis.tool_call_count
        if event.metadata.get("condensation") == "true" and etype not in (
            "tool_call",
            "tool_result",
        ):
            self._note(f"after call #{calls}: condensation", calls)
        elif etype == "error" and event.call_id is None:
            text = f"{event.error_message or ''} {event.text or ''}"
            if CONTEXT_ERROR.search(text):
                self._note(f"after call #{calls}: context window error", calls)
        return self._pattern(event.timestamp_ms, calls)

    def _pattern(self, ts: int, call_index: int) -> ContextLoop | None:
        if self.count < self.thr:
            return None
        return ContextLoop(
            confidence=min(1.0, (7 + self.count - self.thr) / 10),
            evidence=(
                *self.kinds,
                f"{self.count} context-window errors/condensations with no progress between them",
            ),
            first_seen_ms=ts,
            call_index=call_index,
            count=self.count,
            kinds=tuple(self.kinds),
            start_index=self.start,
        )


__all__ = [
    "CONDENSATION_TOOLS",
    "CONTEXT_ERROR",
    "ContextLoopDetector",
    "ContextLoopLogic",
    "ContextLoopSnapshot",
]
