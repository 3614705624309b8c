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
  and headers per the contract in :mod:`streams.snapshots`);
* a ``restore`` control event → the restored point's current assessment (if it
  has one) again to ``<prefix>.assessments`` only, so the compacted "latest" is
  not the abandoned branch's (the history already holds that assessment).

A timer-made assessment (:meth:`OutputEncoder.timer_records`, ``trigger="timer"``)
goes to ``<prefix>.assessments`` and ``<prefix>.assessment-history`` like an
event-made one; replay never reproduces it and ``compare_with_live`` skips it.

Nothing is produced for a duplicate (``out.applied`` is False).  The worker
sends outputs as they are made, and flushes them before the (write-behind)
state that covers their event is written, so after a crash the state is never
ahead of the outputs: a redelivered event whose state was lost re-emits the same
records (duplicates identifiable by (session_id, seq, kind)), one whose state
survived emits nothing and its outputs are already in Kafka (docs/guarantees.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from streams.core.config import EngineConfig
from streams.core.engine import EngineOutput, SessionState
from streams.core.events import TraceEvent

if TYPE_CHECKING:
    from streams.worker.processor import TimerAssessment
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
        from streams.replay.replay import assessment_wire, pattern_wire
        from streams.serde import AssessmentSerde, PatternSerde

        # looked up once: a function-level import runs the import machinery on every
        # call, and records() runs once per event (~0.4 us of its ~1.4 us)
        self._assessment_wire = assessment_wire
        self._pattern_wire = pattern_wire
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
        current = out.assessment
        etype = event.type
        if (
            not out.patterns
            and (current is None or not current.assessments)
            and etype != "restore"
            and etype != "snapshot"
        ):
            return []  # most events: nothing to publish
        assessment_wire = self._assessment_wire
        pattern_wire = self._pattern_wire
        key = event.session_id.encode("utf-8")
        recs: list[OutputRecord] = []
        for det in out.patterns:
            wire = pattern_wire(det, self.policy.pattern_severity(det.pattern), event)
            recs.append(OutputRecord("patterns", key, self.patterns.encode(wire)))
        if current is not None and current.assessments:
            value = self.assessments.encode(assessment_wire(current, event))
            recs.append(OutputRecord("assessments", key, value))
            recs.append(OutputRecord("assessment_history", key, value))
        if etype == "restore":
            restored = state().current
            if restored is not None and restored.assessments:
                value = self.assessments.encode(assessment_wire(restored, event))
                recs.append(OutputRecord("assessments", key, value))
        if etype == "snapshot":
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

    def timer_records(self, made: TimerAssessment) -> list[OutputRecord]:
        """The records of an assessment ``SessionEngine.on_timer`` made."""
        assessment_wire = self._assessment_wire
        current = made.assessment
        if not current.assessments:
            return []
        # assessment_wire reads session_id / parent_session_id / agent_id of the event
        value = self.assessments.encode(assessment_wire(current, made.lineage))  # type: ignore[arg-type]
        key = made.lineage.session_id.encode("utf-8")
        return [
            OutputRecord("assessments", key, value),
            OutputRecord("assessment_history", key, value),
        ]


__all__ = ["OutputEncoder", "OutputKind", "OutputRecord", "pattern_severity_policy"]
