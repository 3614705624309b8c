"""Snapshot and restore through the live pipeline (SDK -> router -> Faust worker).

What must hold (the replay issue's acceptance): snapshot -> more events ->
restore -> the worker's engine state equals the snapshot exactly (but for what
only moves forward: ``last_seq``, ``last_event_ms``, and the list of restore
points it keeps), and the next assessment equals what an offline run of the
truncated trajectory (events up to the snapshot, then the ones after the
restore, skipping the abandoned branch) gives.

The worker's state is read from its ``engines`` changelog (written on commit, so
the test waits for the flush); the snapshot from ``<prefix>.snapshots``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from procs import RouterProc, WorkerProc

from streams.settings import Settings


def read_topic(settings: Settings, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of ``topic`` up to its current end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"{settings.prefix}-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    md = c.list_topics(timeout=10)
    if topic not in md.topics:
        c.close()
        return []
    out: list[tuple[bytes | None, bytes | None]] = []
    for p in md.topics[topic].partitions:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if hi <= lo:
            continue
        c.assign([TopicPartition(topic, p, lo)])
        pos = lo
        while pos < hi:
            msg = c.poll(1.0)
            if msg is None:
                # transaction markers take offsets: stop once the position passed them
                if c.position([TopicPartition(topic, p)])[0].offset >= hi:
                    break
                continue
            if msg.error() is None:
                out.append((msg.key(), msg.value()))
                pos = msg.offset() + 1
        c.unassign()
    c.close()
    return out


def engine_state(settings: Settings, session_id: str, want_seq: int, timeout_s: float = 150.0):
    """The worker's flushed engine state of ``session_id`` once it covers ``want_seq``."""
    from streams.core.statecodec import decode_state
    from streams.worker.faust_app import changelog_topic

    topic = changelog_topic(settings, "engines")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        values = [v for k, v in read_topic(settings, topic) if k == session_id.encode() and v]
        if values:
            state = decode_state(values[-1])
            if state.last_seq >= want_seq:
                return state
        time.sleep(1.0)
    raise AssertionError(f"engine state of {session_id} never reached seq {want_seq}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_snapshot_more_events_restore_through_the_worker(
    settings: Settings, tmp_path: Path
) -> None:
    from streams.core.engine import SessionEngine
    from streams.core.statecodec import encode_state
    from streams.sdk import Publisher
    from streams.serde import AssessmentSerde, EventSerde
    from streams.snapshots import decode_snapshot, get_snapshot

    sid = "snap-live-1"
    worker = WorkerProc(settings, tmp_path / "data")
    router = RouterProc(settings, tmp_path / "router.log")
    try:
        with Publisher(settings) as pub:
            s = pub.session(sid, agent_id="agent", task="fix the failing test in foo.py")
            s.start()
            for i in range(3):  # healthy start
                cid = s.tool_call("read_file", {"path": f"src/foo_{i}.py"})
                s.tool_result(cid, {"text": "ok"})
            s.snapshot("before-branch")
            for i in range(4):  # the branch the agent will abandon
                cid = s.tool_call("bash", {"command": f"rm -rf build_{i}"})
                s.tool_result(cid, None, error=f"permission denied: build_{i}")
            s.restore("before-branch")
            pub.flush()
            restore_seq = s.next_seq - 1

            # 1. after the restore, the worker's state is the snapshot's
            worker.wait_state({sid: {"last_seq": restore_seq}}, timeout_s=90)
            restored = engine_state(settings, sid, restore_seq)
            snap = decode_snapshot(get_snapshot(settings, sid, "before-branch"))
            assert restored.last_seq == restore_seq
            moved = replace(
                restored,
                last_seq=snap.last_seq,
                last_event_ms=snap.last_event_ms,
                snapshots=snap.snapshots,
            )
            assert encode_state(moved) == encode_state(snap)
            assert [name for name, _ in restored.snapshots] == ["before-branch"]

            # 2. the next assessment equals an offline run of the truncated trajectory
            for _ in range(4):  # the same failing test run: a doom loop and a repeated error
                cid = s.tool_call("bash", {"command": "pytest tests/test_foo.py -x"})
                s.tool_result(cid, {"rc": 1}, error="FAILED tests/test_foo.py::test_bar")
            pub.flush()
            last_seq = s.next_seq - 1
        worker.wait_state({sid: {"last_seq": last_seq}}, timeout_s=90)

        events = [
            EventSerde().decode(v)
            for _, v in read_topic(settings, settings.session_topic(sid))
            if v is not None
        ]
        assert [e.seq for e in events] == list(range(last_seq + 1))
        snap_at = next(i for i, e in enumerate(events) if e.type == "snapshot")
        restore_at = next(i for i, e in enumerate(events) if e.type == "restore")
        truncated = events[: snap_at + 1] + events[restore_at + 1 :]
        offline = SessionEngine.create(sid)
        expected = None
        for ev in truncated:
            out = offline.on_event(ev)
            if out.assessment is not None:
                expected = out.assessment
        assert expected is not None, "the continuation must produce an assessment"

        deadline = time.monotonic() + 60
        live = []
        while time.monotonic() < deadline:
            live = [
                AssessmentSerde().decode(v)
                for k, v in read_topic(settings, settings.assessment_history_topic)
                if k == sid.encode() and v is not None
            ]
            live = [a for a in live if a.trigger == "event" and a.seq > restore_seq]
            if live and live[-1].seq >= expected.seq:
                break
            time.sleep(1.0)
        assert live, "no assessment after the restore"
        assert live[-1].seq == expected.seq
        assert live[-1].rendered == expected.render()
    finally:
        router.stop()
        worker.stop()
