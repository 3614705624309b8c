"""The engine on real agent trajectories (``../shared/trajdata``; skipped when absent).

Accuracy of the severity policy (a false *warning* on a healthy run is costly):
clean, resolved mini-swe-agent runs must get no pattern warning, while SWE-agent
runs that burnt their whole cost budget (``exit_cost``, many of them looping on
a failing command) should mostly be flagged.  Every run's final state must also
survive the state codec byte for byte (real data exercises it far beyond the
synthetic cases).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from streams.core.engine import SessionEngine
from streams.core.statecodec import decode_state, encode_state

TRAJDATA = Path(
    os.environ.get("TRAJDATA_DIR")
    or Path(__file__).resolve().parents[3] / ".." / "shared" / "trajdata"
)


def _need(sub: str) -> Path:
    path = TRAJDATA / sub
    if not path.exists():
        pytest.skip(f"real trajectories not available at {path} (set TRAJDATA_DIR)")
    return path


def _run(path: Path) -> tuple[Counter[str], SessionEngine]:
    from streams.importers import read_events

    engine: SessionEngine | None = None
    severities: Counter[str] = Counter()
    for ev in read_events(path):
        if engine is None:
            engine = SessionEngine.create(ev.session_id)
        out = engine.on_event(ev)
        if out.assessment:
            for a in out.assessment.assessments:
                if a.observer_name == "Patterns":
                    severities[a.severity] += 1
    assert engine is not None, f"{path} produced no events"
    return severities, engine


def _roundtrip(engine: SessionEngine) -> None:
    data = encode_state(engine.snapshot())
    assert encode_state(decode_state(data)) == data


def test_resolved_mini_swe_agent_runs_get_no_pattern_warning() -> None:
    root = _need("mini-swe-agent")
    resolved = {
        x["instance_id"]: x["resolved"]
        for x in json.loads((root / "results.json").read_text())["instances"]
    }
    warned: list[str] = []
    checked = 0
    for path in sorted((root / "trajs").glob("*.traj.json.gz")):
        iid = path.name.split(".traj")[0]
        severities, engine = _run(path)
        _roundtrip(engine)
        if resolved.get(iid):
            checked += 1
            if severities["warning"]:
                warned.append(iid)
    assert checked >= 100
    assert warned == [], f"false pattern warnings on resolved runs: {warned}"


def test_budget_exhausted_swe_agent_runs_are_mostly_flagged() -> None:
    root = _need("swe-agent")
    flagged = total = 0
    for path in sorted(root.glob("*/trajs/*.traj.gz")):
        with gzip.open(path) as fh:
            status = str(json.load(fh).get("info", {}).get("exit_status"))
        severities, engine = _run(path)
        _roundtrip(engine)
        if "exit_cost" in status:
            total += 1
            flagged += bool(severities["warning"] or severities["caution"])
    assert total >= 100
    # measured 85 of 179 (47%) at the time of writing; 30% guards against regressions
    assert flagged / total >= 0.30, f"only {flagged}/{total} exit_cost runs flagged"
