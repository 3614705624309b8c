"""The stall watch names an events partition that stopped moving, once per stall,
and never an idle one (streams/worker/stall.py); the worker's consumer reports
its fetch state from aiokafka's real structures."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from faust.types import TP

from streams.settings import Settings
from streams.worker.config import WorkerConfig
from streams.worker.stall import FetchReport, PartitionFetch, StallWatch


def part(**kw: object) -> PartitionFetch:
    base: dict[str, object] = dict(
        partition=0,
        next_offset=100,
        position=101,
        highwater=101,
        active=True,
        paused=False,
        seeked=True,
    )
    base.update(kw)
    return PartitionFetch(**base)  # type: ignore[arg-type]


def report(*parts: PartitionFetch, **kw: object) -> FetchReport:
    base: dict[str, object] = dict(
        topic="t.events",
        generation=3,
        flow_active=True,
        rebalancing=False,
        seek_round=1,
        commit_under_way=False,
        handler_locked=False,
        thread_calls=0,
        partitions=parts,
    )
    base.update(kw)
    return FetchReport(**base)  # type: ignore[arg-type]


def test_an_idle_partition_is_never_stalled() -> None:
    """Fetched up to its high watermark (the next offset one below it: the commit
    marker of the last transaction), nothing in the way: quiet for an hour is fine."""
    watch = StallWatch(20)
    for t in range(0, 3600, 5):
        assert watch.observe(float(t), report(part())) == []
    assert watch.stalls == 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            dict(position=101, highwater=140),
            "39 record(s) not fetched below its high watermark 140",
        ),
        (dict(position=None, highwater=140), "no fetch position, high watermark 140"),
        (dict(active=False), "not in Faust's active partitions"),
        (dict(paused=True), "paused in aiokafka"),
        (dict(seeked=False), "no seek of this assignment yet"),
    ],
)
def test_a_held_partition_that_does_not_move_is_named_once(
    change: dict[str, object], reason: str
) -> None:
    watch = StallWatch(20)
    held = part(**change)
    assert watch.observe(0.0, report(held)) == []
    assert watch.observe(19.9, report(held)) == []
    out = watch.observe(20.0, report(held))
    assert len(out) == 1 and out[0][0] == "warning"
    text = out[0][1]
    assert text.startswith("t.events[0]: no event handled for 20 s: " + reason)
    assert "consumer generation 3" in text and "SIGUSR1" in text
    assert watch.observe(40.0, report(held)) == []  # once per stall
    assert watch.stalls == 1 and watch.stalled() == [0]
    # it moves: one INFO line, and the episode is over
    moved = dataclasses.replace(held, next_offset=130, position=140, highwater=140)
    moved = dataclasses.replace(moved, active=True, paused=False, seeked=True)
    back = watch.observe(45.0, report(moved))
    assert back == [("info", "t.events[0]: handling again after a stall of 45 s (next offset 130)")]
    assert watch.stalled() == []


def test_progress_restarts_the_clock() -> None:
    """Behind but moving (a backlog being worked off) is not a stall."""
    watch = StallWatch(20)
    for i, t in enumerate(range(0, 200, 5)):
        p = part(next_offset=100 + i, position=101 + i, highwater=1000)
        assert watch.observe(float(t), report(p)) == []


def test_a_stopped_flow_or_a_long_seek_or_batch_holds_every_partition() -> None:
    watch = StallWatch(10)
    for kw, reason in [
        (dict(flow_active=False), "the flow is stopped"),
        (dict(seek_s=12.0), "a seek to the committed offsets has run for 12 s"),
        (dict(batch_s=12.0), "a batch has been in the handler for 12 s"),
    ]:
        watch = StallWatch(10)
        assert watch.observe(0.0, report(part(), **kw)) == []
        out = watch.observe(10.0, report(part(), **kw))
        assert len(out) == 1 and reason in out[0][1], (kw, out)


def test_partitions_held_by_one_worker_wide_wait_share_one_line() -> None:
    """A hung seek stalls every partition at the same look: one WARNING naming each
    with its own reasons, one INFO when they move, and each counted as a stall."""
    watch = StallWatch(10)
    parts = [part(partition=0, seeked=False), part(partition=2, highwater=150, seeked=False)]
    assert watch.observe(0.0, report(*parts, seek_s=1.0)) == []
    out = watch.observe(10.0, report(*parts, seek_s=11.0))
    assert len(out) == 1 and out[0][0] == "warning", out
    text = out[0][1]
    assert text.startswith(
        "t.events[0,2]: no event handled for 10 s: [0] no seek of this assignment yet, a "
        "seek to the committed offsets has run for 11 s; [2] 49 record(s) not fetched "
        "below its high watermark 150, no seek of this assignment yet, a seek"
    ), text
    assert text.count("The worker's fetch state") == 1
    assert watch.stalls == 2 and watch.stalled() == [0, 2]
    moved = [dataclasses.replace(p, next_offset=p.highwater, seeked=True) for p in parts]
    moved = [dataclasses.replace(p, position=p.highwater) for p in moved]
    assert watch.observe(14.0, report(*moved)) == [
        ("info", "t.events[0,2]: handling again after a stall of 14 s (next offsets 101, 150)")
    ]


def test_a_partition_that_leaves_the_assignment_is_forgotten() -> None:
    watch = StallWatch(10)
    held = part(paused=True)
    watch.observe(0.0, report(held))
    watch.observe(5.0, report())  # revoked
    assert watch.observe(12.0, report(held)) == []  # a new episode from 12
    assert watch.observe(22.0, report(held))[0][0] == "warning"


def test_stall_s_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stall_s"):
        StallWatch(0)
    from streams.errors import ConfigError

    with pytest.raises(ConfigError, match="--stall-warn"):
        WorkerConfig(stall_warn_s=0)


def test_the_worker_reports_its_fetch_state_from_aiokafkas_structures(tmp_path: Path) -> None:
    """``fetch_report`` on the worker's real consumer over a real (not started)
    aiokafka consumer: position, high watermark, pause flag, Faust's active set and
    the seek gate, per assigned events partition; changelog partitions left out."""
    from aiokafka.structs import TopicPartition

    from streams.worker.faust_app import create_app

    async def run() -> None:
        app = create_app(
            Settings(bootstrap="127.0.0.1:1", prefix="tst"),
            WorkerConfig(
                store="memory://", data_dir=str(tmp_path), web_enabled=False, partitions=2
            ),
        ).app
        consumer = app.consumer
        assert consumer.fetch_report() is None  # no aiokafka consumer yet
        thread = consumer._thread
        kafka = thread._create_consumer(loop=asyncio.get_running_loop())
        thread._consumer = kafka
        try:
            kafka._subscription.assign_from_user(
                {
                    TopicPartition("tst.events", 0),
                    TopicPartition("tst.events", 1),
                    TopicPartition("tst.observer-sessions-changelog", 0),
                }
            )
            states = kafka._subscription.subscription.assignment
            s0 = states.state_value(TopicPartition("tst.events", 0))
            s0.seek(111)
            s0.highwater = 140
            kafka._subscription.pause(TopicPartition("tst.events", 1))
            consumer._seeked[TP("tst.events", 0)] = 1
            consumer._read_offset[TP("tst.events", 0)] = 105
            consumer._active_partitions = {TP("tst.events", 0)}
            rep = consumer.fetch_report()
            assert rep is not None
            assert [p.partition for p in rep.partitions] == [0, 1]
            p0, p1 = rep.partitions
            assert (p0.next_offset, p0.position, p0.highwater) == (105, 111, 140)
            assert (p0.active, p0.paused, p0.seeked) == (True, False, True)
            assert (p1.next_offset, p1.position, p1.highwater) == (None, None, None)
            assert (p1.active, p1.paused, p1.seeked) == (False, True, False)
            assert rep.batch_s is None and rep.seek_s is None
            assert rep.topic == "tst.events" and not rep.handler_locked
            assert "29 record(s) not fetched" in ", ".join(p0.reasons(rep.flow_active))
        finally:
            await kafka.stop()

    asyncio.run(run())
