"""End to end: sessions go SDK -> router -> Faust worker -> <prefix>.patterns /
.assessment-history and the worker's changelogs; `trajectory replay --compare-live`
over the session topics (and over <prefix>.events) finds the live outputs and the
table state identical to the replay's, and names a session whose changelog value
went back to an older one (issue #15: the regression the output topics cannot show)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka_io import publish
from procs import RouterProc, WorkerProc
from workloads import session_events

from streams.cli import main
from streams.core.statecodec import decode_state
from streams.replay.compare import compare_live
from streams.replay.reader import TopicReader
from streams.replay.replay import read_live, replay_events
from streams.replay.state import read_changelogs, replay_state
from streams.settings import Settings
from streams.worker.faust_app import changelog_topic
from streams.worker.state import SessionCounters

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
        deadline = time.monotonic() + 60
        while True:
            patterns, assessments, complete = read_live(settings.bootstrap, settings.prefix)
            mine = [a for a in assessments if a.trigger == "event"]
            if len(mine) >= n_assess or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert complete  # the worker keeps every assessment on assessment-history
        wait_changelogs(settings, last)
        assert len(patterns) == sum(len(s.patterns) for s in expected.sessions.values()) > 0
        common = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
        assert main(["replay", "--sessions", "live-*", *common, "--compare-live"]) == 0, (
            capsys.readouterr().out
        )
        out = capsys.readouterr().out
        assert "identical" in out
        assert "table state: compared" in out
        summary = out.strip().splitlines()[-1]
        assert summary.startswith("compare-live: sessions=3 state=compared state_differences=0 ")
        assert summary.endswith(" verdict=clean")
        # the Python entry point (what the chaos suite calls) says the same
        report = compare_live(settings.bootstrap, settings.prefix, sessions="live-*")
        assert report.ok, report.render()
        assert report.state is not None and report.state.values_compared >= 3 * 3
        assert (
            main(
                ["replay", "--sessions", "live-*", "--source", "events", *common, "--compare-live"]
            )
            == 0
        )
        assert "identical" in capsys.readouterr().out
        # --jobs 2: outputs and tables replayed in two processes (one engine run each)
        assert (
            main(["replay", "--sessions", "live-*", "--jobs", "2", *common, "--compare-live"]) == 0
        )
        assert "state=compared state_differences=0 " in capsys.readouterr().out
        # a pattern published twice, identical (a redelivery after a crash): allowed
        from confluent_kafka import Producer

        _, part, _, key, value = next(
            iter(TopicReader(settings.bootstrap, [settings.patterns_topic], bytes).raw())
        )
        producer = Producer({"bootstrap.servers": settings.bootstrap})
        producer.produce(settings.patterns_topic, value, key, partition=part)
        assert producer.flush(30) == 0
        assert main(["replay", "--sessions", "live-*", *common, "--compare-live"]) == 0
        summary = capsys.readouterr().out.strip().splitlines()[-1]
        assert " output_differences=0 allowed_repeats=1 " in summary, summary
        # a different detector config does not match what went live
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text("analysis:\n  doom_loop_threshold: 6\n", "utf-8")
        code = main(
            ["replay", "--sessions", "live-*", *common, "--config", str(cfg), "--compare-live"]
        )
        assert code == 1, capsys.readouterr().out
        wcode = worker.stop()
        assert wcode == 0, worker.log_tail()

        # Tamper: the changelog gets an older value for live-b (its first 5 events),
        # as the eviction race of issue #15 wrote.  Outputs are all still right, the
        # state comparison names the regression.
        b_events = [e for e in evs if e.session_id == "live-b"]
        older = replay_state(b_events[:5])
        produce_to_changelog(settings, "sessions", b"live-b", older["sessions"][b"live-b"])
        produce_to_changelog(settings, "engines", b"live-b", older["engines"][b"live-b"])
        json_path = tmp_path / "verdict.json"
        code = main(
            [
                "replay",
                "--sessions",
                "live-*",
                *common,
                "--compare-live",
                "--compare-json",
                str(json_path),
            ]
        )
        out = capsys.readouterr().out
        assert code == 1, out
        assert f"live-b sessions.last_seq: live 4, replay {last['live-b']}" in out
        assert f"live-b engines.last_seq: live 4, replay {last['live-b']}" in out
        assert "output_differences=0 " in out and "verdict=differences" in out
        verdict = json.loads(json_path.read_text("utf-8"))
        assert verdict["ok"] is False and verdict["output_differences"] == 0
        assert {d["session_id"] for d in verdict["differences"]["state"]} == {"live-b"}
        assert {d["table"] for d in verdict["differences"]["state"]} == {"sessions", "engines"}
        # the tables the --jobs workers build and the parent merges see it too
        code = main(["replay", "--sessions", "live-*", "--jobs", "2", *common, "--compare-live"])
        out = capsys.readouterr().out
        assert code == 1, out
        assert f"live-b sessions.last_seq: live 4, replay {last['live-b']}" in out
        assert "output_differences=0 " in out and "verdict=differences" in out
    finally:
        worker.stop()
        router.stop()


def wait_changelogs(settings: Settings, last_seq: dict[str, int], timeout_s: float = 150) -> None:
    """Until each session's counters and engine state *in the changelogs* cover its
    last event (the worker writes its changelogs at each commit, after the outputs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        tables, missing = read_changelogs(settings.bootstrap, settings.prefix)
        seen = {
            k.decode(): SessionCounters.decode(v).last_seq for k, v in tables["sessions"].items()
        }
        engines = {k.decode(): decode_state(v).last_seq for k, v in tables["engines"].items()}
        done = all(min(seen.get(s, -1), engines.get(s, -1)) >= q for s, q in last_seq.items())
        if done and not missing:
            return
        assert time.monotonic() < deadline, (
            f"changelogs not caught up: {seen}, {engines}, missing {missing}"
        )
        time.sleep(1)


def produce_to_changelog(settings: Settings, table: str, key: bytes, value: bytes) -> None:
    """Append ``value`` for ``key`` to the table's changelog, in the partition the key
    already lives in (a table key lives in one partition: latest value wins there)."""
    from confluent_kafka import Producer

    topic = changelog_topic(settings, table)
    parts = {
        p for _, p, _, k, _ in TopicReader(settings.bootstrap, [topic], bytes).raw() if k == key
    }
    assert len(parts) == 1, parts
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    producer.produce(topic, value, key, partition=parts.pop())
    assert producer.flush(30) == 0
