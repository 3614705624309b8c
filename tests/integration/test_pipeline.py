"""The whole path: simulator -> SDK -> per-session topics -> router -> <prefix>.events
-> Faust worker tables.  Real broker, real processes (router and worker run as
``python -m streams.commands.<name>`` subprocesses).

What must hold: every event every simulated session published shows up exactly
once in its session's table (counts equal what the driver says it sent, no seq
gaps), and the pathological sessions look pathological in the tables.
"""

from __future__ import annotations

import pytest
from kafka_io import read_all
from procs import Pipeline

from streams.settings import Settings


@pytest.mark.timeout(300)
def test_simulated_fleet_reaches_worker_tables_exactly_once(
    settings: Settings, pipeline: Pipeline
) -> None:
    from streams.sdk import Publisher
    from streams.sim.driver import drive
    from streams.sim.fleet import FleetConfig

    worker = pipeline.worker  # the worker started first: it created the topics
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
    # the worker's outputs: patterns and assessments on their topics
    patterns = read_all(settings, settings.patterns_topic)
    assessments = read_all(settings, settings.assessments_topic)
    history = read_all(settings, settings.assessment_history_topic)
    from streams.serde import AssessmentSerde, PatternSerde

    pserde, aserde = PatternSerde(), AssessmentSerde()
    doom = {
        p.session_id
        for p in (pserde.decode(v) for _, v in patterns)
        if p.pattern_type == "doom_loop"
    }
    assert {s for s in expected if s.endswith("-looping")} & doom
    assert not {s for s in doom if s.endswith("-healthy")}
    assert all(k == aserde.decode(v).session_id.encode() for k, v in assessments)
    assert len(history) >= len(assessments) > 0
