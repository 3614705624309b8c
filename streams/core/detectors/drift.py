"""Drift: recent activity wanders away from the task's initial scope.

The scope is the session's task text (``session_start`` metadata ``task``) plus
the first ``scope_paths`` distinct paths the agent touched.  A path is in scope
when its directory shares a prefix of ``prefix_depth`` components with a scope
path's directory, or its file name appears in the task text.  Drift fires when at
least ``min_fraction`` of the last ``recent`` path-bearing calls are out of scope
(needs a full ``recent`` ring).  Confidence stays <= 0.7: drift is a heuristic.
O(scope_paths) per path-bearing call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, Drift, ToolCallRecord


@dataclass(frozen=True, slots=True)
class DriftSnapshot:
    scope: tuple[str, ...]
    ring: tuple[tuple[str, bool, ToolCallRecord], ...]


@dataclass(frozen=True, slots=True)
class DriftDetector:
    scope_paths: int = 5
    recent: int = 10
    min_fraction: float = 0.8
    prefix_depth: int = 2

    @property
    def name(self) -> str:
        return "drift"

    def build(self, analysis_config: Any, snapshot: Any = None) -> DriftLogic:
        if self.scope_paths < 1 or self.recent < 2 or not 0.0 < self.min_fraction <= 1.0:
            raise ConfigError(
                "drift.min_fraction",
                "need scope_paths >= 1, recent >= 2 and 0 < min_fraction <= 1, got "
                f"{self.scope_paths}/{self.recent}/{self.min_fraction}",
            )
        logic = DriftLogic(self)
        if snapshot is not None:
            logic.scope = list(snapshot.scope)
            logic.prefixes = sorted({_dir_prefix(s, logic.cfg.prefix_depth) for s in logic.scope})
            logic.ring.extend(snapshot.ring)
            logic.out = sum(1 for _, ins, _ in logic.ring if not ins)
        return logic


def _dir_prefix(path: str, depth: int) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p and p != "."][:-1]
    return "/".join(parts[:depth])


class DriftLogic:
    __slots__ = ("cfg", "out", "prefixes", "ring", "scope")

    def __init__(self, cfg: DriftDetector) -> None:
        self.cfg = cfg
        self.scope: list[str] = []
        self.prefixes: list[str] = []
        self.ring: deque[tuple[str, bool, ToolCallRecord]] = deque()
        self.out = 0

    @property
    def name(self) -> str:
        return "drift"

    def reset(self) -> None:
        self.scope = []
        self.prefixes = []
        self.ring.clear()
        self.out = 0

    def snapshot(self) -> DriftSnapshot:
        return DriftSnapshot(tuple(self.scope), tuple(self.ring))

    def _in_scope(self, path: str, task: str | None) -> bool:
        depth = self.cfg.prefix_depth
        prefix = _dir_prefix(path, depth)
        name = path.rsplit("/", 1)[-1]
        if task and name and name in task:
            return True
        for sp in self.prefixes:
            if sp == prefix or (sp and prefix.startswith(sp)) or (prefix and sp.startswith(prefix)):
                return True
        return False

    def detect(self, analysis: AnalysisView) -> Drift | None:
        rec = analysis.last_call
        if rec is None or rec.resource is None:
            return None if rec is None or not self.ring else self._current(analysis)
        path = rec.resource
        if len(self.scope) < self.cfg.scope_paths:
            if path not in self.scope:
                self.scope.append(path)
                self.prefixes = sorted({_dir_prefix(s, self.cfg.prefix_depth) for s in self.scope})
            return None
        ins = self._in_scope(path, analysis.task)
        ring = self.ring
        if len(ring) >= self.cfg.recent and not ring.popleft()[1]:
            self.out -= 1
        ring.append((path, ins, rec))
        if not ins:
            self.out += 1
        return self._current(analysis)

    def _current(self, analysis: AnalysisView) -> Drift | None:
        ring = self.ring
        if len(ring) < self.cfg.recent:
            return None
        frac = self.out / len(ring)
        if frac < self.cfg.min_fraction:
            return None
        rec = analysis.last_call
        assert rec is not None
        span = 1.0 - self.cfg.min_fraction
        conf = 0.35 + (0.35 * (frac - self.cfg.min_fraction) / span if span > 0 else 0.35)
        outs = [p for p, ins, _ in ring if not ins]
        return Drift(
            confidence=min(0.7, conf),
            evidence=(
                *[r.cite() for _, ins, r in ring if not ins][-3:],
                f"{self.out}/{len(ring)} recent paths outside the initial scope",
            ),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            out_of_scope_fraction=frac,
            recent_paths=tuple(dict.fromkeys(outs))[:5],
            scope=tuple(self.scope),
        )


__all__ = ["DriftDetector", "DriftLogic", "DriftSnapshot"]
