"""The issue's public types are importable from ``streams.core`` and listed in ``__all__``."""

import streams.core as core

REQUIRED = (
    "TrajectoryAnalysis",
    "TrajectoryBuilder",
    "TrajectoryAnalysisConfig",
    "TrajectoryPattern",
    "PatternDetector",
    "DoomLoop",
    "RepeatedError",
    "ProgressStall",
    "ToolAvoidance",
    "ContextDegradation",
    "DoomLoopDetector",
    "RepeatedErrorDetector",
    "ProgressStallDetector",
    "ToolAvoidanceDetector",
    "ContextDegradationDetector",
    "DEFAULT_DETECTORS",
    "TrajectoryObserver",
    "Assessment",
    "Observation",
    "CurrentAssessment",
    "ObserverTrigger",
    "Budget",
    "ResourceObserver",
    "SessionEngine",
)


def test_public_types_importable_and_exported() -> None:
    missing = [name for name in REQUIRED if not hasattr(core, name)]
    assert missing == []
    assert set(REQUIRED) <= set(core.__all__)
    assert all(hasattr(core, name) for name in core.__all__)
