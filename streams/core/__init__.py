"""The pure detector core: events, analysis, detectors, observers, assessments.

Everything here is plain Python over plain data (no Kafka, Faust or Avro import;
``tests/unit/test_import_layers.py`` checks it), and reads time only from
events, so the live worker, ``trajectory analyze`` and replays give the same
answers for the same events.
"""

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
from streams.core.config import EngineConfig, ObserverSpec, load_config
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
from streams.core.engine import EngineOutput, PatternDetection, SessionEngine, SessionState
from streams.core.errors import (
    ConfigError,
    InvalidEventError,
    StateDecodeError,
    TrajectoryError,
    UnserializableError,
)
from streams.core.events import EVENT_TYPES, Budget, TraceEvent
from streams.core.observers import (
    ObserverConfig,
    ObserverContext,
    ObserverState,
    ObserverTrigger,
    TrajectoryObserver,
)
from streams.core.pattern_observer import PatternObserver
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
from streams.core.resource import ResourceObserver
from streams.core.similarity import normalize_error, sequence_similarity
from streams.core.statecodec import decode_state, encode_state, to_canonical
from streams.core.summary import TraceSummary, summarize_events
from streams.core.tool_trajectory import evaluate_session, parse_config

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
