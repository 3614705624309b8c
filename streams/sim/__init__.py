"""Simulated agent fleets: seeded session scripts (pure) and a driver for the SDK.

``scenarios`` and ``fleet`` are pure and deterministic; ``driver`` paces a fleet
through :class:`streams.sdk.Publisher` (imported only when driving).
"""

from streams.sim.fleet import FleetConfig, FleetStep, fleet_kinds, fleet_steps
from streams.sim.scenarios import (
    PATHOLOGICAL_KINDS,
    SESSION_KINDS,
    SessionKind,
    SimAction,
    session_script,
)

__all__ = [
    "PATHOLOGICAL_KINDS",
    "SESSION_KINDS",
    "FleetConfig",
    "FleetStep",
    "SessionKind",
    "SimAction",
    "fleet_kinds",
    "fleet_steps",
    "session_script",
]
