"""Issue 11: a long looping session's assessments, persistence and escalation
included, are the same live (SDK -> router -> worker) as in an offline replay,
byte for byte."""

from __future__ import annotations

import itertools
import time

import pytest
from kafka_io import publish
from procs import Pipeline

from streams.core.events import TraceEvent
from streams.replay.replay import read_live, replay_events
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000
LOOP = 45


def looping_session(sid: str, start: int) -> list[TraceEvent]:
    """4 ordinary calls, then ``cd fastxml/ && ls -F`` LOOP times with the same
    output (the SWE-agent run of the issue), then 4 different calls."""
    out = [TraceEvent("session_start", sid, 0, start, metadata={"task": "fix fastxml"})]
    t = start
    commands = [f"open src/file{i}.java" for i in range(4)]
    commands += ["cd fastxml/ && ls -F"] * LOOP
    commands += [f"search_dir Parser{i}" for i in range(4)]
    for i, cmd in enumerate(commands):
        t += 1000
        out.append(TraceEvent("model_step", sid, len(out), t, text=f"step {i}"))
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                len(out),
                t,
                call_id=f"c{i}",
                tool_name="bash",
                input={"command": cmd},
            )
        )
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                len(out),
                t + 200,
                call_id=f"c{i}",
                tool_name="bash",
                output="/bin/bash: cd: fastxml/: No such file or directory"
                if "cd " in cmd
                else f"ok {i}",
                is_error="cd " in cmd,
            )
        )
    return out


def test_long_loop_assessments_live_equal_replay(settings: Settings, pipeline: Pipeline) -> None:
    evs = looping_session("loop-a", T0)
    expected = replay_events(evs).sessions["loop-a"].assessments
    # the replay itself shows persistence and escalation, else the test proves little
    loop_calls = [a.call_index for a in expected if 5 <= a.call_index <= 4 + LOOP]
    assert len(loop_calls) >= LOOP // 5
    assert max(b - a for a, b in itertools.pairwise(loop_calls)) <= 5
    assert any("Still unresolved" in a.rendered for a in expected)
    # when the loop stops, the assessment says so: the doom loop is no longer reported
    assert expected[-1].call_index > 4 + LOOP
    assert "doom loop" not in expected[-1].rendered.split("\n")[6]

    worker = pipeline.worker
    publish(settings, evs)
    worker.wait_state({"loop-a": {"last_seq": evs[-1].seq}}, timeout_s=180)
    deadline = time.monotonic() + 60
    while True:
        _, assessments, complete = read_live(settings.bootstrap, settings.prefix)
        live = [a for a in assessments if a.session_id == "loop-a" and a.trigger == "event"]
        if len(live) >= len(expected) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert complete
    fields = ("seq", "call_index", "timestamp_ms", "max_severity", "rendered", "assessments")
    got = [tuple(getattr(a, f) for f in fields) for a in live]
    want = [tuple(getattr(a, f) for f in fields) for a in expected]
    assert got == want
