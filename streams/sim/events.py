"""Simulated sessions as :class:`TraceEvent` lists, without Kafka or the SDK.

Tests and benchmarks need realistic trajectories (every detector fires on the
pathological kinds) with deterministic event times.  The same session scripts
that ``trajectory simulate`` publishes (``streams.sim.scenarios``) are recorded
here by :class:`EventRecorder`, a stand-in for the SDK's ``Session`` that numbers
``seq`` and advances event time itself, so equal arguments give equal events.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from streams.core.events import Budget, TraceEvent
from streams.sim.driver import apply_action, drive
from streams.sim.fleet import FleetConfig
from streams.sim.scenarios import SessionKind, session_script, task_for

#: 2026-01-01T00:00:00Z, the default start of simulated event time.
T0_MS = 1_767_225_600_000
#: Default event-time step between two events of one session.
STEP_MS = 2_000


class EventRecorder:
    """An SDK-``Session``-shaped recorder: every call appends one TraceEvent.

    ``seq`` starts at 0; event time starts at ``t0_ms`` and advances by
    ``step_ms`` per event, or by a seeded random step in ``jitter_ms`` if given.
    """

    def __init__(
        self,
        out: list[TraceEvent],
        session_id: str,
        agent_id: str | None = None,
        *,
        t0_ms: int = T0_MS,
        step_ms: int = STEP_MS,
        jitter_ms: tuple[int, int] | None = None,
        seed: int | str = 0,
    ) -> None:
        self.out = out
        self.session_id = session_id
        self.agent_id = agent_id
        self.seq = 0
        self.calls = 0
        self.t = t0_ms
        self._step = step_ms
        self._jitter = jitter_ms
        self._rng = random.Random(seed)
        #: open tool calls: simulator call number -> call id (see ``apply_action``)
        self.call_ids: dict[int, str] = {}

    @property
    def session(self) -> EventRecorder:
        return self  # ``apply_action`` drives ``open_.session``

    def _add(self, type_: str, **kw: Any) -> None:
        self.out.append(
            TraceEvent(type_, self.session_id, self.seq, self.t, agent_id=self.agent_id, **kw)  # type: ignore[arg-type]
        )
        self.seq += 1
        self.t += self._rng.randint(*self._jitter) if self._jitter else self._step

    def start(self, **metadata: Any) -> None:
        self._add("session_start", metadata=metadata)

    def end(self) -> None:
        self._add("session_end")

    def control(self, type_: str, **metadata: Any) -> None:
        """A control event (``snapshot`` / ``restore``) with its metadata."""
        self._add(type_, metadata=metadata)

    def tool_call(self, name: str, input: Any = None) -> str:
        self.calls += 1
        call_id = f"c{self.calls}"
        self._add("tool_call", call_id=call_id, tool_name=name, input=input)
        return call_id

    def tool_result(
        self,
        call_id: str,
        output: Any = None,
        is_error: bool = False,
        error: str | None = None,
        latency_ms: int | None = None,
    ) -> None:
        self._add(
            "tool_result",
            call_id=call_id,
            output=output,
            is_error=is_error,
            error_message=error,
            latency_ms=latency_ms,
        )

    def model_step(
        self,
        text: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        latency_ms: int | None = None,
    ) -> None:
        self._add(
            "model_step",
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_ms=latency_ms,
        )

    def budget(self, *, max_tokens: int | None = None, tokens_used: int | None = None) -> None:
        self._add("budget", budget=Budget(max_tokens=max_tokens, tokens_used=tokens_used))


class _Collector:
    """A ``PublisherLike`` whose sessions are recorders into one list."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def session(self, session_id: str, **kwargs: Any) -> EventRecorder:
        return EventRecorder(self.events, session_id, kwargs.get("agent_id"))


def fleet_events(n: int, sessions: int, *, seed: int = 0, prefix: str = "sim") -> list[TraceEvent]:
    """About ``n`` events of a simulated fleet (healthy, looping, stalled and
    budget-burning sessions) with ``sessions`` sessions open at a time, in the
    order a fleet would publish them."""
    col = _Collector()
    rate = 1e9
    drive(
        col,
        FleetConfig(sessions=sessions, seed=seed, id_prefix=prefix),
        rate=rate,
        duration_s=n / rate,
        sleep=lambda s: None,
    )
    return col.events


def session_events(
    kind: SessionKind,
    seed: int,
    session_id: str,
    *,
    t0_ms: int = T0_MS,
    jitter_ms: tuple[int, int] = (200, 4_000),
) -> Iterator[TraceEvent]:
    """One simulated session of ``kind`` as an endless stream of events (take what
    you need): ``session_start`` with its task, then the kind's script."""
    out: list[TraceEvent] = []
    rec = EventRecorder(out, session_id, t0_ms=t0_ms, jitter_ms=jitter_ms, seed=seed)
    rec.start(task=task_for(kind))
    yield from out
    for action in session_script(kind, seed):
        out.clear()
        apply_action(rec, action)
        yield from out


__all__ = ["STEP_MS", "T0_MS", "EventRecorder", "fleet_events", "session_events"]
