"""The builder hands out a detector's previous snapshot object while nothing
called the detector since (streams/core/analysis.py ``_DetectorSlot.snap``).

Why: the worker encodes every active session's state at each commit, and with
one event per session per commit most of those events complete no tool call,
so no detector ran; re-building each detector's snapshot (and then re-encoding
the fresh composite) was a large part of the worker's CPU per event (issue #12).

What must hold: a snapshot taken at any point is exactly, byte for byte, the one
a builder that never snapshotted before would give after the same events: a
reused snapshot must never outlive a change of its detector.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.analysis import TrajectoryBuilder
from streams.core.config import EngineConfig
from streams.core.engine import SessionEngine
from streams.core.events import TraceEvent
from streams.core.statecodec import encode_state, to_canonical
from streams.sim.events import session_events
from streams.sim.scenarios import SESSION_KINDS

_CFG = EngineConfig()


def _events(kind: str, seed: int, n: int) -> list[TraceEvent]:
    events: Iterator[TraceEvent] = session_events(kind, seed, f"reuse-{kind}-{seed}")
    return list(islice(events, n))


def _fresh_state_bytes(events: list[TraceEvent]) -> bytes:
    """The state after ``events`` from an engine that never snapshotted before."""
    engine = SessionEngine.create(events[0].session_id, _CFG)
    for ev in events:
        engine.on_event(ev)
    return encode_state(engine.snapshot())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(SESSION_KINDS),
    seed=st.integers(0, 10_000),
    n=st.integers(5, 70),
    takes=st.lists(st.booleans(), min_size=70, max_size=70),
)
def test_a_snapshot_equals_a_fresh_engines_after_any_event_sequence(
    kind: str, seed: int, n: int, takes: list[bool]
) -> None:
    events = _events(kind, seed, n)
    live = SessionEngine.create(events[0].session_id, _CFG)
    for i, ev in enumerate(events):
        live.on_event(ev)
        if takes[i] or i == len(events) - 1:
            assert encode_state(live.snapshot()) == _fresh_state_bytes(events[: i + 1]), (
                f"{kind} seed {seed}: state after event {i} ({ev.type}) differs from a "
                "fresh engine's: a reused detector snapshot outlived a change"
            )


def test_an_event_that_completes_no_call_reuses_the_detector_snapshots() -> None:
    events = _events("looping", 3, 60)
    builder = TrajectoryBuilder()
    event_detectors = {slot.name for slot in builder._event_slots}  # run on every event
    assert event_detectors
    reused = fresh = 0
    for ev in events:
        first = builder.snapshot()
        before = dict(first.detectors)
        completed = first.completed_calls
        builder.on_event(ev)
        after = builder.snapshot()
        again = builder.snapshot()
        assert again.detectors == after.detectors
        for (name, snap), (_, snap2) in zip(after.detectors, again.detectors, strict=True):
            assert snap is snap2, f"{name}: no event in between, yet a new snapshot"
        for name, snap in after.detectors:
            if after.completed_calls == completed and name not in event_detectors:
                # no call completed, and not an event detector: nothing ran it
                assert snap is before[name], f"{name} rebuilt after a {ev.type} event"
                reused += 1
            elif snap is not before[name]:
                fresh += 1
    assert reused and fresh  # the workload exercises both


def test_reset_and_every_detector_call_make_the_next_snapshot_fresh() -> None:
    events = _events("stalled", 5, 40)
    builder = TrajectoryBuilder()
    for ev in events:
        builder.on_event(ev)
    held = builder.snapshot()
    builder.reset()
    empty = TrajectoryBuilder().snapshot()
    assert to_canonical(builder.snapshot()) == to_canonical(empty)
    assert to_canonical(held) != to_canonical(empty)
