"""ToolAvoidance: the session's own assessments keep suggesting a tool the agent
does not use.

The builder counts suggestions per tool since its last use
(:meth:`TrajectoryBuilder.note_suggestion`; using the tool clears the count).
This detector counts, per suggested tool, the calls made with *other* tools since
the first pending suggestion.  It fires when a tool was suggested
``min_suggestions`` times and ``min_alternatives`` other calls followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, ToolAvoidance
from streams.core.statecodec import state_type


@state_type("tool_avoidance.snapshot/1")
@dataclass(frozen=True, slots=True)
class ToolAvoidanceSnapshot:
    alternatives: tuple[tuple[str, int], ...]
    cites: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ToolAvoidanceDetector:
    min_suggestions: int = 2
    min_alternatives: int = 3

    @property
    def name(self) -> str:
        return "tool_avoidance"

    def build(
        self, analysis_config: Any, snapshot: ToolAvoidanceSnapshot | None = None
    ) -> ToolAvoidanceLogic:
        if self.min_suggestions < 1 or self.min_alternatives < 1:
            raise ConfigError(
                "tool_avoidance.min_suggestions",
                f"min_suggestions and min_alternatives must be >= 1, got "
                f"{self.min_suggestions}/{self.min_alternatives}",
            )
        logic = ToolAvoidanceLogic(self.min_suggestions, self.min_alternatives)
        if snapshot is not None:
            logic.alternatives = dict(snapshot.alternatives)
            logic.cites = list(snapshot.cites)
        return logic


class ToolAvoidanceLogic:
    __slots__ = ("alternatives", "cites", "min_alternatives", "min_suggestions")

    def __init__(self, min_suggestions: int, min_alternatives: int) -> None:
        self.min_suggestions = min_suggestions
        self.min_alternatives = min_alternatives
        self.alternatives: dict[str, int] = {}
        self.cites: list[str] = []

    @property
    def name(self) -> str:
        return "tool_avoidance"

    def reset(self) -> None:
        self.alternatives = {}
        self.cites = []

    def snapshot(self) -> ToolAvoidanceSnapshot:
        return ToolAvoidanceSnapshot(tuple(self.alternatives.items()), tuple(self.cites))

    def detect(self, analysis: AnalysisView) -> ToolAvoidance | None:
        rec = analysis.last_call
        suggested = analysis.suggested_tools()
        if rec is None or (not suggested and not self.alternatives):
            return None
        alts = self.alternatives
        for tool in [t for t in alts if t not in suggested]:
            del alts[tool]
        if not suggested:
            return None
        self.cites.append(rec.cite())
        if len(self.cites) > 3:
            del self.cites[0]
        best: tuple[int, int, str] | None = None
        for tool, count in suggested.items():
            if tool == rec.tool_name:
                continue
            n = alts.get(tool, 0) + 1
            alts[tool] = n
            if count >= self.min_suggestions and n >= self.min_alternatives:
                cand = (count, n, tool)
                if best is None or cand > best:
                    best = cand
        if best is None:
            return None
        count, n, tool = best
        conf = min(
            0.9, 0.4 + 0.1 * (count - self.min_suggestions) + 0.05 * (n - self.min_alternatives)
        )
        return ToolAvoidance(
            confidence=conf,
            evidence=(*self.cites, f"{tool!r} suggested {count}x, {n} other calls since"),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            avoided_tool=tool,
            alternative_attempts=n,
            suggestions=count,
        )


__all__ = ["ToolAvoidanceDetector", "ToolAvoidanceLogic", "ToolAvoidanceSnapshot"]
