"""Simulated sessions: deterministic, shaped as their kind says; the driver paces and closes."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from streams.errors import ConfigError
from streams.sim import FleetConfig, fleet_kinds, fleet_steps, session_script
from streams.sim.driver import drive
from streams.sim.scenarios import SimAction


def take(kind: str, n: int, seed: int = 1) -> list[SimAction]:
    return list(itertools.islice(session_script(kind, seed), n))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["healthy", "looping", "stalled", "budget_burner"])
def test_scripts_are_deterministic_per_seed(kind: str) -> None:
    assert take(kind, 60, seed=3) == take(kind, 60, seed=3)
    assert take(kind, 60, seed=3) != take(kind, 60, seed=4)


@pytest.mark.parametrize("kind", ["healthy", "looping", "stalled", "budget_burner"])
def test_results_follow_their_calls(kind: str) -> None:
    open_calls: set[int] = set()
    for a in take(kind, 200):
        if a.kind == "tool_call":
            assert a.call is not None and a.call not in open_calls
            open_calls.add(a.call)
        elif a.kind == "tool_result":
            assert a.call in open_calls
            open_calls.remove(a.call)


def test_healthy_reads_edits_passes_and_submits() -> None:
    for seed in range(20):
        actions = list(session_script("healthy", seed))
        calls = [a.tool_name for a in actions if a.kind == "tool_call"]
        results = [a for a in actions if a.kind == "tool_result"]
        assert "read_file" in calls and "edit_file" in calls
        assert calls[-1] == "submit" and calls[-2] == "run_tests"
        assert not results[-1].is_error and not results[-2].is_error  # tests green, submitted


def test_looping_repeats_one_failing_call() -> None:
    results = [a for a in take("looping", 200) if a.kind == "tool_result"]
    calls = [(a.tool_name, str(a.input)) for a in take("looping", 200) if a.kind == "tool_call"]
    tail = calls[2:]
    assert len(set(tail)) == 1 and len(tail) > 20
    assert {(r.is_error, r.error) for r in results[2:]} == {
        (True, "AssertionError: assert 404 == 200 (GET /index)")
    }


def test_stalled_never_succeeds() -> None:
    results = [a for a in take("stalled", 300) if a.kind == "tool_result"]
    assert len(results) > 50 and all(r.is_error for r in results)
    assert {r.output for r in results} == {None}


def test_budget_burner_exceeds_its_budget() -> None:
    actions = take("budget_burner", 40)
    assert actions[0].kind == "budget" and actions[0].max_tokens is not None
    tokens = sum((a.input_tokens or 0) + (a.output_tokens or 0) for a in actions)
    assert tokens > 2 * actions[0].max_tokens


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ConfigError, match="kind"):
        session_script("sleepy", 1)  # type: ignore[arg-type]


def test_fleet_share_and_ids() -> None:
    kinds = fleet_kinds(FleetConfig(sessions=12, pathological_share=0.25, seed=5))
    counts = Counter(kinds)
    assert counts["healthy"] == 9
    assert counts["looping"] == counts["stalled"] == counts["budget_burner"] == 1
    with pytest.raises(ConfigError, match="pathological_share"):
        FleetConfig(pathological_share=1.5)
    with pytest.raises(ConfigError, match="sessions"):
        FleetConfig(sessions=0)


def test_fleet_steps_start_act_end_in_order() -> None:
    cfg = FleetConfig(sessions=5, pathological_share=0.4, seed=2)
    steps = list(itertools.islice(fleet_steps(cfg), 3000))
    assert steps == list(itertools.islice(fleet_steps(cfg), 3000))
    seen: dict[str, str] = {}
    for st in steps:
        state = seen.get(st.session_id)
        if st.step == "start":
            assert state is None
            seen[st.session_id] = "open"
        elif st.step == "action":
            assert state == "open"
        else:
            assert state == "open" and st.kind == "healthy"
            seen[st.session_id] = "ended"
    # healthy sessions finish and get replaced: more sessions than slots
    assert len(seen) > 5
    assert all(
        sid.startswith("sim-") and sid.endswith(k)
        for sid, k in ((s.session_id, s.kind) for s in steps)
    )


class FakeSession:
    def __init__(self, log: list[tuple[str, Any]], sid: str) -> None:
        self.log = log
        self.sid = sid
        self.n = 0

    def start(self) -> None:
        self.log.append(("start", self.sid))

    def end(self) -> None:
        self.log.append(("end", self.sid))

    def tool_call(self, name: str, input: Any = None) -> str:
        self.n += 1
        self.log.append(("tool_call", self.sid))
        return f"{self.sid}-c{self.n}"

    def tool_result(self, call_id: str, output: Any = None, **kw: Any) -> None:
        assert call_id.startswith(self.sid)
        self.log.append(("tool_result", self.sid))

    def model_step(self, text: str | None = None, **kw: Any) -> None:
        self.log.append(("model_step", self.sid))

    def budget(self, **kw: Any) -> None:
        self.log.append(("budget", self.sid))


class FakePublisher:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def session(self, session_id: str, **kwargs: Any) -> FakeSession:
        return FakeSession(self.log, session_id)


def test_drive_paces_counts_and_closes_open_sessions() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    pub = FakePublisher()
    report = drive(
        pub,
        FleetConfig(sessions=4, pathological_share=0.5, seed=1),
        rate=50,
        duration_s=4,
        clock=lambda: now[0],
        sleep=sleep,
    )
    opened = {sid for kind, sid in pub.log if kind == "start"}
    ended = [sid for kind, sid in pub.log if kind == "end"]
    assert sorted(ended) == sorted(opened)  # every session closed exactly once
    # 200 paced steps, then one closing session_end per session still open
    ended_while_running = sum(1 for kind, _ in pub.log[:200] if kind == "end")
    assert report.events == len(pub.log) == 200 + (report.started - ended_while_running)
    assert sum(report.events_per_session.values()) == report.events
    assert now[0] == pytest.approx(199 / 50)  # the last paced event is due at 3.98 s
    with pytest.raises(ConfigError, match="rate"):
        drive(pub, FleetConfig(), rate=0, duration_s=1)
