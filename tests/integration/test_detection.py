"""Live detection against a real broker: what the worker publishes equals the offline engine.

* a looping agent published through the SDK -> router -> worker yields a
  ``doom_loop`` pattern and a ``warning`` assessment on the output topics;
* a quiet session with a passed deadline gets a ``trigger="timer"`` assessment
  (the worker's wall-clock timer, nothing else would make it);
* a worker SIGKILLed mid-stream and restarted loses no pattern and carries each
  session's state on: every (session, seq, pattern_type) the offline engine finds
  over the same events is on ``<prefix>.patterns``, repeats are byte-identical,
  and every event-made assessment equals the offline one for its (session, seq);
* two workers sharing the partitions publish the same assessments as the offline run.

Expected values come from :class:`streams.core.engine.SessionEngine` run here over
the produced events (the same pure core, no Kafka), never from the worker.
"""

from __future__ import annotations

import signal
import time
import urllib.error
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kafka_io import live_history, produce, read_all, wait_group_shares
from procs import RouterProc, WorkerProc

from streams.core.engine import SessionEngine
from streams.core.events import Budget, TraceEvent
from streams.settings import Settings
from streams.sim.events import fleet_events


def offline(events: list[TraceEvent]) -> tuple[set[tuple[str, int, str]], dict[Any, str]]:
    """(session, seq, pattern_type) of every pattern, and rendered assessment per (session, seq)."""
    engines: dict[str, SessionEngine] = {}
    patterns: set[tuple[str, int, str]] = set()
    assessments: dict[tuple[str, int], str] = {}
    for ev in events:
        eng = engines.setdefault(ev.session_id, SessionEngine.create(ev.session_id))
        out = eng.on_event(ev)
        for det in out.patterns:
            patterns.add((det.session_id, det.seq, str(det.pattern.pattern_type)))
        cur = out.assessment
        if cur is not None and cur.assessments:
            assessments[(ev.session_id, cur.seq)] = cur.render()
    return patterns, assessments


def live_patterns(settings: Settings) -> dict[tuple[str, int, str], set[bytes]]:
    from streams.serde import PatternSerde

    serde = PatternSerde()
    out: dict[tuple[str, int, str], set[bytes]] = defaultdict(set)
    for _, value in read_all(settings, settings.patterns_topic):
        p = serde.decode(value)
        out[(p.session_id, p.seq, p.pattern_type)].add(value)
    return out


def check_against_offline(settings: Settings, events: list[TraceEvent]) -> tuple[int, int]:
    want_patterns, want_assessments = offline(events)
    got = live_patterns(settings)
    missing = want_patterns - set(got)
    assert not missing, f"{len(missing)} offline pattern(s) not published: {sorted(missing)[:5]}"
    extra = set(got) - want_patterns
    assert not extra, f"published patterns the offline engine does not make: {sorted(extra)[:5]}"
    # duplicates (redelivery after a crash) are allowed only as exact repeats
    assert all(len(values) == 1 for values in got.values())
    history = live_history(settings)
    by_key: dict[tuple[str, int], set[str]] = defaultdict(set)
    for a in history:
        if a.trigger == "event":
            by_key[(a.session_id, a.seq)].add(a.rendered)
    assert set(by_key) == set(want_assessments)
    for key, rendered in by_key.items():
        assert rendered == {want_assessments[key]}, key
    return len(want_patterns), len(want_assessments)


def _applied_any(worker: WorkerProc) -> int:
    try:
        status, body = worker.get("/stats")
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0
    return int(body["applied"]) if status == 200 else 0


def _last_seqs(events: list[TraceEvent]) -> dict[str, dict[str, Any]]:
    last: dict[str, int] = {}
    for e in events:
        last[e.session_id] = max(last.get(e.session_id, -1), e.seq)
    return {sid: {"last_seq": q} for sid, q in last.items()}


