"""The fetch loop's seek back during a rebalance (streams.worker.faust_app).

A CI run crashed a worker with aiokafka's ``IllegalStateError("No current assignment
for partition ...")``: the seek listed the assigned partitions, a rebalance revoked
one while it awaited the committed offsets, and the error stopped the worker.  The
seek is redone by the assignment that follows, as in Faust's own ``getmany``; any
other error must still stop the worker.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import IllegalStateError

from streams.worker.faust_app import seek_back_mid_rebalance


class _Consumer:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.seeks = 0

    async def perform_seek(self) -> None:
        self.seeks += 1
        if self.error is not None:
            raise self.error


def test_a_partition_revoked_under_the_seek_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = _Consumer(
        IllegalStateError(
            "No current assignment for partition TopicPartition(topic='t', partition=0)"
        )
    )
    with caplog.at_level(logging.WARNING, logger="streams.worker.faust_app"):
        assert asyncio.run(seek_back_mid_rebalance(consumer)) is False
    assert consumer.seeks == 1
    (record,) = [r for r in caplog.records if r.name == "streams.worker.faust_app"]
    assert "No current assignment" in record.getMessage()
    assert "next assignment seeks" in record.getMessage()


def test_a_seek_that_succeeds_says_so() -> None:
    consumer = _Consumer(None)
    assert asyncio.run(seek_back_mid_rebalance(consumer)) is True
    assert consumer.seeks == 1


@pytest.mark.parametrize("error", [RuntimeError("broken"), KeyError("tp"), OSError("socket")])
def test_any_other_error_still_stops_the_worker(error: BaseException) -> None:
    with pytest.raises(type(error)):
        asyncio.run(seek_back_mid_rebalance(_Consumer(error)))


def test_the_fetch_loop_seeks_back_through_it() -> None:
    # the loop must not call perform_seek bare (the crash): read its source
    import inspect

    from streams.worker import faust_app

    src = inspect.getsource(faust_app._ReadCommittedConsumer._drain_messages)
    assert "await seek_back_mid_rebalance(self)" in src
    assert "await self.perform_seek()" not in src


def test_a_seek_timeout_names_the_events_partitions_first_and_is_kafka_io() -> None:
    """What the worker's CRITICAL line and exit code 4 come from when its seek to the
    committed offsets does not end (tests/integration/test_worker_stall.py runs it)."""
    from streams.errors import EXIT_IO, KafkaIOError, SeekTimeoutError, exit_code

    exc = SeekTimeoutError(
        [
            ("p.events", 2),
            ("p.events", 0),
            ("p-budgets-changelog", 1),
            ("a", 0),
            ("b", 0),
            ("c", 0),
        ],
        60.4,
        "--seek-timeout",
    )
    text = str(exc)
    assert text.startswith(
        "the seek of p.events[0,2], p-budgets-changelog[1], a[0], b[0] "
        "and 1 other topic(s) to the committed offsets"
    ), text
    assert "after 60 s" in text and "raise --seek-timeout" in text, text
    assert isinstance(exc, KafkaIOError) and exc.retriable and exit_code(exc) == EXIT_IO
