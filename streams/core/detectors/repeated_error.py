"""RepeatedError: the same normalized error keeps coming back.

Keeps a ring of the signatures of the last ``error_window`` calls (``None`` for
successes) and a counter over it, so each call is O(1).  Signatures come from
:func:`streams.core.similarity.normalize_error` (computed once per record).
The pattern stays active while its signature still has ``min_count`` failures
in the window; the most recent qualifying signature wins.

Confidence follows the spec's "same or similar tool invocations": failures of
the same invocation (same coarse action key) score highest, the same verb less,
unrelated calls least.  A *generic* signature (only "returncode 1", no text)
counts only when the invocations are the same: different greps each finding
nothing are exploration, not a repeated error.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, RepeatedError, ToolCallRecord
from streams.core.similarity import is_generic_error
from streams.core.statecodec import state_type


@state_type("repeated_error.snapshot/1")
@dataclass(frozen=True, slots=True)
class RepeatedErrorSnapshot:
    ring: tuple[tuple[str | None, ToolCallRecord], ...]
    current: str | None


@dataclass(frozen=True, slots=True)
class RepeatedErrorDetector:
    """Config: ``min_count`` failures with one signature within ``window`` calls
    (``window`` None → the analysis ``error_window``)."""

    min_count: int = 3
    window: int | None = None

    @property
    def name(self) -> str:
        return "repeated_error"

    def build(
        self, analysis_config: Any, snapshot: RepeatedErrorSnapshot | None = None
    ) -> RepeatedErrorLogic:
        window = self.window if self.window is not None else analysis_config.error_window
        if self.min_count < 2:
            raise ConfigError("repeated_error.min_count", f"must be >= 2, got {self.min_count}")
        if window < self.min_count:
            raise ConfigError(
                "repeated_error.window", f"must be >= min_count ({self.min_count}), got {window}"
            )
        logic = RepeatedErrorLogic(self.min_count, window)
        if snapshot is not None:
            logic.restore(snapshot)
        return logic


class RepeatedErrorLogic:
    __slots__ = ("_counts", "_current", "_min", "_ring", "_window")

    def __init__(self, min_count: int, window: int) -> None:
        self._min = min_count
        self._window = window
        self.reset()

    @property
    def name(self) -> str:
        return "repeated_error"

    def reset(self) -> None:
        # (signature or None, record)
        self._ring: deque[tuple[str | None, ToolCallRecord]] = deque()
        self._counts: dict[str, int] = {}
        self._current: str | None = None

    def snapshot(self) -> RepeatedErrorSnapshot:
        return RepeatedErrorSnapshot(tuple(self._ring), self._current)

    def restore(self, snap: RepeatedErrorSnapshot) -> None:
        self.reset()
        for item in snap.ring:
            self._push(item)
        self._current = snap.current

    def _push(self, item: tuple[str | None, ToolCallRecord]) -> None:
        ring = self._ring
        if len(ring) >= self._window:
            old = ring.popleft()[0]
            if old is not None:
                left = self._counts[old] - 1
                if left:
                    self._counts[old] = left
                else:
                    del self._counts[old]
        ring.append(item)
        sig = item[0]
        if sig is not None:
            self._counts[sig] = self._counts.get(sig, 0) + 1

    def detect(self, analysis: AnalysisView) -> RepeatedError | None:
        rec: ToolCallRecord | None = analysis.last_call
        if rec is None:
            return None
        sig = None if rec.success else (rec.error_signature or "")
        self._push((sig, analysis.last_compact or rec))
        current = self._current
        if current is not None and not self._qualifies(current):
            current = None
        # Sticky: the reported signature stays while it qualifies; another one
        # takes over only by becoming more frequent (avoids flapping between two).
        if (
            sig
            and sig != current
            and (current is None or self._counts[sig] > self._counts[current])
            and self._qualifies(sig)
        ):
            current = sig
        self._current = current
        if current is None:
            return None
        return self._pattern(current, rec)

    def _qualifies(self, sig: str) -> bool:
        """``min_count`` failures in the window; a generic signature ("returncode
        1") must also come from one invocation to count as *the same* error."""
        if self._counts.get(sig, 0) < self._min:
            return False
        if not is_generic_error(sig):
            return True
        return len({r.coarse_key for s, r in self._ring if s == sig}) == 1

    def _pattern(self, sig: str, rec: ToolCallRecord) -> RepeatedError:
        hits = [r for s, r in self._ring if s == sig]
        count = len(hits)
        extra = count - self._min
        if len({h.coarse_key for h in hits}) == 1:
            conf = 0.6 + 0.15 * extra
            how = "same invocation"
        elif len({h.verb for h in hits}) == 1:
            conf = 0.5 + 0.1 * extra
            how = "same tool"
        else:
            conf = 0.4 + 0.1 * extra
            how = "different calls"
        evidence = (
            *(h.cite() for h in hits[-3:]),
            f"error {sig!r} {count}x in the last {self._window} calls ({how})",
        )
        return RepeatedError(
            confidence=min(0.95, conf),
            evidence=evidence,
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            error_signature=sig,
            count=count,
            tool_name=hits[-1].tool_name,
        )


__all__ = ["RepeatedErrorDetector", "RepeatedErrorLogic", "RepeatedErrorSnapshot"]
