"""Thrashing: the same tool over and over, or read→write→read→write alternation.

* ``same_tool``: one verb (the tool, or a shell command's first word) of an
  acting kind (write/create/delete/exec/other) used ``same_tool_count`` times in
  the last ``same_tool_window`` calls.  Reads and searches are excluded: paging
  through a file is navigation, not thrashing.
* ``alternation``: ``alternation_length`` calls in a row alternating between
  reading and writing the same path (or unknown paths).

Both are O(1) per call (a ring with a counter; a run length).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, Thrashing, ToolCallRecord
from streams.core.statecodec import state_type

_ACTING = frozenset({"write", "create", "delete", "exec", "other"})
_RW = {"read": "rw", "write": "rw", "create": "rw"}


@state_type("thrashing.snapshot/1")
@dataclass(frozen=True, slots=True)
class ThrashingSnapshot:
    ring: tuple[str | None, ...]
    alt_len: int
    last: ToolCallRecord | None
    recent: tuple[ToolCallRecord, ...]
    active_verb: str | None = None


@dataclass(frozen=True, slots=True)
class ThrashingDetector:
    same_tool_count: int = 6
    same_tool_window: int = 10
    alternation_length: int = 6

    @property
    def name(self) -> str:
        return "thrashing"

    def build(
        self, analysis_config: Any, snapshot: ThrashingSnapshot | None = None
    ) -> ThrashingLogic:
        if not 2 <= self.same_tool_count <= self.same_tool_window:
            raise ConfigError(
                "thrashing.same_tool_count",
                f"must be in 2..same_tool_window ({self.same_tool_window}), "
                f"got {self.same_tool_count}",
            )
        if self.alternation_length < 3:
            raise ConfigError(
                "thrashing.alternation_length", f"must be >= 3, got {self.alternation_length}"
            )
        logic = ThrashingLogic(self.same_tool_count, self.same_tool_window, self.alternation_length)
        if snapshot is not None:
            for verb in snapshot.ring:
                logic.push(verb)
            logic.alt_len = snapshot.alt_len
            logic.last = snapshot.last
            logic.recent.extend(snapshot.recent)
            logic.active_verb = snapshot.active_verb
        return logic


class ThrashingLogic:
    __slots__ = (
        "active_verb",
        "alt_len",
        "alt_need",
        "counts",
        "last",
        "recent",
        "ring",
        "same_count",
        "window",
    )

    def __init__(self, same_count: int, window: int, alt_need: int) -> None:
        self.same_count = same_count
        self.window = window
        self.alt_need = alt_need
        self.ring: deque[str | None] = deque()
        self.counts: dict[str, int] = {}
        self.alt_len = 0
        self.active_verb: str | None = None
        self.last: ToolCallRecord | None = None
        self.recent: deque[ToolCallRecord] = deque(maxlen=4)

    @property
    def name(self) -> str:
        return "thrashing"

    def reset(self) -> None:
        self.ring.clear()
        self.counts.clear()
        self.alt_len = 0
        self.active_verb = None
        self.last = None
        self.recent.clear()

    def snapshot(self) -> ThrashingSnapshot:
        return ThrashingSnapshot(
            tuple(self.ring), self.alt_len, self.last, tuple(self.recent), self.active_verb
        )

    def push(self, verb: str | None) -> None:
        ring = self.ring
        if len(ring) >= self.window:
            old = ring.popleft()
            if old is not None:
                left = self.counts[old] - 1
                if left:
                    self.counts[old] = left
                else:
                    del self.counts[old]
        ring.append(verb)
        if verb is not None:
            self.counts[verb] = self.counts.get(verb, 0) + 1

    def detect(self, analysis: AnalysisView) -> Thrashing | None:
        rec = analysis.last_call
        if rec is None:
            return None
        verb = rec.verb if rec.kind in _ACTING else None
        self.push(verb)
        self.recent.append(analysis.last_compact or rec)
        last = self.last
        if (
            last is not None
            and rec.kind in _RW
            and last.kind in _RW
            and (rec.kind == "read") != (last.kind == "read")
            and (rec.resource is None or last.resource is None or rec.resource == last.resource)
        ):
            self.alt_len += 1
        else:
            self.alt_len = 1 if rec.kind in _RW else 0
        self.last = analysis.last_compact or rec
        if self.alt_len >= self.alt_need:
            conf = min(0.8, 0.45 + 0.05 * (self.alt_len - self.alt_need))
            where = rec.resource or rec.verb
            return Thrashing(
                confidence=conf,
                evidence=(
                    *(r.cite() for r in self.recent),
                    f"{self.alt_len} calls alternating read/write on {where}",
                ),
                first_seen_ms=rec.timestamp_ms,
                call_index=rec.call_index,
                mode="alternation",
                subject=where,
                count=self.alt_len,
            )
        # Hysteresis: a verb reported as thrashing stays reported until its count
        # drops below same_count - 1, so one interleaved call does not re-fire it.
        subject = self.active_verb
        if subject is not None and self.counts.get(subject, 0) < self.same_count - 1:
            subject = None
        if subject is None and verb is not None and self.counts[verb] >= self.same_count:
            subject = verb
        self.active_verb = subject
        if subject is None:
            return None
        n = self.counts[subject]
        return Thrashing(
            confidence=min(0.7, max(0.2, 0.3 + 0.1 * (n - self.same_count))),
            evidence=(
                *(r.cite() for r in self.recent),
                f"{subject!r} {n}x in the last {len(self.ring)} calls",
            ),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            mode="same_tool",
            subject=subject,
            count=n,
        )


__all__ = ["ThrashingDetector", "ThrashingLogic", "ThrashingSnapshot"]
