"""`trajectory publish`: files become live sessions on the broker, paced by --speed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
from kafka_io import consume

from streams.commands import publish
from streams.core.events import Budget, TraceEvent
from streams.core.jsonl import dumps_event
from streams.serde import EventSerde
from streams.settings import Settings

T0 = 1_700_000_000_000


def _args(settings: Settings, *paths: Path, **extra: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    publish.add_arguments(parser)
    argv = [str(p) for p in paths] + [
        "--bootstrap",
        settings.bootstrap,
        "--prefix",
        settings.prefix,
    ]
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


def _write(path: Path, events: list[TraceEvent]) -> Path:
    path.write_text("\n".join(dumps_event(e) for e in events) + "\n", encoding="utf-8")
    return path


def _session(sid: str, gap_ms: int) -> list[TraceEvent]:
    return [
        TraceEvent(
            "session_start", sid, 0, T0, metadata={"task": "fix it", "observer_profile": "x"}
        ),
        TraceEvent("budget", sid, 1, T0, budget=Budget(deadline_ms=T0 + 60_000, max_tokens=99)),
        TraceEvent(
            "tool_call",
            sid,
            2,
            T0 + gap_ms,
            call_id="c1",
            tool_name="bash",
            input={"command": "ls"},
        ),
        TraceEvent(
            "tool_result",
            sid,
            3,
            T0 + 2 * gap_ms,
            call_id="c1",
            tool_name="bash",
            output={"stdout": "a.py"},
        ),
        TraceEvent("session_end", sid, 4, T0 + 2 * gap_ms, metadata={"exit_status": "submitted"}),
    ]


def _decode(settings: Settings, sid: str, count: int) -> list[TraceEvent]:
    serde = EventSerde()
    return [
        serde.decode(m.value())
        for m in consume(settings.bootstrap, settings.session_topic(sid), count)
    ]


def test_publish_files_as_paced_live_sessions(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(tmp_path / "a.jsonl", _session("run-a", 300))
    b = _write(tmp_path / "b.jsonl", _session("run-b", 150))
    started = time.monotonic()
    before_ms = time.time_ns() // 1_000_000
    assert publish.run(_args(settings, a, b, speed=2, session_prefix="p-")) == 0
    elapsed = time.monotonic() - started
    assert elapsed >= 0.3  # the last event is 600 ms into run-a: 0.3 s at --speed 2
    out = capsys.readouterr().out
    assert "published 2 session(s), 10 events" in out
    events = _decode(settings, "p-run-a", 5)
    assert [(e.seq, e.type) for e in events] == [
        (0, "session_start"),
        (1, "budget"),
        (2, "tool_call"),
        (3, "tool_result"),
        (4, "session_end"),
    ]
    assert events[0].metadata == {"task": "fix it", "observer_profile": "x"}
    assert events[4].metadata == {"exit_status": "submitted"}
    assert events[2].input == {"command": "ls"} and events[3].output == {"stdout": "a.py"}
    # live time: stamped now, gaps scaled by the speed, budget deadline moved alike
    assert events[0].timestamp_ms >= before_ms
    assert events[3].timestamp_ms - events[0].timestamp_ms >= 290
    assert events[1].budget is not None and events[1].budget.deadline_ms is not None
    assert abs(events[1].budget.deadline_ms - (events[0].timestamp_ms + 30_000)) < 1000
    assert len(_decode(settings, "p-run-b", 5)) == 5


def test_publish_original_time_as_fast_as_possible(settings: Settings, tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", _session("run-o", 10_000))
    started = time.monotonic()
    assert publish.run(_args(settings, a, speed=0, time="original")) == 0
    assert time.monotonic() - started < 15  # 20 s of recorded time, not waited for
    events = _decode(settings, "run-o", 5)
    assert [e.timestamp_ms for e in events] == [T0, T0, T0 + 10_000, T0 + 20_000, T0 + 20_000]
    assert events[1].budget == Budget(deadline_ms=T0 + 60_000, max_tokens=99)


def test_publish_real_trajectory(settings: Settings, trajdata_dir: Path) -> None:
    from streams.importers import read_events

    files = sorted((trajdata_dir / "mini-swe-agent" / "trajs").glob("*.traj.json.gz"))[:1]
    if not files:
        pytest.skip("no mini-swe-agent trajectories in the corpus")
    source = list(read_events(files[0]))
    sid = source[0].session_id
    inner = [e for e in source if e.type not in ("session_start", "session_end")]
    assert publish.run(_args(settings, files[0], speed=0)) == 0
    events = _decode(settings, sid, len(inner) + 2)
    assert [e.seq for e in events] == list(range(len(inner) + 2))
    assert [e.type for e in events[1:-1]] == [e.type for e in inner]
    assert [e.tool_name for e in events[1:-1]] == [e.tool_name for e in inner]
