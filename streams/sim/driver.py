"""Pace a simulated fleet through the publisher SDK at a target event rate.

Why separate from the pure fleet: this is the only part that touches a clock
and Kafka (through ``streams.sdk.Publisher``).  ``clock``/``sleep`` are
injectable so the pacing can be unit-tested without waiting.

Invariants: ``rate * duration`` paced events are published (one per step:
``session_start``, the action, or ``session_end``), plus one closing
``session_end`` per session still open at the end; every session this driver
started is ended before :func:`drive` returns (pathological sessions never end
on their own), so each session's topic holds a complete trajectory.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.errors import ConfigError
from streams.sim.fleet import FleetConfig, FleetStep, fleet_steps
from streams.sim.scenarios import SimAction


class SessionLike(Protocol):
    def start(self) -> None: ...
    def end(self) -> None: ...
    def tool_call(self, name: str, input: Any = None) -> str: ...
    def tool_result(
        self,
        call_id: str,
        output: Any = None,
        is_error: bool = False,
        error: str | None = None,
        latency_ms: int | None = None,
    ) -> None: ...
    def model_step(
        self,
        text: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        latency_ms: int | None = None,
    ) -> None: ...
    def budget(self, *, max_tokens: int | None = None, tokens_used: int | None = None) -> None: ...


class PublisherLike(Protocol):
    """What :func:`drive` needs of a publisher (:class:`streams.sdk.Publisher` is one)."""

    def session(
        self,
        session_id: str,
        *,
        agent_id: str | None = ...,
        task: str | None = ...,
        flush_on_exit: bool = ...,
    ) -> SessionLike: ...


@dataclass
class DriveReport:
    """What a run published (events per session count session_start/end too)."""

    events: int = 0
    elapsed_s: float = 0.0
    started: int = 0
    ended: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    events_per_session: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0


class _Open:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.call_ids: dict[int, str] = {}


class OpenSession(Protocol):
    """A session being driven: its SDK ``Session`` and its open tool-call ids."""

    @property
    def session(self) -> SessionLike: ...

    call_ids: dict[int, str]


def apply_action(open_: OpenSession, action: SimAction) -> None:
    """Publish one simulated action through the SDK session (the one place that
    maps :class:`SimAction` to SDK calls; ``tests/bench/bench_latency.py`` uses it too)."""
    s = open_.session
    if action.kind == "tool_call":
        assert action.tool_name is not None and action.call is not None
        open_.call_ids[action.call] = s.tool_call(action.tool_name, action.input)
    elif action.kind == "tool_result":
        assert action.call is not None
        s.tool_result(
            open_.call_ids.pop(action.call),
            action.output,
            is_error=action.is_error,
            error=action.error,
            latency_ms=action.latency_ms,
        )
    elif action.kind == "model_step":
        s.model_step(
            action.text,
            input_tokens=action.input_tokens,
            output_tokens=action.output_tokens,
            latency_ms=action.latency_ms,
        )
    elif action.kind == "budget":
        s.budget(max_tokens=action.max_tokens, tokens_used=0)
    else:  # pragma: no cover - SimAction.kind is a closed Literal
        raise ConfigError("action.kind", f"unknown simulated action {action.kind!r}")


def drive(
    publisher: PublisherLike,
    cfg: FleetConfig,
    *,
    rate: float,
    duration_s: float,
    progress: Callable[[DriveReport], None] | None = None,
    progress_every_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DriveReport:
    """Publish ``rate`` events/s in total across the fleet for ``duration_s`` seconds."""
    if rate <= 0:
        raise ConfigError("rate", f"{rate}: events per second must be > 0")
    if duration_s <= 0:
        raise ConfigError("duration", f"{duration_s}: seconds must be > 0")
    report = DriveReport()
    budget_events = int(rate * duration_s)
    sessions: dict[str, _Open] = {}
    steps = fleet_steps(cfg)
    t0 = clock()
    next_progress = t0 + progress_every_s
    try:
        while report.events < budget_events:
            due = t0 + report.events / rate
            now = clock()
            if due > now:
                sleep(due - now)
            step: FleetStep = next(steps)
            if step.step == "start":
                s = publisher.session(
                    step.session_id,
                    agent_id=f"sim-{step.kind}",
                    task=step.task,
                    flush_on_exit=False,
                )
                s.start()
                sessions[step.session_id] = _Open(s)
                report.started += 1
                report.kinds[step.kind] += 1
            elif step.step == "end":
                sessions.pop(step.session_id).session.end()
                report.ended += 1
            else:
                assert step.action is not None
                apply_action(sessions[step.session_id], step.action)
            report.events += 1
            report.events_per_session[step.session_id] += 1
            if progress is not None and clock() >= next_progress:
                report.elapsed_s = clock() - t0
                progress(report)
                next_progress += progress_every_s
    finally:
        # close what is open so every published session is complete (also on Ctrl-C)
        for sid, open_ in list(sessions.items()):
            open_.session.end()
            report.events += 1
            report.events_per_session[sid] += 1
            report.ended += 1
        report.elapsed_s = clock() - t0
    return report


__all__ = ["DriveReport", "PublisherLike", "SessionLike", "drive"]
