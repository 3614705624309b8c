"""ProgressStall: no meaningful progress for a while.

Two criteria (spec): (a) no successful call for ``stall_threshold`` attempts in
a row; (b) no progress indicator for ``no_progress_calls`` calls.  Progress
indicators are configurable; the defaults are ``new_file_created`` (a successful
create of a path not seen before), ``new_resource`` (a successful call touching
a path not seen before), ``test_passed`` (a successful test-like run),
``build_succeeded`` (a successful build-tool run) and ``plan_step_completed``
(a successful call of a plan/todo tool).  (b) is weaker evidence than (a), so its
confidence is capped at 0.6.

State is O(1) per call plus a capped set of seen paths (``max_paths``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, ProgressStall, ToolCallRecord
from streams.core.statecodec import state_type

PROGRESS_INDICATORS: Final[tuple[str, ...]] = (
    "new_file_created",
    "new_resource",
    "test_passed",
    "build_succeeded",
    "plan_step_completed",
    "file_modified",
)
DEFAULT_INDICATORS: Final[tuple[str, ...]] = PROGRESS_INDICATORS[:5]
_BUILD_VERBS: Final = frozenset(
    {
        "mvn",
        "mvnw",
        "./mvnw",
        "gradle",
        "gradlew",
        "./gradlew",
        "make",
        "javac",
        "cargo",
        "npm",
        "yarn",
        "go",
        "cmake",
        "dotnet",
        "gcc",
        "g++",
        "tsc",
    }
)


@state_type("progress_stall.snapshot/1")
@dataclass(frozen=True, slots=True)
class ProgressStallSnapshot:
    seen: tuple[str, ...]
    last_progress_index: int
    last_progress_ms: int | None
    fail_start_index: int
    fail_start_ms: int
    recent: tuple[ToolCallRecord, ...]


@dataclass(frozen=True, slots=True)
class ProgressStallDetector:
    """Config (``stall_threshold`` None → the analysis config's)."""

    stall_threshold: int | None = None
    no_progress_calls: int | None = None
    indicators: tuple[str, ...] = DEFAULT_INDICATORS
    max_paths: int = 2048

    @property
    def name(self) -> str:
        return "progress_stall"

    def build(
        self, analysis_config: Any, snapshot: ProgressStallSnapshot | None = None
    ) -> ProgressStallLogic:
        n = (
            self.stall_threshold
            if self.stall_threshold is not None
            else analysis_config.stall_threshold
        )
        m = self.no_progress_calls if self.no_progress_calls is not None else 4 * n
        unknown = [i for i in self.indicators if i not in PROGRESS_INDICATORS]
        if unknown:
            raise ConfigError(
                "progress_stall.indicators",
                f"unknown indicator(s) {unknown}; choose from {list(PROGRESS_INDICATORS)}",
            )
        if n < 1 or m < 1:
            raise ConfigError("progress_stall.stall_threshold", f"must be >= 1, got {n}/{m}")
        logic = ProgressStallLogic(n, m, frozenset(self.indicators), self.max_paths)
        if snapshot is not None:
            logic.restore(snapshot)
        return logic


def is_progress(rec: ToolCallRecord, indicators: frozenset[str], new_path: bool) -> bool:
    """Whether ``rec`` shows progress under ``indicators`` (pure)."""
    if not rec.success:
        return False
    if new_path and "new_resource" in indicators:
        return True
    kind = rec.kind
    if kind == "create" and new_path and "new_file_created" in indicators:
        return True
    if kind == "write" and "file_modified" in indicators:
        return True
    verb = rec.verb.lower()
    if kind == "exec" or kind == "other":
        text = rec.params_summary.lower()
        if "test_passed" in indicators and ("test" in verb or "pytest" in text or " test" in text):
            return True
        if "build_succeeded" in indicators and verb in _BUILD_VERBS:
            return True
    tool = rec.tool_name.lower()
    return "plan_step_completed" in indicators and ("plan" in tool or "todo" in tool)


class ProgressStallLogic:
    __slots__ = (
        "_fail_ms",
        "_fail_start",
        "_ind",
        "_last_idx",
        "_last_ms",
        "_m",
        "_max_paths",
        "_n",
        "_recent",
        "_seen",
    )

    def __init__(self, n: int, m: int, indicators: frozenset[str], max_paths: int) -> None:
        self._n = n
        self._m = m
        self._ind = indicators
        self._max_paths = max_paths
        self.reset()

    @property
    def name(self) -> str:
        return "progress_stall"

    def reset(self) -> None:
        self._seen: dict[str, None] = {}
        self._last_idx = 0
        self._last_ms: int | None = None
        self._fail_start = 0
        self._fail_ms = 0
        self._recent: deque[ToolCallRecord] = deque(maxlen=3)

    def snapshot(self) -> ProgressStallSnapshot:
        return ProgressStallSnapshot(
            tuple(self._seen),
            self._last_idx,
            self._last_ms,
            self._fail_start,
            self._fail_ms,
            tuple(self._recent),
        )

    def restore(self, snap: ProgressStallSnapshot) -> None:
        self._seen = dict.fromkeys(snap.seen)
        self._last_idx = snap.last_progress_index
        self._last_ms = snap.last_progress_ms
        self._fail_start = snap.fail_start_index
        self._fail_ms = snap.fail_start_ms
        self._recent = deque(snap.recent, maxlen=3)

    def detect(self, analysis: AnalysisView) -> ProgressStall | None:
        rec = analysis.last_call
        if rec is None:
            return None
        if self._last_ms is None:
            self._last_ms = rec.timestamp_ms
            self._last_idx = rec.call_index - 1
        new_path = False
        res = rec.resource
        if res is not None and rec.success and res not in self._seen:
            new_path = True
            if len(self._seen) >= self._max_paths:
                self._seen.pop(next(iter(self._seen)))
            self._seen[res] = None
        if rec.success:
            self._fail_start = 0
        elif self._fail_start == 0:
            self._fail_start = rec.call_index
            self._fail_ms = rec.timestamp_ms
        self._recent.append(analysis.last_compact or rec)
        if is_progress(rec, self._ind, new_path):
            self._last_idx = rec.call_index
            self._last_ms = rec.timestamp_ms
            return None
        fails = rec.call_index - self._fail_start + 1 if self._fail_start else 0
        if fails >= self._n:
            conf = min(0.9, 0.55 + 0.07 * (fails - self._n))
            return ProgressStall(
                confidence=conf,
                evidence=(
                    *(r.cite() for r in self._recent),
                    f"no successful call in {fails} attempts",
                ),
                first_seen_ms=rec.timestamp_ms,
                call_index=rec.call_index,
                stall_duration=timedelta(milliseconds=rec.timestamp_ms - self._fail_ms),
                actions_during_stall=fails,
                reason="no_success",
                stall_start_index=self._fail_start,
            )
        idle = rec.call_index - self._last_idx
        if idle >= self._m:
            conf = min(0.6, 0.3 + 0.02 * (idle - self._m))
            return ProgressStall(
                confidence=conf,
                evidence=(
                    *(r.cite() for r in self._recent),
                    f"no progress indicator ({', '.join(sorted(self._ind))}) in {idle} calls",
                ),
                first_seen_ms=rec.timestamp_ms,
                call_index=rec.call_index,
                stall_duration=timedelta(milliseconds=rec.timestamp_ms - self._last_ms),
                actions_during_stall=idle,
                reason="no_progress",
                stall_start_index=self._last_idx + 1,
            )
        return None


__all__ = [
    "DEFAULT_INDICATORS",
    "PROGRESS_INDICATORS",
    "ProgressStallDetector",
    "ProgressStallLogic",
    "ProgressStallSnapshot",
    "is_progress",
]
