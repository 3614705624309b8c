"""A fleet of simulated sessions interleaved into one deterministic step stream.

Why: the driver needs one ordered stream of "who does what next" across N
concurrent sessions, with a known share of pathological ones, reproducible from
a seed (so a demo or a test run can be repeated and its expected anomalies are
known).  Pure: no Kafka, no clock; :mod:`streams.sim.driver` paces it.

Invariants:

* Exactly ``round(sessions * pathological_share)`` slots run pathological kinds
  (cycling looping, stalled, budget_burner); the rest run healthy sessions.
* Per session: one ``start`` step, then its actions in script order, then (only
  for finite scripts) one ``end`` step; after an ``end`` the slot starts a new
  session of the same kind (``generation`` + 1), so the fleet size stays N.
* Session ids are ``<id_prefix>-<slot>-<generation>-<kind>``: valid topic names.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from streams.errors import ConfigError
from streams.settings import check_session_id
from streams.sim.scenarios import (
    PATHOLOGICAL_KINDS,
    SessionKind,
    SimAction,
    session_script,
    task_for,
)


@dataclass(frozen=True, slots=True)
class FleetConfig:
    sessions: int = 10
    seed: int = 0
    pathological_share: float = 0.25
    id_prefix: str = "sim"

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ConfigError("sessions", f"{self.sessions}: need at least 1 session")
        if not 0.0 <= self.pathological_share <= 1.0:
            raise ConfigError(
                "pathological_share", f"{self.pathological_share}: use a fraction in [0, 1]"
            )
        check_session_id(f"{self.id_prefix}-0-0-healthy")


@dataclass(frozen=True, slots=True)
class FleetStep:
    """``start`` (with ``kind``/``task``), ``action`` (with ``action``) or ``end``."""

    step: Literal["start", "action", "end"]
    session_id: str
    kind: SessionKind
    task: str | None = None
    action: SimAction | None = None


def fleet_kinds(cfg: FleetConfig) -> list[SessionKind]:
    """The kind of each slot (deterministic shuffle of the pathological ones)."""
    n_path = round(cfg.sessions * cfg.pathological_share)
    kinds: list[SessionKind] = [
        PATHOLOGICAL_KINDS[i % len(PATHOLOGICAL_KINDS)] for i in range(n_path)
    ]
    kinds += ["healthy"] * (cfg.sessions - n_path)
    random.Random(f"fleet:{cfg.seed}").shuffle(kinds)
    return kinds


@dataclass
class _Slot:
    index: int
    kind: SessionKind
    generation: int = 0
    script: Iterator[SimAction] | None = None

    def session_id(self, prefix: str) -> str:
        return f"{prefix}-{self.index}-{self.generation}-{self.kind}"


def fleet_steps(cfg: FleetConfig) -> Iterator[FleetStep]:
    """An endless, seeded interleaving of every slot's session steps."""
    rng = random.Random(f"steps:{cfg.seed}")
    slots = [_Slot(i, kind) for i, kind in enumerate(fleet_kinds(cfg))]
    while True:
        slot = slots[rng.randrange(len(slots))]
        sid = slot.session_id(cfg.id_prefix)
        if slot.script is None:
            slot.script = session_script(slot.kind, f"{cfg.seed}:{slot.index}:{slot.generation}")
            yield FleetStep("start", sid, slot.kind, task=task_for(slot.kind))
            continue
        action = next(slot.script, None)
        if action is None:
            yield FleetStep("end", sid, slot.kind)
            slot.generation += 1
            slot.script = None
            continue
        yield FleetStep("action", sid, slot.kind, action=action)


__all__ = ["FleetConfig", "FleetStep", "fleet_kinds", "fleet_steps"]
