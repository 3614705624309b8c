"""The consumer side on the real pipeline: SDK -> router -> worker -> subscriber / context.

Real processes (router and worker subprocesses, started by the ``pipeline`` fixture).
What must hold: a sub-agent session's assessments reach a subscriber following
its originator's tree, and ``context_for`` / ``PromptContext`` return, byte for
byte, what the offline core renders for the same events (read back from
``<prefix>.events`` and run through ``SessionEngine``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from procs import Pipeline

from streams.settings import Settings


def events_of(settings: Settings, session_ids: set[str], idle_s: float = 2.0) -> dict[str, Any]:
    """The decoded TraceEvents of ``session_ids`` on ``<prefix>.events``, by session, seq order."""
    from confluent_kafka import Consumer

    from streams.serde import EventSerde

    c = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"{settings.prefix}-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.subscribe([settings.events_topic])
    serde = EventSerde()
    out: dict[str, Any] = {sid: [] for sid in session_ids}
    last = time.monotonic() + 20
    while time.monotonic() - last < idle_s:
        msg = c.poll(0.3)
        if msg is not None and msg.error() is None:
            ev = serde.decode(msg.value())
            if ev.session_id in out:
                out[ev.session_id].append(ev)
            last = time.monotonic()
    c.close()
    return {sid: sorted(evs, key=lambda e: e.seq) for sid, evs in out.items()}


@pytest.mark.timeout(300)
def test_tree_subscription_and_context_match_the_offline_core(
    settings: Settings, pipeline: Pipeline
) -> None:
    from streams.core.engine import SessionEngine
    from streams.sdk import Publisher
    from streams.sdk.context import PromptContext, context_for
    from streams.sdk.subscriber import AssessmentSubscriber
    from streams.serde.avro import AssessmentWire

    worker = pipeline.worker
    root, child, grandchild = "tp-root", "tp-child", "tp-grandchild"
    with Publisher(settings) as pub:
        with pub.session(root, agent_id="lead", task="fix the failing test") as s:
            cid = s.tool_call("read_file", {"path": "tests/test_x.py"})
            s.tool_result(cid, {"text": "def test_x(): ..."})
        with pub.session(child, agent_id="fixer", parent_session_id=root) as s:
            for _ in range(8):  # a doom loop: the same failing command
                cid = s.tool_call("bash", {"command": "pytest -x tests/test_x.py"})
                s.tool_result(cid, {"exit_code": 1}, is_error=True, error="1 failed")
        with pub.session(grandchild, agent_id="helper", parent_session_id=child) as s:
            for i in range(6):
                cid = s.tool_call("grep", {"pattern": "def test_x", "n": i})
                s.tool_result(cid, None, is_error=True, error="No such file: tests/")
    got: dict[str, AssessmentWire] = {}
    with AssessmentSubscriber(settings, start="beginning", trees=[root]) as sub:
        deadline = time.monotonic() + 150
        while not {child, grandchild} <= set(got) and time.monotonic() < deadline:
            assert worker.proc.poll() is None, worker.log_tail()
            for rec in sub.poll(0.5):
                assert isinstance(rec, AssessmentWire)
                got[rec.session_id] = rec
        assert {child, grandchild} <= set(got), (sorted(got), worker.log_tail())
        assert got[child].parent_session_id == root and got[child].agent_id == "fixer"
        assert got[grandchild].parent_session_id == child
        assert sub.stats().not_selected == 0  # only the tree published here
    # let the worker finish: the last event of each session has been applied
    time.sleep(3)
    events = events_of(settings, {child, grandchild})
    with PromptContext(settings, trees=[root]) as pc:
        for sid in (child, grandchild):
            engine = SessionEngine.create(sid)
            expected = ""
            calls = 0
            for ev in events[sid]:
                out = engine.on_event(ev)
                calls += ev.type == "tool_call"
                if out.assessment is not None and out.assessment.assessments:
                    expected = out.assessment.render()
            assert expected, f"the offline core assessed nothing for {sid}"
            assert context_for(sid, settings=settings) == expected
            assert pc.context(sid) == expected
            assert context_for(sid, settings=settings, current_call_index=calls) == expected
            assert context_for(sid, settings=settings, current_call_index=calls + 100) == ""
