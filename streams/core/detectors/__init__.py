"""Built-in pattern detectors (bytewax shape: frozen config → logic → snapshot).

``DEFAULT_DETECTORS`` holds every built-in detector's default config;
``FileChurnDetector`` is the plugin example and is not a default.
``BUILTIN_DETECTORS`` maps names to config classes for
:func:`streams.core.analysis.load_detector`.

Each built-in is a :class:`~streams.core.protocols.Detector` of its own
snapshot type; the ``TYPE_CHECKING`` block below makes mypy prove it (config,
logic and snapshot tied), at no runtime cost.
"""

from __future__ import annotations

import typing

from streams.core.detectors.alternating_cycle import AlternatingCycleDetector
from streams.core.detectors.context_degradation import ContextDegradationDetector
from streams.core.detectors.context_loop import ContextLoopDetector
from streams.core.detectors.doom_loop import DoomLoopDetector
from streams.core.detectors.drift import DriftDetector
from streams.core.detectors.error_cascade import ErrorCascadeDetector
from streams.core.detectors.file_churn import FileChurnDetector
from streams.core.detectors.monologue import MonologueDetector
from streams.core.detectors.progress_stall import ProgressStallDetector
from streams.core.detectors.repeated_error import RepeatedErrorDetector
from streams.core.detectors.thrashing import ThrashingDetector
from streams.core.detectors.tool_avoidance import ToolAvoidanceDetector

if typing.TYPE_CHECKING:
    from streams.core.detectors.alternating_cycle import AlternatingCycleSnapshot
    from streams.core.detectors.context_degradation import ContextDegradationSnapshot
    from streams.core.detectors.context_loop import ContextLoopSnapshot
    from streams.core.detectors.doom_loop import DoomLoopSnapshot
    from streams.core.detectors.drift import DriftSnapshot
    from streams.core.detectors.error_cascade import ErrorCascadeSnapshot
    from streams.core.detectors.monologue import MonologueSnapshot
    from streams.core.detectors.progress_stall import ProgressStallSnapshot
    from streams.core.detectors.repeated_error import RepeatedErrorSnapshot
    from streams.core.detectors.thrashing import ThrashingSnapshot
    from streams.core.detectors.tool_avoidance import ToolAvoidanceSnapshot
    from streams.core.protocols import Detector, EventDetectorLogic

    _TYPED: tuple[
        Detector[DoomLoopSnapshot],
        Detector[RepeatedErrorSnapshot],
        Detector[ProgressStallSnapshot],
        Detector[ToolAvoidanceSnapshot],
        Detector[ContextDegradationSnapshot],
        Detector[ErrorCascadeSnapshot],
        Detector[ThrashingSnapshot],
        Detector[DriftSnapshot],
        Detector[MonologueSnapshot],
        Detector[ContextLoopSnapshot],
        Detector[AlternatingCycleSnapshot],
        Detector[None],
    ] = (
        DoomLoopDetector(),
        RepeatedErrorDetector(),
        ProgressStallDetector(),
        ToolAvoidanceDetector(),
        ContextDegradationDetector(),
        ErrorCascadeDetector(),
        ThrashingDetector(),
        DriftDetector(),
        MonologueDetector(),
        ContextLoopDetector(),
        AlternatingCycleDetector(),
        FileChurnDetector(),
    )
    _EVENT_LOGIC: tuple[
        EventDetectorLogic[MonologueSnapshot], EventDetectorLogic[ContextLoopSnapshot]
    ] = (
        MonologueDetector().build(None),
        ContextLoopDetector().build(None),
    )

DEFAULT_DETECTORS: typing.Final[tuple[typing.Any, ...]] = (
    DoomLoopDetector(),
    RepeatedErrorDetector(),
    ProgressStallDetector(),
    ToolAvoidanceDetector(),
    ContextDegradationDetector(),
    ErrorCascadeDetector(),
    ThrashingDetector(),
    DriftDetector(),
    MonologueDetector(),
    ContextLoopDetector(),
    AlternatingCycleDetector(),
)

BUILTIN_DETECTORS: typing.Final[dict[str, type[typing.Any]]] = {
    "doom_loop": DoomLoopDetector,
    "repeated_error": RepeatedErrorDetector,
    "progress_stall": ProgressStallDetector,
    "tool_avoidance": ToolAvoidanceDetector,
    "context_degradation": ContextDegradationDetector,
    "error_cascade": ErrorCascadeDetector,
    "thrashing": ThrashingDetector,
    "drift": DriftDetector,
    "monologue": MonologueDetector,
    "context_loop": ContextLoopDetector,
    "alternating_cycle": AlternatingCycleDetector,
}

__all__ = [
    "BUILTIN_DETECTORS",
    "DEFAULT_DETECTORS",
    "AlternatingCycleDetector",
    "ContextDegradationDetector",
    "ContextLoopDetector",
    "DoomLoopDetector",
    "DriftDetector",
    "ErrorCascadeDetector",
    "FileChurnDetector",
    "MonologueDetector",
    "ProgressStallDetector",
    "RepeatedErrorDetector",
    "ThrashingDetector",
    "ToolAvoidanceDetector",
]
