"""Accuracy of the default detectors on real trajectories (skipped without trajdata).

* SWE-agent runs that repeat the same action 5+ times in a row must get a
  ``doom_loop`` within 3 calls of the loop's start, reaching confidence >= 0.9
  (what the pattern observer treats as a warning) within those 3 calls too.
* Resolved mini-swe-agent runs must rarely show a confident pattern: at most 5%
  of them may have any pattern with confidence >= 0.5.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.core.analysis import TrajectoryBuilder
from streams.core.events import TraceEvent


def _trajdata() -> Path:
    env = os.environ.get("TRAJDATA_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[3] / ".." / "shared" / "trajdata"
    if not path.is_dir():
        pytest.skip(f"trajdata not found at {path} (set TRAJDATA_DIR)")
    return path


def _read(path: Path) -> Iterator[TraceEvent]:
    importers = pytest.importorskip("streams.importers")
    return importers.read_events(path)  # type: ignore[no-any-return]


def _loops(events: list[TraceEvent], min_run: int = 5) -> list[tuple[int, int]]:
    """(1-based start call index, run length) of identical consecutive actions."""
    acts = [
        (e.tool_name, json.dumps(e.input, sort_keys=True)) for e in events if e.type == "tool_call"
    ]
    out = []
    start = 0
    for i in range(1, len(acts) + 1):
        if i == len(acts) or acts[i] != acts[start]:
            if i - start >= min_run:
                out.append((start + 1, i - start))
            start = i
    return out


def test_swe_agent_loops_are_caught_early() -> None:
    files = sorted(_trajdata().glob("swe-agent/*/trajs/*.traj.gz"))
    if not files:
        pytest.skip("no swe-agent trajectories")
    caught: list[str] = []
    missed: list[str] = []
    for f in files:
        events = list(_read(f))
        loops = _loops(events)
        if not loops:
            continue
        b = TrajectoryBuilder()
        fired = []
        confident_at: list[int] = []  # call indices where a doom_loop had confidence >= 0.9
        for e in events:
            fired.extend(b.on_event(e))
            loop = b.patterns().get("doom_loop")
            if loop is not None and loop.confidence >= 0.9 and b.last_call is not None:
                confident_at.append(b.last_call.call_index)
        for start, length in loops:
            ok = any(
                p.pattern_type == "doom_loop" and start <= p.call_index <= start + 3 for p in fired
            ) and any(start <= i <= start + 3 for i in confident_at)
            (caught if ok else missed).append(f"{f.name}@{start}x{length}")
    assert caught, "expected some 5+ repeat loops in the SWE-agent data"
    assert not missed, f"loops not flagged within 3 steps: {missed}"


def test_resolved_mini_swe_agent_runs_stay_mostly_quiet() -> None:
    root = _trajdata() / "mini-swe-agent"
    files = sorted(root.glob("trajs/*.traj.json.gz"))
    if not files:
        pytest.skip("no mini-swe-agent trajectories")
    results = json.loads((root / "results.json").read_text())
    resolved = {i["instance_id"] for i in results["instances"] if i["resolved"]}
    flagged: list[str] = []
    n = 0
    for f in files:
        iid = f.name.removesuffix(".traj.json.gz")
        if iid not in resolved:
            continue
        n += 1
        b = TrajectoryBuilder()
        fired = [p for e in _read(f) for p in b.on_event(e)]
        strong = [p for p in fired if p.confidence >= 0.5]
        if strong:
            flagged.append(f"{iid}: {[(p.pattern_type, round(p.confidence, 2)) for p in strong]}")
    assert n > 100
    assert len(flagged) <= 0.05 * n, flagged
