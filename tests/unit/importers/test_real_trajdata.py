"""Every file of every format in the shared real-trajectory folder imports cleanly.

Skipped when the folder is absent (set ``TRAJDATA_DIR`` to point elsewhere).
Counts checked against the folder's README and ground-truth files.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from importer_invariants import check_invariants

from streams.core.events import TraceEvent
from streams.importers import detect_format, read_events

TRAJDATA = Path(
    os.environ.get("TRAJDATA_DIR")
    or Path(__file__).resolve().parents[3] / ".." / "shared" / "trajdata"
)

pytestmark = pytest.mark.skipif(
    not TRAJDATA.is_dir(), reason=f"real trajectories not found at {TRAJDATA} (set TRAJDATA_DIR)"
)


def _files(pattern: str) -> list[Path]:
    files = sorted(TRAJDATA.glob(pattern))
    if not files:
        pytest.skip(f"no {pattern} under {TRAJDATA}")
    return files


def _import(files: list[Path], fmt: str) -> dict[str, list[TraceEvent]]:
    sessions: dict[str, list[TraceEvent]] = {}
    for f in files:
        assert detect_format(f) == fmt, f
        events = list(read_events(f))
        check_invariants(events)
        for ev in events:
            sessions.setdefault(ev.session_id, []).append(ev)
    return sessions


def _ends(sessions: dict[str, list[TraceEvent]]) -> list[TraceEvent]:
    ends = [evs[-1] for evs in sessions.values()]
    assert all(e.type == "session_end" for e in ends)
    return ends


def test_swe_agent_all_runs() -> None:
    files = _files("swe-agent/*/trajs/*.traj*")
    sessions = _import(files, "swe-agent")
    assert len(sessions) == len(files)  # one run per file, ids unique across models
    statuses = Counter(e.metadata.get("exit_status", "<crashed>") for e in _ends(sessions))
    # README: submitted (exit_cost), submitted, exit_cost, early_exit, null = crashed
    assert set(statuses) <= {
        "submitted (exit_cost)",
        "submitted",
        "exit_cost",
        "early_exit",
        "<crashed>",
    }
    crashed = sum(e.metadata["crashed"] == "true" for e in _ends(sessions))
    assert crashed == statuses["<crashed>"]
    calls = [sum(e.type == "tool_call" for e in evs) for evs in sessions.values()]
    assert min(calls) >= 1 and max(calls) < 500
    errors = sum(e.type == "tool_result" and e.is_error for evs in sessions.values() for e in evs)
    results = sum(e.type == "tool_result" for evs in sessions.values() for e in evs)
    # failures are common in these runs (missing JDKs, loops) but not the majority
    assert 0.05 < errors / results < 0.6
    assert all(evs[-2].type == "budget" for evs in sessions.values())
    for evs in sessions.values():
        # runs the harness stopped on cost carry its exit as a message, not a tool call
        harness = any(e.metadata.get("harness_exit") == "exit_cost" for e in evs)
        assert harness == ("exit_cost" in evs[-1].metadata.get("exit_status", ""))
        assert not any(e.type == "tool_call" and e.tool_name == "exit_cost" for e in evs)


def test_mini_swe_agent_all_runs() -> None:
    files = _files("mini-swe-agent/trajs/*.traj.json*")
    sessions = _import(files, "mini-swe-agent")
    assert len(sessions) == len(files)
    results_file = TRAJDATA / "mini-swe-agent" / "results.json"
    if results_file.is_file():
        ids = {i["instance_id"] for i in json.loads(results_file.read_text())["instances"]}
        assert set(sessions) <= ids
    for sid, evs in sessions.items():
        steps = [e for e in evs if e.type == "model_step"]
        assert steps and all(s.input_tokens for s in steps), sid
        assert sum(e.type == "tool_call" for e in evs) >= 1
    errors = sum(e.type == "tool_result" and e.is_error for evs in sessions.values() for e in evs)
    results = sum(e.type == "tool_result" for evs in sessions.values() for e in evs)
    assert 0.01 < errors / results < 0.3  # mostly clean runs


def test_openhands_all_runs() -> None:
    files = _files("openhands/*.jsonl*")
    sessions = _import(files, "openhands")
    lines = sum(1 for f in files for _ in read_events(f) if _.type == "session_start")
    assert len(sessions) == lines >= 1
    ends = _ends(sessions)
    assert any("maximum iteration" in e.metadata.get("error", "") for e in ends)
    for evs in sessions.values():
        assert any(e.type == "tool_result" and e.is_error for e in evs)
        assert evs[0].metadata["task"]


def test_tau_bench_all_runs() -> None:
    files = _files("tau-bench/*.json*")
    sessions = _import(files, "openai-chat")
    raw = 0
    solved = 0
    for f in files:
        import gzip

        data = f.read_bytes()
        runs = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        raw += len(runs)
        solved += sum(r["reward"] >= 1.0 for r in runs)
    assert len(sessions) == raw
    ends = _ends(sessions)
    assert sum(e.metadata["resolved"] == "true" for e in ends) == solved
    errors = [e for evs in sessions.values() for e in evs if e.type == "tool_result" and e.is_error]
    assert errors and all(str(e.output).startswith("Error:") for e in errors)
