"""The whole path: simulator -> SDK -> per-session topics -> router -> <prefix>.events
-> Faust worker tables.  Real broker, real processes (router and worker run as
``python -m streams.commands.<name>`` subprocesses).

What must hold: every event every simulated session published shows up exactly
once in its session's table (counts equal what the driver says it sent, no seq
gaps), and the pathological sessions look pathological in the tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_worker import REPO, WorkerProc  # tests/integration is on sys.path (rootdir-less dir)

from streams.settings import Settings


@pytest.mark.timeout(300)
def test_simulated_fleet_reaches_worker_tables_exactly_once(
    settings: Settings, tmp_path: Path
) -> None:
    from streams.sdk import Publisher
    from streams.sim.driver import drive
    from streams.sim.fleet import FleetConfig

    router_log = (tmp_path / "router.log").open("wb")
    router = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streams.commands.router",
            "--bootstrap",
            settings.bootstrap,
            "--prefix",
            settings.prefix,
            "--partitions",
            str(settings.events_partitions),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=router_log,
        stderr=subprocess.STDOUT,
    )
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        with Publisher(settings) as pub:
            report = drive(
                pub,
                FleetConfig(sessions=8, pathological_share=0.5, seed=11, id_prefix="pl"),
                rate=150,
                duration_s=4,
            )
        expected = {sid: {"last_seq": n - 1} for sid, n in report.events_per_session.items()}
        assert len(expected) >= 8
        loops_checked = 0
        worker.wait_state(expected, timeout_s=150)
        for sid, n in report.events_per_session.items():
            status, body = worker.get(f"/sessions/{sid}/state")
            assert status == 200, body
            state = body["state"]
            assert state["events"] == n, (sid, state["events"], n)
            assert state["seq_gaps"] == 0, sid
            assert state["ended"], sid  # the driver closes every session
            if sid.endswith("-looping") and state["tool_calls"] >= 3:
                assert state["errors"] >= state["tool_calls"] - 2, sid
            if sid.endswith("-stalled"):
                assert state["errors"] == state["tool_results"], sid
            if sid.endswith("-budget_burner") and state["model_steps"] >= 8:
                budget = body["budget"]
                assert budget["tokens_used"] > budget["max_tokens"], (sid, budget)
            fired = state["patterns_fired"]
            if sid.endswith("-looping") and state["tool_calls"] >= 6:
                assert "doom_loop" in fired, (sid, fired)
                loops_checked += 1
            if sid.endswith("-stalled") and state["tool_calls"] >= 8:
                assert "progress_stall" in fired, (sid, fired)
            if sid.endswith("-healthy"):
                assert "doom_loop" not in fired, (sid, fired)
            if sid.endswith("-budget_burner") and state["model_steps"] >= 8:
                assert body["engine"]["assessment"]["severity"] in ("warning", "critical")
        assert sum(1 for s in expected if s.endswith("-healthy")) >= 4
        assert loops_checked >= 1  # the doom-loop check above really ran
    finally:
        code = worker.stop()
        router.terminate()
        try:
            router.wait(30)
        except subprocess.TimeoutExpired:
            router.kill()
            router.wait(10)
        router_log.close()
    assert code == 0, worker.log_tail()
