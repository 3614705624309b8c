"""Run the core engine offline over a stream of events (``trajectory analyze``, replay).

:class:`OfflineAnalyzer` keeps one :class:`~streams.core.engine.SessionEngine` per
session id (events of several sessions may interleave, as they do in a topic)
and turns what each event produces into plain records:

* ``kind = "pattern"``: one per :class:`~streams.core.engine.PatternDetection`
  (a pattern that *fired* on that event), with ``pattern_type``, ``confidence``,
  ``occurrences``, ``evidence`` and a ``severity`` given by the configured
  ``pattern`` observer's policy (the default ``PatternObserver`` when the config
  has none), so the offline severity is the one the live worker would report;
* ``kind = "assessment"``: one per observer :class:`Assessment` produced on that
  event, with ``observer``, ``severity`` and the rendered markdown.

Every record has ``session_id``, ``seq`` and ``timestamp_ms`` of the event that
produced it and ``call_index``: the 1-based number of tool calls the session had
made when it fired.  Records are plain JSON values in a stable key order, so
``json.dumps`` of them is deterministic: the same events give the same lines.

Only event-triggered work runs here: timer assessments depend on when a timer
ran, not on the events, and are not reproduced offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from streams.core.assessment import CurrentAssessment
from streams.core.config import EngineConfig
from streams.core.engine import EngineOutput, SessionEngine
from streams.core.jsonl import ms_to_iso


def _pattern_severity_policy(config: EngineConfig) -> Any:
    for spec in config.observers:
        if spec.name == "pattern":
            observer = spec.build().observer
            if hasattr(observer, "pattern_severity"):
                return observer
    from streams.core.pattern_observer import PatternObserver

    return PatternObserver()


def pattern_text(pattern: Any) -> str:
    """A one-paragraph description of a fired pattern with its evidence."""
    head = (
        f"{pattern.pattern_type} (confidence {pattern.confidence:.0%}, "
        f"{pattern.occurrences} occurrence{'s' if pattern.occurrences != 1 else ''})"
    )
    evidence = tuple(pattern.evidence)
    if not evidence:
        return head
    return head + "\n" + "\n".join(f"  {line}" for line in evidence)


class OfflineAnalyzer:
    """Feeds events to per-session engines and yields pattern/assessment records."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self._engines: dict[str, SessionEngine] = {}
        self._policy = _pattern_severity_policy(self.config)

    @property
    def session_ids(self) -> tuple[str, ...]:
        return tuple(self._engines)

    def engine(self, session_id: str) -> SessionEngine:
        eng = self._engines.get(session_id)
        if eng is None:
            eng = SessionEngine.create(session_id, self.config)
            self._engines[session_id] = eng
        return eng

    def feed(self, event: Any) -> list[dict[str, Any]]:
        """Apply one event to its session's engine; the records it produced."""
        out = self.engine(event.session_id).on_event(event)
        return self.records(event, out)

    def records(self, event: Any, out: EngineOutput) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for det in out.patterns:
            p = det.pattern
            records.append(
                {
                    "session_id": det.session_id,
                    "seq": det.seq,
                    "call_index": det.call_index,
                    "timestamp": ms_to_iso(det.timestamp_ms),
                    "timestamp_ms": det.timestamp_ms,
                    "kind": "pattern",
                    "pattern_type": p.pattern_type,
                    "severity": self._policy.pattern_severity(p),
                    "confidence": p.confidence,
                    "occurrences": p.occurrences,
                    "evidence": list(p.evidence),
                    "text": pattern_text(p),
                }
            )
        current = out.assessment
        if current is not None:
            for a in current.assessments:
                records.append(
                    {
                        "session_id": current.session_id or event.session_id,
                        "seq": current.seq,
                        "call_index": current.call_index,
                        "timestamp": ms_to_iso(current.generated_at_ms),
                        "timestamp_ms": current.generated_at_ms,
                        "kind": "assessment",
                        "observer": a.observer_name,
                        "severity": a.severity,
                        "text": a.render(),
                    }
                )
        return records

    def final(self, session_id: str) -> CurrentAssessment | None:
        """The session's latest assessment (what an agent would be shown last)."""
        eng = self._engines.get(session_id)
        return None if eng is None else eng.current


def analyze_events(
    events: Iterable[Any], config: EngineConfig | None = None
) -> Iterator[dict[str, Any]]:
    """Every pattern detection and assessment the engine produces over *events*."""
    analyzer = OfflineAnalyzer(config)
    for event in events:
        yield from analyzer.feed(event)


__all__ = ["OfflineAnalyzer", "analyze_events", "pattern_text"]