@pytest.mark.timeout(300)
def test_looping_agent_through_sdk_and_router_gets_doom_loop_and_warning(
    settings: Settings, tmp_path: Path
) -> None:
    from streams.sdk import Publisher

    worker = WorkerProc(settings, tmp_path / "data")
    router = RouterProc(settings, tmp_path / "router.log")
    try:
        with Publisher(settings) as pub:
            s = pub.session("loop-1", agent_id="looper", task="fix the failing test")
            s.start()
            for _ in range(8):
                call = s.tool_call("run_tests", {"cmd": "pytest tests/test_api.py"})
                s.tool_result(call, "FAILED", is_error=True, error="AssertionError: 404 != 200")
            s.end()
        worker.wait_state({"loop-1": {"last_seq": 17}}, timeout_s=150)
        history = live_history(settings)
        patterns = live_patterns(settings)
        assert any(k[0] == "loop-1" and k[2] == "doom_loop" for k in patterns), patterns.keys()
        severities = {a.max_severity for a in history if a.session_id == "loop-1"}
        assert "warning" in severities or "critical" in severities, severities
        # and it is what the core engine says for the same events (read back from Kafka)
        status, body = worker.get("/sessions/loop-1/state")
        assert status == 200 and body["state"]["patterns_fired"].get("doom_loop", 0) >= 1
    finally:
        router.stop()
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.timeout(240)
def test_timer_assesses_a_quiet_session_past_its_deadline(
    settings: Settings, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    sid = "quiet-1"
    events = [
        TraceEvent("session_start", sid, 0, now),
        TraceEvent("budget", sid, 1, now, budget=Budget(deadline_ms=now + 4_000, max_tokens=10**5)),
        TraceEvent(
            "tool_call", sid, 2, now, call_id="c1", tool_name="read_file", input={"path": "a"}
        ),
        TraceEvent("tool_result", sid, 3, now, call_id="c1", tool_name="read_file", output="x"),
    ]
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        produce(settings, events)
        worker.wait_state({sid: {"last_seq": 3}}, timeout_s=120)
        # no event made an assessment; after the (wall-clock) deadline the timer must
        deadline = time.monotonic() + 60
        timer: list[Any] = []
        while not timer and time.monotonic() < deadline:
            timer = [a for a in live_history(settings) if a.trigger == "timer"]
        assert timer, worker.log_tail()
        assert {a.session_id for a in timer} == {sid}
        assert len(timer) == 1  # the deadline is reported once
        a = timer[0]
        assert a.seq == 3 and a.max_severity == "warning"
        assert "deadline" in a.rendered
        assert a.timestamp_ms >= now + 4_000  # made by the clock, after the deadline
        _, offline_assessments = offline(events)
        assert not offline_assessments  # a replay of the events would not make it
    finally:
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.timeout(300)
def test_a_restarted_worker_still_reports_a_quiet_sessions_deadline(
    settings: Settings, tmp_path: Path
) -> None:
    """The session sends nothing after the restart: the worker must adopt it from
    its recovered tables, or the timer would never see it (fresh data dir: from
    the changelog alone)."""
    sid = "quiet-restart"
    worker = WorkerProc(settings, tmp_path / "a")
    try:
        warm = [TraceEvent("session_start", "warm-up", 0, int(time.time() * 1000))]
        produce(settings, warm)
        worker.wait_state({"warm-up": {"last_seq": 0}}, timeout_s=120)
        now = int(time.time() * 1000)  # the worker is up: the deadline can be short
        events = [
            TraceEvent("session_start", sid, 0, now),
            TraceEvent(
                "budget", sid, 1, now, budget=Budget(deadline_ms=now + 20_000, max_tokens=10**5)
            ),
            TraceEvent("session_start", "ended-1", 0, now),
            TraceEvent("session_end", "ended-1", 1, now),
        ]
        produce(settings, events)
        worker.wait_state({sid: {"last_seq": 1}, "ended-1": {"last_seq": 1}}, timeout_s=60)
    finally:
        assert worker.stop() == 0, worker.log_tail()
    # worker a stopped before the deadline: whatever reports it is worker b
    assert int(time.time() * 1000) < now + 20_000, "too slow: the deadline passed already"
    worker = WorkerProc(settings, tmp_path / "b")
    try:
        limit = time.monotonic() + 90
        timer: list[Any] = []
        while not timer and time.monotonic() < limit:
            timer = [a for a in live_history(settings) if a.trigger == "timer"]
        assert timer, worker.log_tail()
        assert {a.session_id for a in timer} == {sid}  # not the ended one, not warm-up
        assert "deadline" in timer[0].rendered
        assert timer[0].timestamp_ms >= now + 20_000
        _, stats = worker.get("/stats")
        assert stats["duplicates"] == 0, stats  # worker a committed its offsets
    finally:
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_mid_stream_loses_no_pattern_and_matches_offline(
    settings: Settings, tmp_path: Path
) -> None:
    from streams.topics import ensure_worker_topics

    # big enough that the kill lands mid-stream: one worker applies ~10k events/s
    events = fleet_events(30_000, 60, seed=3, prefix="kill")
    ensure_worker_topics(settings)  # before producing: the broker could auto-create 1 partition
    produce(settings, events)
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        deadline = time.monotonic() + 120
        while _applied_any(worker) < len(events) // 3 and time.monotonic() < deadline:
            assert worker.proc.poll() is None, worker.log_tail()
            time.sleep(0.05)
        applied = _applied_any(worker)
        assert len(events) // 3 <= applied < len(events), "not killed mid-stream"
    finally:
        worker.stop(signal.SIGKILL)
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        worker.wait_state(_last_seqs(events), timeout_s=300)
        n_patterns, n_assessments = check_against_offline(settings, events)
        assert n_patterns > 10 and n_assessments > 10  # the comparison covered real output
    finally:
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_workers_publish_what_one_offline_engine_makes(
    settings: Settings, tmp_path: Path
) -> None:
    events = fleet_events(4_000, 40, seed=5, prefix="two")
    a = WorkerProc(settings, tmp_path / "a")
    b = WorkerProc(settings, tmp_path / "b")
    try:
        # both own events partitions before the backlog exists
        wait_group_shares(settings, f"{settings.prefix}-observer", members=2)
        produce(settings, events)
        expected = _last_seqs(events)
        deadline = time.monotonic() + 300
        pending = dict(expected)
        while pending and time.monotonic() < deadline:
            for w in (a, b):
                assert w.proc.poll() is None, w.log_tail()
            for sid in list(pending):
                try:
                    status, body = a.get(f"/sessions/{sid}/state")
                except (urllib.error.URLError, ConnectionError, OSError):
                    break
                if status == 200 and body["state"]["last_seq"] >= pending[sid]["last_seq"]:
                    del pending[sid]
            time.sleep(0.5)
        assert not pending, sorted(pending)[:5]
        assert _applied_any(a) > 0 and _applied_any(b) > 0, "one worker did all the work"
        check_against_offline(settings, events)
    finally:
        b_code = b.stop()
        assert a.stop() == 0, a.log_tail()
        assert b_code == 0, b.log_tail()


@pytest.mark.timeout(240)
def test_budget_limits_tokens_and_pace_end_to_end(settings: Settings, tmp_path: Path) -> None:
    """Budget events set/replace the limits, model_step tokens count, the burn rate
    (tokens per event-time minute) feeds the resource observer's pace estimate."""
    sid = "burn-1"
    t0 = 1_767_225_600_000
    events = [
        TraceEvent("session_start", sid, 0, t0),
        TraceEvent(
            "budget", sid, 1, t0, budget=Budget(deadline_ms=t0 + 30 * 60_000, max_tokens=20_000)
        ),
    ]
    q, t = 2, t0
    for i in range(12):
        t += 10_000
        events.append(TraceEvent("model_step", sid, q, t, input_tokens=900, output_tokens=100))
        events.append(
            TraceEvent(
                "tool_call",
                sid,
                q + 1,
                t,
                call_id=f"c{i}",
                tool_name="read_file",
                input={"path": f"f{i}"},
            )
        )
        events.append(
            TraceEvent(
                "tool_result",
                sid,
                q + 2,
                t + 500,
                call_id=f"c{i}",
                tool_name="read_file",
                output="ok",
            )
        )
        q += 3
    # a later budget replaces the limits (tokens_used not reported: the count runs on)
    events.append(TraceEvent("budget", sid, q, t + 1_000, budget=Budget(max_tokens=50_000)))
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        produce(settings, events)
        worker.wait_state({sid: {"last_seq": q}}, timeout_s=120)
        status, body = worker.get(f"/sessions/{sid}/state")
        assert status == 200, body
        assert body["budget"]["tokens_used"] == 12_000  # 12 model steps of 1 000 tokens
        assert body["budget"]["max_tokens"] == 50_000 and body["budget"]["deadline_ms"] is None
        assert body["engine"]["tokens_used"] == 12_000
        assert body["engine"]["budget"]["max_tokens"] == 50_000
        _, want = offline(events)
        paced = [r for r in want.values() if "pace" in r]
        assert paced  # the offline engine makes a pace warning for this burn rate
        history = [a for a in live_history(settings) if a.trigger == "event"]
        assert {(a.session_id, a.seq): a.rendered for a in history} == want
    finally:
        assert worker.stop() == 0, worker.log_tail()
