"""Drift: recent activity wanders away from the task's initial scope.

The scope is the paths the session's task text names (``session_start``
metadata ``task``: ``a/b/c.py`` tokens and dotted module names) plus the first
``scope_paths`` distinct paths the agent touched.  Files the agent itself
created are its own work: never scope, never drift.  A path is in scope
when its directory shares a prefix of ``prefix_depth`` components with a scope
path's directory, or its file name appears in the task text.  Drift fires when at
least ``min_fraction`` of the last ``recent`` path-bearing calls are out of scope
(needs a full ``recent`` ring).  Confidence stays <= 0.7: drift is a heuristic.
O(scope_paths) per path-bearing call.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, Drift, ToolCallRecord
from streams.core.statecodec import state_type

#: ``a/b/c`` or ``a.b.c`` tokens.  Finds exactly what ``[A-Za-z_][\w\-]*(?:[/.][\w\-]+){2,}``
#: finds, at a third of the cost on long task texts: a ``[\w-]`` run can only be followed
#: by ``[/.]`` at its end, so giving back part of a run never helps (possessive ``*+``,
#: ``++``), and a start right after an ASCII letter or ``_`` was already tried from that
#: letter on the same run and continuation (the lookbehind).  Pinned against the plain
#: pattern by ``tests/unit/core/test_engine_fastpaths.py``.
_TASK_PATH = re.compile(r"(?<![A-Za-z_])[A-Za-z_][\w\-]*+(?:[/.][\w\-]++){2,}")


@state_type("drift.snapshot/1")
@dataclass(frozen=True, slots=True)
class DriftSnapshot:
    scope: tuple[str, ...]
    ring: tuple[tuple[str, bool, ToolCallRecord], ...]
    own: tuple[str, ...] = ()
    seeded: bool = False
    touched: int = 0


@dataclass(frozen=True, slots=True)
class DriftDetector:
    scope_paths: int = 5
    recent: int = 10
    min_fraction: float = 0.8
    prefix_depth: int = 2

    @property
    def name(self) -> str:
        return "drift"

    def build(self, analysis_config: Any, snapshot: DriftSnapshot | None = None) -> DriftLogic:
        if self.scope_paths < 1 or self.recent < 2 or not 0.0 < self.min_fraction <= 1.0:
            raise ConfigError(
                "drift.min_fraction",
                "need scope_paths >= 1, recent >= 2 and 0 < min_fraction <= 1, got "
                f"{self.scope_paths}/{self.recent}/{self.min_fraction}",
            )
        logic = DriftLogic(self)
        if snapshot is not None:
            logic.restore(snapshot)
        return logic


@functools.lru_cache(maxsize=4096)
def _dir_prefix(path: str, depth: int) -> str:
    """The first ``depth`` directories of ``path`` (memoized: agents keep working
    on the same few paths, and every call that names one asks)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p and p != "."][:-1]
    return "/".join(parts[:depth])


def task_paths(task: str, limit: int = 10) -> list[str]:
    """Paths the task text names: ``a/b/c.py`` tokens and dotted module names
    (``pkg.sub.mod`` → ``pkg/sub/mod``), first ``limit`` distinct ones.

    Memoized (a fresh list each call): every session of a task scans the same
    text, once per session but up to ``MAX_TASK_CHARS`` of it."""
    return list(_task_paths(task, limit))


@functools.lru_cache(maxsize=256)
def _task_paths(task: str, limit: int) -> tuple[str, ...]:
    found: list[str] = []
    for m in _TASK_PATH.finditer(task[:20_000]):
        token = m.group(0).strip(".")
        if "/" not in token:
            parts = token.split(".")
            if len(parts) < 3 or not all(p.isidentifier() for p in parts):
                continue
            token = "/".join(parts)
        if token not in found:
            found.append(token)
            if len(found) >= limit:
                break
    return tuple(found)


class DriftLogic:
    __slots__ = ("cfg", "out", "own", "prefixes", "ring", "scope", "seeded", "touched")

    def __init__(self, cfg: DriftDetector) -> None:
        self.cfg = cfg
        self.reset()

    @property
    def name(self) -> str:
        return "drift"

    def reset(self) -> None:
        self.scope: list[str] = []
        self.prefixes: list[str] = []
        self.own: dict[str, None] = {}
        self.ring: deque[tuple[str, bool, ToolCallRecord]] = deque()
        self.out = 0
        self.seeded = False
        self.touched = 0  # scope paths taken from the agent's own first calls

    def snapshot(self) -> DriftSnapshot:
        return DriftSnapshot(
            tuple(self.scope), tuple(self.ring), tuple(self.own), self.seeded, self.touched
        )

    def restore(self, snap: DriftSnapshot) -> None:
        self.reset()
        self.scope = list(snap.scope)
        self._reprefix()
        self.ring.extend(snap.ring)
        self.out = sum(1 for _, ins, _ in self.ring if not ins)
        self.own = dict.fromkeys(snap.own)
        self.seeded = snap.seeded
        self.touched = snap.touched

    def _reprefix(self) -> None:
        self.prefixes = sorted({_dir_prefix(s, self.cfg.prefix_depth) for s in self.scope})

    def _in_scope(self, path: str, task: str | None) -> bool:
        if path in self.own:
            return True
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
        if rec is None:
            return None
        if not self.seeded:
            self.seeded = True
            if analysis.task:
                self.scope.extend(task_paths(analysis.task))
                self._reprefix()
        path = rec.resource
        if path is None:
            return self._current(analysis) if self.ring else None
        if rec.kind == "create":
            # the agent's own scratch files are neither scope nor drift
            if path not in self.own and len(self.own) < 256:
                self.own[path] = None
            return self._current(analysis) if self.ring else None
        if self.touched < self.cfg.scope_paths:
            if path not in self.scope and path not in self.own:
                self.scope.append(path)
                self.touched += 1
                self._reprefix()
            return None
        ins = self._in_scope(path, analysis.task)
        ring = self.ring
        if len(ring) >= self.cfg.recent and not ring.popleft()[1]:
            self.out -= 1
        ring.append((path, ins, analysis.last_compact or rec))
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


__all__ = ["DriftDetector", "DriftLogic", "DriftSnapshot", "task_paths"]
