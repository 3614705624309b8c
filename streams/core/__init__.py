"""The pure detector core: events, analysis, detectors, observers, assessments.

Everything here is plain Python over plain data (no Kafka, Faust or Avro import;
``tests/unit/test_import_layers.py`` checks it), and reads time only from
events, so the live worker, ``trajectory analyze`` and replays give the same
answers for the same events.

The names below load on first use (PEP 562), so importing one core module
(``streams.core.errors`` from ``streams.errors``, say) does not import the whole core.
"""

from __future__ import annotations

import typing

from streams.core.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:  # the real types for type checkers; at run time __getattr__ loads them
    from streams.core.analysis import (
        AnalysisState,
        TrajectoryAnalysis,
        TrajectoryAnalysisConfig,
        TrajectoryBuilder,
        load_detector,
    )
    from streams.core.assessment import (
        Assessment,
        AssessmentHistory,
        CurrentAssessment,
        Observation,
        build_context,
    )
    from streams.core.config import (
        EngineConfig,
        ObserverSpec,
        load_config,
    )
    from streams.core.detectors import (
        DEFAULT_DETECTORS,
        ContextDegradationDetector,
        DoomLoopDetector,
        DriftDetector,
        ErrorCascadeDetector,
        FileChurnDetector,
        ProgressStallDetector,
        RepeatedErrorDetector,
        ThrashingDetector,
        ToolAvoidanceDetector,
    )
    from streams.core.engine import (
        EngineOutput,
        PatternDetection,
        SessionEngine,
        SessionState,
    )
    from streams.core.errors import (
        ConfigError,
        InvalidEventError,
        StateDecodeError,
        TrajectoryError,
        UnserializableError,
    )
    from streams.core.events import (
        EVENT_TYPES,
        Budget,
        TraceEvent,
    )
    from streams.core.observers import (
        ObserverConfig,
        ObserverContext,
        ObserverState,
        ObserverTrigger,
        TrajectoryObserver,
    )
    from streams.core.pattern_observer import (
        PatternObserver,
    )
    from streams.core.patterns import (
        ContextDegradation,
        DoomLoop,
        Drift,
        ErrorCascade,
        FileChurn,
        PatternDetector,
        ProgressStall,
        RepeatedError,
        Thrashing,
        ToolAvoidance,
        ToolCallRecord,
        TrajectoryPattern,
    )
    from streams.core.resource import (
        ResourceObserver,
    )
    from streams.core.similarity import (
        normalize_error,
        sequence_similarity,
    )
    from streams.core.statecodec import (
        decode_state,
        encode_state,
        to_canonical,
    )
    from streams.core.summary import (
        TraceSummary,
        summarize_events,
    )
    from streams.core.tool_trajectory import (
        evaluate_session,
        parse_config,
    )

