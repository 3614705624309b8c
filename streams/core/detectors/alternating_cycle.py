"""Alternating cycle: two actions taking turns, A-B-A-B, with near-identical arguments.

Calls are compared by :attr:`ToolCallRecord.coarse_key` (tool and arguments
with digits masked and long arguments cut), so ``edit 10:12`` / ``run tests`` /
``edit 11:13`` / ``run tests`` alternates.  An *exact* A-B cycle (both actions
identical every time) is left to the doom loop, which reports it at the same
length; this detector catches the alternations it only sees fuzzily.

The pattern is present while the last ``2 * repetitions`` or more calls
alternate between two different coarse keys.  Confidence: 0.7 when each
action also gave the same result every time (nothing learned), else 0.45; +0.05
per further pair, capped at 0.9 / 0.55 (so without identical results it stays
below caution).  O(1) per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AlternatingCycle, AnalysisView, ToolCallRecord
from streams.core.similarity import abbreviate
from streams.core.statecodec import state_type


@state_type("alternating_cycle.snapshot/1")
@dataclass(frozen=True, slots=True)
class AlternatingCycleSnapshot:
    """Plain state of :class:`AlternatingCycleLogic`."""

    last: tuple[ToolCallRecord, ...]
    length: int
    exact: bool
    same_results: bool


@dataclass(frozen=True, slots=True)
class AlternatingCycleDetector:
    """Config: ``repetitions`` A-B pairs in a row (>= 2)."""

    repetitions: int = 3

    @property
    def name(self) -> str:
        return "alternating_cycle"

    def build(
        self, analysis_config: Any, snapshot: AlternatingCycleSnapshot | None = None
    ) -> AlternatingCycleLogic:
        if isinstance(self.repetitions, bool) or not isinstance(self.repetitions, int):
            raise ConfigError(
                "alternating_cycle.repetitions", f"expected an integer, got {self.repetitions!r}"
            )
        if self.repetitions < 2:
            raise ConfigError(
                "alternating_cycle.repetitions", f"must be >= 2, got {self.repetitions}"
            )
        logic = AlternatingCycleLogic(self.repetitions)
        if snapshot is not None:
            logic.last = list(snapshot.last)
            logic.length = snapshot.length
            logic.exact = snapshot.exact
            logic.same = snapshot.same_results
        return logic


def _label(rec: ToolCallRecord) -> str:
    return f"{rec.tool_name}({abbreviate(rec.params_summary, 40)})"


class AlternatingCycleLogic:
    """Per-session alternation state (see the module docstring)."""

    __slots__ = ("exact", "last", "length", "reps", "same")

    def __init__(self, repetitions: int) -> None:
        self.reps = repetitions
        self.reset()

    @property
    def name(self) -> str:
        return "alternating_cycle"

    def reset(self) -> None:
        self.last: list[ToolCallRecord] = []
        self.length = 0
        self.exact = True
        self.same = True

    def snapshot(self) -> AlternatingCycleSnapshot:
        return AlternatingCycleSnapshot(tuple(self.last), self.length, self.exact, self.same)

    def detect(self, analysis: AnalysisView) -> AlternatingCycle | None:
        rec = analysis.last_compact or analysis.last_call
        if rec is None:
            return None
        last = self.last
        if len(last) == 2 and rec.coarse_key == last[0].coarse_key != last[1].coarse_key:
            self.length += 1
            self.exact = self.exact and rec.exact_key == last[0].exact_key
            self.same = self.same and rec.output_key == last[0].output_key
        elif last and rec.coarse_key != last[-1].coarse_key:
            self.length, self.exact = 2, True
            self.same = True
        else:
            self.length, self.exact, self.same = 1, True, True
        self.last = [*last, rec][-2:]
        if self.length < 2 * self.reps or self.exact:
            return None
        a, b = self.last
        pairs = self.length // 2
        extra = 0.05 * (pairs - self.reps)
        conf = min(0.9, 0.7 + extra) if self.same else min(0.55, 0.45 + extra)
        return AlternatingCycle(
            confidence=conf,
            evidence=(
                a.cite(),
                b.cite(),
                f"{self.length} calls alternating between two near-identical actions"
                + (" with identical results" if self.same else ""),
            ),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            cycle_actions=(_label(b), _label(a)) if self.length % 2 else (_label(a), _label(b)),
            repetitions=pairs,
            identical_results=self.same,
            signature="~" + "|".join(sorted((a.coarse_key, b.coarse_key))),
        )


__all__ = ["AlternatingCycleDetector", "AlternatingCycleLogic", "AlternatingCycleSnapshot"]
