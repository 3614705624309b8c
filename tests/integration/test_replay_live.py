"""End to end: sessions go SDK -> router -> Faust worker -> <prefix>.patterns /
.assessment-history; `trajectory replay --compare-live` over the session topics
(and over <prefix>.events) finds the live outputs identical to the replay's."""

from __future__ import annotations

from pathlib import Path

import pytest
from router_proc import RouterProc
from test_replay import publish, session_events
from test_worker import WorkerProc

from streams.cli import main
from streams.replay.replay import read_live, replay_events
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000


def test_live_outputs_equal_replay(settings: Settings, tmp_path: Path, capsys) -> None:
    evs = (
        session_events("live-a", T0)
        + session_events("live-b", T0 + 500, fail_every=2)
        + session_events("live-c", T0 + 900, calls=12, fail_every=3)
    )
    router = RouterProc(settings, tmp_path / "router.log")
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        publish(settings, evs)
        last = {}
        for e in evs:
            last[e.session_id] = e.seq
        worker.wait_state({sid: {"last_seq": s} for sid, s in last.items()}, timeout_s=180)
        expected = replay_events(evs)
        n_assess = sum(len(s.assessments) for s in expected.sessions.values())
        # outputs are produced after the table write: wait until all are on the topics
        import time

        deadline = time.monotonic() + 60
        while True:
            patterns, assessments, complete = read_live(settings.bootstrap, settings.prefix)
            mine = [a for a in assessments if a.trigger == "event"]
            if len(mine) >= n_assess or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert complete  # the worker keeps every assessment on assessment-history
        assert len(patterns) == sum(len(s.patterns) for s in expected.sessions.values()) > 0
        common = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
        assert main(["replay", "--sessions", "live-*", *common, "--compare-live"]) == 0, (
            capsys.readouterr().out
        )
        out = capsys.readouterr().out
        assert "identical" in out
        assert (
            main(
                ["replay", "--sessions", "live-*", "--source", "events", *common, "--compare-live"]
            )
            == 0
        )
        assert "identical" in capsys.readouterr().out
        # a different detector config does not match what went live
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text("analysis:\n  doom_loop_threshold: 6\n", "utf-8")
        code = main(
            ["replay", "--sessions", "live-*", *common, "--config", str(cfg), "--compare-live"]
        )
        assert code == 1, capsys.readouterr().out
    finally:
        wcode = worker.stop()
        router.stop()
    assert wcode == 0, worker.log_tail()
