"""The engine's outputs and state, byte for byte, against digests taken before
the core was restructured for speed (issue #12).

Why: the worker and offline replay run the same engine and must agree byte for
byte, and the per-event fast paths (cached budget view, one judgement per
observer run, incremental pattern views) are only correct if they change
*nothing* a consumer can see.  Each workload runs through
:class:`~streams.core.engine.SessionEngine` with the default configuration and
everything observable is hashed per session:

* every :class:`~streams.core.engine.EngineOutput` (``repr``: patterns with all
  their fields, the current assessment with its trend, ``applied``);
* every rendered assessment (the markdown injected into the agent's prompt);
* ``repr(engine.snapshot())`` every 25 applied events and at the end (the whole
  stored state: analysis window, detector snapshots, observer counters, history);
* ``on_timer`` results every 40 events, one minute of event time after the event.

``repr`` rather than the state codec's bytes keeps these digests independent of
the codec's encoding (its own golden tests pin that).  The digests in
``tests/fixtures/core_engine_digests.json`` were computed with the unrestructured
core (``python tests/unit/core/test_engine_digest.py --write`` on main).

Workloads: simulated fleets (``streams.sim``, always run) and every session of
``../shared/trajdata`` (skipped when absent).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from engine_sessions import mixed_events

from streams.core.engine import SessionEngine
from streams.core.events import TraceEvent

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "core_engine_digests.json"
TRAJDATA = Path(
    os.environ.get("TRAJDATA_DIR")
    or Path(__file__).resolve().parents[3] / ".." / "shared" / "trajdata"
)
SNAPSHOT_EVERY = 25
TIMER_EVERY = 40
SIM_SEEDS = (0, 1, 2)
MIXED_SEEDS = (0, 1, 2, 3)


def session_digests(events: Iterable[TraceEvent]) -> dict[str, str]:
    """Per session id: sha256 over everything the engine made of its events."""
    engines: dict[str, SessionEngine] = {}
    hashes: dict[str, hashlib._Hash] = {}
    counts: dict[str, int] = {}
    for ev in events:
        sid = ev.session_id
        engine = engines.get(sid)
        if engine is None:
            engine = engines[sid] = SessionEngine.create(sid)
            hashes[sid] = hashlib.sha256()
            counts[sid] = 0
        h = hashes[sid]
        out = engine.on_event(ev)
        h.update(repr(out).encode())
        if out.assessment is not None:
            h.update(out.assessment.render().encode())
        n = counts[sid] = counts[sid] + 1
        if n % SNAPSHOT_EVERY == 0:
            h.update(repr(engine.snapshot()).encode())
        if n % TIMER_EVERY == 0:
            timed = engine.on_timer(ev.timestamp_ms + 60_000)
            h.update(repr(timed).encode())
            if timed is not None:
                h.update(timed.render().encode())
    for sid, engine in engines.items():
        hashes[sid].update(repr(engine.snapshot()).encode())
    return {sid: h.hexdigest() for sid, h in sorted(hashes.items())}


def sim_workloads() -> Iterator[tuple[str, list[TraceEvent]]]:
    from streams.sim.events import fleet_events

    for seed in SIM_SEEDS:
        yield f"sim-{seed}", fleet_events(6_000, 60, seed=seed, prefix=f"d{seed}")
    for seed in MIXED_SEEDS:
        yield f"mixed-{seed}", mixed_events(seed)


def trajdata_files() -> list[Path]:
    if not TRAJDATA.exists():
        return []
    return sorted(p for p in TRAJDATA.rglob("*.gz") if p.is_file())


def file_digests(path: Path) -> dict[str, str]:
    from streams.importers import read_events

    return session_digests(read_events(path))


def _expected() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(FIXTURE.read_text())
    return data


def _diff(name: str, want: dict[str, str], got: dict[str, str]) -> str:
    changed = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    return f"{name}: {len(changed)} of {len(want)} sessions differ, e.g. {changed[:5]}"


@pytest.mark.parametrize(
    "name", [f"sim-{s}" for s in SIM_SEEDS] + [f"mixed-{s}" for s in MIXED_SEEDS]
)
def test_generated_sessions_outputs_and_state_are_unchanged(name: str) -> None:
    want = _expected()[name]
    events = dict(sim_workloads())[name]
    got = session_digests(events)
    assert got == want, _diff(name, want, got)


def test_real_trajectories_outputs_and_state_are_unchanged() -> None:
    files = trajdata_files()
    if not files:
        pytest.skip(f"real trajectories not available at {TRAJDATA} (set TRAJDATA_DIR)")
    expected = _expected()
    checked = 0
    problems: list[str] = []
    for path in files:
        name = "trajdata/" + path.relative_to(TRAJDATA).as_posix()
        want = expected.get(name)
        if want is None:
            problems.append(f"{name}: no digest in the fixture (new file? re-run with --write)")
            continue
        got = file_digests(path)
        checked += len(got)
        if got != want:
            problems.append(_diff(name, want, got))
    assert not problems, "\n".join(problems[:20])
    assert checked >= 400


def _write() -> None:
    """Recompute the fixture (only on a core whose outputs are known good)."""
    data: dict[str, dict[str, str]] = {name: session_digests(evs) for name, evs in sim_workloads()}
    for path in trajdata_files():
        data["trajdata/" + path.relative_to(TRAJDATA).as_posix()] = file_digests(path)
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}: {sum(len(v) for v in data.values())} sessions")


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        _write()
    else:
        print(__doc__)
