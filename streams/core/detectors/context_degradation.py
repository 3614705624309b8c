"""ContextDegradation: signs the agent forgot what it just saw or did.

Symptoms, each observed within the last ``window`` calls:

* ``re_read:<path>`` — the exact same successful read again, with no write to
  that path in between (forgetting a recent tool result);
* ``repeated_query:<query>`` — the exact same successful search again, with no
  write in between (asking an already-answered question);
* ``contradiction:<path>`` — a path created or written, then deleted (or deleted
  then re-created).

Symptoms are counted by *what* was forgotten (the label above), not by how
often: the same label seen again replaces its older entry (and so stays in the
window).  One ``rm scratch.py`` followed by several writes to ``scratch.py`` is
one contradiction, not one per write; evidence of degradation is forgetting
several different things.  Invariant: the window never holds two symptoms with
the same label.

Fires when at least ``min_symptoms`` distinct symptoms are inside the window;
confidence grows with their number but stays <= 0.8 (heuristic evidence).  Work per call
is O(window) only for read/search/delete/create calls (``window`` is small and
independent of the analysis window).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from streams.core.errors import ConfigError
from streams.core.patterns import AnalysisView, ContextDegradation, ToolCallRecord
from streams.core.statecodec import state_type


@state_type("context_degradation.snapshot/1")
@dataclass(frozen=True, slots=True)
class ContextDegradationSnapshot:
    recent: tuple[ToolCallRecord, ...]
    symptoms: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True, slots=True)
class ContextDegradationDetector:
    window: int = 8
    min_symptoms: int = 2

    @property
    def name(self) -> str:
        return "context_degradation"

    def build(
        self, analysis_config: Any, snapshot: ContextDegradationSnapshot | None = None
    ) -> ContextDegradationLogic:
        if self.window < 2 or self.min_symptoms < 1:
            raise ConfigError(
                "context_degradation.window",
                f"window must be >= 2 and min_symptoms >= 1, got {self.window}/{self.min_symptoms}",
            )
        logic = ContextDegradationLogic(self.window, self.min_symptoms)
        if snapshot is not None:
            logic.recent.extend(snapshot.recent)
            logic.symptoms.extend(snapshot.symptoms)
        return logic


_WRITES = ("write", "create")


class ContextDegradationLogic:
    __slots__ = ("min_symptoms", "recent", "symptoms", "window")

    def __init__(self, window: int, min_symptoms: int) -> None:
        self.window = window
        self.min_symptoms = min_symptoms
        self.recent: deque[ToolCallRecord] = deque(maxlen=window)
        # (call_index, symptom, citation)
        self.symptoms: deque[tuple[int, str, str]] = deque()

    @property
    def name(self) -> str:
        return "context_degradation"

    def reset(self) -> None:
        self.recent.clear()
        self.symptoms.clear()

    def snapshot(self) -> ContextDegradationSnapshot:
        return ContextDegradationSnapshot(tuple(self.recent), tuple(self.symptoms))

    def _symptom(self, rec: ToolCallRecord) -> str | None:
        kind = rec.kind
        if kind in ("read", "search") and rec.success:
            for old in reversed(self.recent):
                invalidates = old.kind in _WRITES or (
                    old.kind == "delete" and old.resource == rec.resource
                )
                if invalidates and (
                    kind == "search" or old.resource is None or old.resource == rec.resource
                ):
                    return None
                if old.exact_key == rec.exact_key and old.success:
                    label = "re_read" if kind == "read" else "repeated_query"
                    return f"{label}:{rec.resource or rec.params_summary[:40]}"
            return None
        if kind == "delete" and rec.resource is not None:
            for old in self.recent:
                if old.kind in _WRITES and old.resource == rec.resource and old.success:
                    return f"contradiction:{rec.resource}"
            return None
        if kind == "create" and rec.resource is not None:
            for old in self.recent:
                if old.kind == "delete" and old.resource == rec.resource and old.success:
                    return f"contradiction:{rec.resource}"
        return None

    def detect(self, analysis: AnalysisView) -> ContextDegradation | None:
        rec = analysis.last_call
        if rec is None:
            return None
        symptom = None
        if rec.kind != "exec" and rec.kind != "other" and self.recent:
            symptom = self._symptom(rec)
        self.recent.append(analysis.last_compact or rec)
        syms = self.symptoms
        if symptom is not None:
            for i, (_, label, _) in enumerate(syms):
                if label == symptom:
                    del syms[i]  # one entry per label: refresh it, do not count it twice
                    break
            syms.append((rec.call_index, symptom, rec.cite()))
        oldest = rec.call_index - self.window
        while syms and syms[0][0] <= oldest:
            syms.popleft()
        if len(syms) < self.min_symptoms:
            return None
        n = len(syms)
        conf = min(0.8, 0.35 + 0.15 * (n - self.min_symptoms))
        return ContextDegradation(
            confidence=conf,
            evidence=tuple(c for _, _, c in syms),
            first_seen_ms=rec.timestamp_ms,
            call_index=rec.call_index,
            symptoms=tuple(s for _, s, _ in syms),
        )


__all__ = [
    "ContextDegradationDetector",
    "ContextDegradationLogic",
    "ContextDegradationSnapshot",
]
