"""A commit that did not happen is not recorded as made (the worker consumer's
``_commit_offsets``).

faust-streaming 0.15.3 records the offsets of every commit in ``_committed_offset``,
also when aiokafka refused it because the group is rebalancing (the driver's
``_commit`` then returns False without a word).  ``_should_commit`` skips an offset
not above the recorded one, so the revoke's last commit left the partition out, the
broker kept the older offset, and the next owner handled those events again
(upstream faust-streaming #316 / PR #692).  Here the consumer is the worker app's
real one; only aiokafka's commit is a stand-in.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app_events import offline_app
from faust.types import TP


def _consumer(tmp_path: Path, answers: list[bool]) -> tuple[Any, TP, list[dict[TP, int]]]:
    app, settings = offline_app(tmp_path, "tcb")
    consumer = app.consumer
    tp = TP(settings.events_topic, 2)
    sent: list[dict[TP, int]] = []

    async def commit(offsets: dict[TP, int]) -> bool:  # aiokafka's, through the driver
        sent.append(dict(offsets))
        return answers.pop(0)

    async def flush() -> None:
        return None

    consumer._commit = commit
    consumer.assignment = lambda: {tp}
    app.producer.flush = flush
    return consumer, tp, sent


def test_a_refused_commit_leaves_the_committed_offset_as_it_was(tmp_path: Path) -> None:
    consumer, tp, sent = _consumer(tmp_path, [True, False, True])

    async def run() -> None:
        assert await consumer._commit_offsets({tp: 125}) is True
        assert consumer._committed_offset[tp] == 125
        # refused ("already rebalanced"): faust 0.15.3 alone records 130 here
        assert await consumer._commit_offsets({tp: 130}) is False
        assert consumer._committed_offset[tp] == 125
        # so the revoke's last commit still sends the partition
        assert consumer._should_commit(tp, 130)
        assert await consumer._commit_offsets({tp: 130}) is True
        assert consumer._committed_offset[tp] == 130

    asyncio.run(run())
    assert sent == [{tp: 125}, {tp: 130}, {tp: 130}]


def test_a_refused_first_commit_leaves_no_committed_offset(tmp_path: Path) -> None:
    consumer, tp, _ = _consumer(tmp_path, [False])

    async def run() -> None:
        assert await consumer._commit_offsets({tp: 40}) is False

    asyncio.run(run())
    assert tp not in consumer._committed_offset
    assert consumer._should_commit(tp, 40)
