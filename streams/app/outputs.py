"""What the worker publishes after applying an event (pure: builds records, sends nothing).

Why separate: the Faust agent only sends what :func:`output_records` returns, so
the wire contract can be unit-tested without Kafka.  The values are exactly the
ones replay produces (``streams.replay.replay.pattern_wire`` /
``assessment_wire``), so ``trajectory replay --compare-live`` can diff them.

Per applied event (``out.applied``):

* every fired pattern → ``<prefix>.patterns`` (key = session id, Avro
  ``PatternDetection``, severity from the pattern observer's policy);
* a new assessment with at least one observer assessment →
  ``<prefix>.assessments`` (compacted: the latest per session) **and**
  ``<prefix>.assessment-history`` (every one, time-retained);
* a ``snapshot`` control event → ``<prefix>.snapshots`` (compacted; key, value
  and headers per the contract in :mod:`streams.snapshots`).

Nothing is produced for a duplicate (``out.applied`` is False): outputs follow
the tables' exactly-once application.  Known gap: if a worker is SIGKILLed after
its local RocksDB write but before the outputs were flushed, and restarts on the
same data dir, the redelivered event is a duplicate and its outputs are not
re-sent (the tables are repaired, the outputs are not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from streams.core.config import EngineConfig
from streams.core.engine import EngineOutput, SessionState
from streams.core.events import TraceEvent
from streams.settings import Settings

OutputKind = Literal["patterns", "assessments", "assessment_history", "snapshots"]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    kind: OutputKind
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def pattern_severity_policy(config: EngineConfig | None) -> Any:
    """The configured pattern observer (it owns ``pattern_severity``), else the default.

    Same choice as ``streams.importers.offline`` makes, so live and replay agree.
    """
    cfg = config if config is not None else EngineConfig()
    for spec in cfg.observers:
        if spec.name == "pattern":
            observer = spec.build().observer
            if hasattr(observer, "pattern_severity"):
                return observer
    from streams.core.pattern_observer import PatternObserver

    return PatternObserver()


class OutputEncoder:
    """Encodes engine outputs with the same framing the SDK uses for events."""

    def __init__(self, settings: Settings, engine_config: EngineConfig | None = None) -> None:
        from streams.serde import AssessmentSerde, PatternSerde

        framing = "confluent" if settings.schema_registry_url else "single-object"
        registry = settings.schema_registry_url
        self.patterns = PatternSerde(framing, registry=registry)
        self.assessments = AssessmentSerde(framing, registry=registry)
        self.policy = pattern_severity_policy(engine_config)

    def records(
        self,
        event: TraceEvent,
        out: EngineOutput | None,
        state: Callable[[], SessionState],
    ) -> list[OutputRecord]:
        """The records to publish for ``event``; ``state()`` gives the engine's state now."""
        if out is None or not out.applied:
            return []
        from streams.replay.replay import assessment_wire, pattern_wire

        key = event.session_id.encode("utf-8")
        recs: list[OutputRecord] = []
        for det in out.patterns:
            wire = pattern_wire(det, self.policy.pattern_severity(det.pattern), event)
            recs.append(OutputRecord("patterns", key, self.patterns.encode(wire)))
        current = out.assessment
        if current is not None and current.assessments:
            value = self.assessments.encode(assessment_wire(current, event))
            recs.append(OutputRecord("assessments", key, value))
            recs.append(OutputRecord("assessment_history", key, value))
        if event.type == "snapshot":
            from streams.core.events import META_SNAPSHOT_ID
            from streams.snapshots import snapshot_headers, snapshot_key, snapshot_value

            snap = event.metadata[META_SNAPSHOT_ID]
            recs.append(
                OutputRecord(
                    "snapshots",
                    snapshot_key(event.session_id, snap),
                    snapshot_value(state(), snap),
                    tuple(snapshot_headers(event)),
                )
            )
        return recs


__all__ = ["OutputEncoder", "OutputKind", "OutputRecord", "pattern_severity_policy"]
