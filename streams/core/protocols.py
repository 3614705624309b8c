"""Generic detector protocols: a detector's config, logic and snapshot types, tied.

Shaped like bytewax's windowers (``Windower[S].build(resume_state: S | None) ->
WindowerLogic[S]``, whose ``snapshot() -> S``): a detector is a frozen config
(:class:`Detector`) whose ``build`` makes the per-session logic
(:class:`DetectorLogic`), resumed from a snapshot of the very type that logic's
``snapshot()`` returns.  With the type parameter ``S`` the checker (mypy
--strict over ``streams/core``) proves that what a detector writes into a
:class:`~streams.core.analysis.AnalysisState` is what its config reads back:
``RepeatedErrorDetector`` is a ``Detector[RepeatedErrorSnapshot]``, and a build
that took or a logic that returned another snapshot type would not type-check.

These are static types only (not ``runtime_checkable``): the builder's runtime
checks stay :class:`~streams.core.patterns.DetectorFactory` and
:class:`~streams.core.patterns.PatternDetector`, which plugins already meet.
A snapshot type must be a registered state type (``@state_type`` in
:mod:`streams.core.statecodec`) so the worker can store it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from streams.core.patterns import AnalysisView, TrajectoryPattern

#: A detector's snapshot type (invariant: the config both reads and, through
#: its logic, writes it).
S = TypeVar("S")
#: The snapshot type as the logic returns it.
S_co = TypeVar("S_co", covariant=True)


class DetectorLogic(Protocol[S_co]):
    """One session's detector state: judges each completed call, snapshots to ``S_co``.

    Invariant: ``config.build(cfg, logic.snapshot())`` continues exactly as
    ``logic`` would have (same patterns for the same further events).
    """

    @property
    def name(self) -> str: ...
    def reset(self) -> None: ...
    def detect(self, analysis: AnalysisView) -> TrajectoryPattern | None: ...
    def snapshot(self) -> S_co: ...


class EventDetectorLogic(DetectorLogic[S_co], Protocol[S_co]):
    """A logic that also judges events that are not completed tool calls."""

    def on_event(self, event: Any, analysis: AnalysisView) -> TrajectoryPattern | None: ...


class Detector(Protocol[S]):
    """A detector's frozen configuration (shared by every session).

    ``build(analysis_config, snapshot)`` makes a fresh logic, resumed from
    ``snapshot`` (a value the logic's ``snapshot()`` returned) when one is given.
    """

    @property
    def name(self) -> str: ...
    def build(self, analysis_config: Any, snapshot: S | None = None) -> DetectorLogic[S]: ...


__all__ = ["Detector", "DetectorLogic", "EventDetectorLogic"]