_LAZY: dict[str, str] = {
    "AnalysisState": "streams.core.analysis",
    "Assessment": "streams.core.assessment",
    "AssessmentHistory": "streams.core.assessment",
    "Budget": "streams.core.events",
    "ConfigError": "streams.core.errors",
    "ContextDegradation": "streams.core.patterns",
    "ContextDegradationDetector": "streams.core.detectors",
    "CurrentAssessment": "streams.core.assessment",
    "DEFAULT_DETECTORS": "streams.core.detectors",
    "DoomLoop": "streams.core.patterns",
    "DoomLoopDetector": "streams.core.detectors",
    "Drift": "streams.core.patterns",
    "DriftDetector": "streams.core.detectors",
    "EVENT_TYPES": "streams.core.events",
    "EngineConfig": "streams.core.config",
    "EngineOutput": "streams.core.engine",
    "ErrorCascade": "streams.core.patterns",
    "ErrorCascadeDetector": "streams.core.detectors",
    "FileChurn": "streams.core.patterns",
    "FileChurnDetector": "streams.core.detectors",
    "InvalidEventError": "streams.core.errors",
    "Observation": "streams.core.assessment",
    "ObserverConfig": "streams.core.observers",
    "ObserverContext": "streams.core.observers",
    "ObserverSpec": "streams.core.config",
    "ObserverState": "streams.core.observers",
    "ObserverTrigger": "streams.core.observers",
    "PatternDetection": "streams.core.engine",
    "PatternDetector": "streams.core.patterns",
    "PatternObserver": "streams.core.pattern_observer",
    "ProgressStall": "streams.core.patterns",
    "ProgressStallDetector": "streams.core.detectors",
    "RepeatedError": "streams.core.patterns",
    "RepeatedErrorDetector": "streams.core.detectors",
    "ResourceObserver": "streams.core.resource",
    "SessionEngine": "streams.core.engine",
    "SessionState": "streams.core.engine",
    "StateDecodeError": "streams.core.errors",
    "Thrashing": "streams.core.patterns",
    "ThrashingDetector": "streams.core.detectors",
    "ToolAvoidance": "streams.core.patterns",
    "ToolAvoidanceDetector": "streams.core.detectors",
    "ToolCallRecord": "streams.core.patterns",
    "TraceEvent": "streams.core.events",
    "TraceSummary": "streams.core.summary",
    "TrajectoryAnalysis": "streams.core.analysis",
    "TrajectoryAnalysisConfig": "streams.core.analysis",
    "TrajectoryBuilder": "streams.core.analysis",
    "TrajectoryError": "streams.core.errors",
    "TrajectoryObserver": "streams.core.observers",
    "TrajectoryPattern": "streams.core.patterns",
    "UnserializableError": "streams.core.errors",
    "build_context": "streams.core.assessment",
    "decode_state": "streams.core.statecodec",
    "encode_state": "streams.core.statecodec",
    "evaluate_session": "streams.core.tool_trajectory",
    "load_config": "streams.core.config",
    "load_detector": "streams.core.analysis",
    "normalize_error": "streams.core.similarity",
    "parse_config": "streams.core.tool_trajectory",
    "sequence_similarity": "streams.core.similarity",
    "summarize_events": "streams.core.summary",
    "to_canonical": "streams.core.statecodec",
}


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_DETECTORS",
    "EVENT_TYPES",
    "AnalysisState",
    "Assessment",
    "AssessmentHistory",
    "Budget",
    "ConfigError",
    "ContextDegradation",
    "ContextDegradationDetector",
    "CurrentAssessment",
    "DoomLoop",
    "DoomLoopDetector",
    "Drift",
    "DriftDetector",
    "EngineConfig",
    "EngineOutput",
    "ErrorCascade",
    "ErrorCascadeDetector",
    "FileChurn",
    "FileChurnDetector",
    "InvalidEventError",
    "Observation",
    "ObserverConfig",
    "ObserverContext",
    "ObserverSpec",
    "ObserverState",
    "ObserverTrigger",
    "PatternDetection",
    "PatternDetector",
    "PatternObserver",
    "ProgressStall",
    "ProgressStallDetector",
    "RepeatedError",
    "RepeatedErrorDetector",
    "ResourceObserver",
    "SessionEngine",
    "SessionState",
    "StateDecodeError",
    "Thrashing",
    "ThrashingDetector",
    "ToolAvoidance",
    "ToolAvoidanceDetector",
    "ToolCallRecord",
    "TraceEvent",
    "TraceSummary",
    "TrajectoryAnalysis",
    "TrajectoryAnalysisConfig",
    "TrajectoryBuilder",
    "TrajectoryError",
    "TrajectoryObserver",
    "TrajectoryPattern",
    "UnserializableError",
    "build_context",
    "decode_state",
    "encode_state",
    "evaluate_session",
    "load_config",
    "load_detector",
    "normalize_error",
    "parse_config",
    "sequence_similarity",
    "summarize_events",
    "to_canonical",
]
