"""ErrorCascade: consecutive failures, grouped by normalized message.

Tracks the current failure streak (start index, length, a capped counter of
signatures).  Fires when the streak reaches ``min_consecutive``; the key is the
streak's start, so a new streak after a success is a new cascade.  A dominant,
informative signature (share >= 0.5, not just "returncode 1") marks a systemic
cause and raises confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, ErrorCascade
from streams.core.similarity import is_generic_error
from streams.core.statecodec import state_type

_MAX_SIGS = 16


@state_type("error_cascade.snapshot/1")
@dataclass(frozen=True, slots=True)
class ErrorCascadeSnapshot:
    start_index: int
    length: int
    signatures: tuple[tuple[str, int], ...]
    cites: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ErrorCascadeDetector:
    min_consecutive: int = 3

    @property
    def name(self) -> str:
        return "error_cascade"

    def build(
        self, analysis_config: Any, snapshot: ErrorCascadeSnapshot | None = None
    ) -> ErrorCascadeLogic:
        if self.min_consecutive < 2:
            raise ConfigError(
                "error_cascade.min_consecutive", f"must be >= 2, got {self.min_consecutive}"
            )
        logic = ErrorCascadeLogic(self.min_consecutive)
        if snapshot is not None:
            logic.restore(snapshot)
        return logic


class ErrorCascadeLogic:
    __slots__ = ("_cites", "_len", "_min", "_sigs", "_start")

    def __init__(self, min_consecutive: int) -> None:
        self._min = min_consecutive
        self.reset()

    @property
    def name(self) -> str:
        return "error_cascade"

    def reset(self) -> None:
        self._start = 0
        self._len = 0
        self._sigs: dict[str, int] = {}
        self._cites: list[str] = []

    def snapshot(self) -> ErrorCascadeSnapshot:
        return ErrorCascadeSnapshot(
            self._start, self._len, tuple(self._sigs.items()), tuple(self._cites)
        )

    def restore(self, snap: ErrorCascadeSnapshot) -> None:
        self._start = snap.start_index
        self._len = snap.length
        self._sigs = dict(snap.signatures)
        self._cites = list(snap.cites)

    def detect(self, analysis: AnalysisView) -> ErrorCascade | None:
        rec = analysis.last_call
        if rec is None:
            return None
        if rec.success:
            if self._len:
                self.reset()
            return None
        if self._len == 0:
            self._start = rec.call_index
        self._len += 1
        sig = rec.error_signature or ""
        if sig in self._sigs or len(self._sigs) < _MAX_SIGS:
            self._sigs[sig] = self._sigs.get(sig, 0) + 1
        self._cites.append(rec.cite())
        if len(self._cites) > 3:
            del self._cites[0]
        if self._len < self._min:
            return None
        dominant, top = max(self._sigs.items(), key=lambda kv: (kv[1], kv[0]))
        share = top / self._len
        conf = (
            0.45
            + 0.08 * (self._len - self._min)
            + (0.25 * share if share >= 0.5 and not is_generic_error(dominant) else 0.0)
        )
        return ErrorCascade(
            confidence=min(0.95, conf),
            evidence=(
                *self._cites,
                f"{self._len} failures in a row since call #{self._start}; "
                f"{top} share {dominant!r}",
            ),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            length=self._len,
            signatures=tuple(sorted(self._sigs)),
            dominant_signature=dominant,
            dominant_share=share,
            start_index=self._start,
        )


__all__ = ["ErrorCascadeDetector", "ErrorCascadeLogic", "ErrorCascadeSnapshot"]
