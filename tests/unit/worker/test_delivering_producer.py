"""``_DeliveringProducer``: a flush covers every queued changelog write, or raises.

Real Faust objects (app, table, producer, its ProducerBuffer), no broker: the
producer is never started, so the futures of the queued writes are resolved here by
hand, the way ``Topic._on_published`` resolves them after Kafka answers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streams.errors import DeliveryError
from streams.settings import Settings
from streams.worker.config import WorkerConfig


def _app(tmp_path: Path) -> Any:
    from streams.worker.faust_app import create_app

    settings = Settings(bootstrap="127.0.0.1:1", prefix="tdp")
    config = WorkerConfig(store="memory://", data_dir=str(tmp_path), web_enabled=False)
    return create_app(settings, config)


async def _start_blocked_buffer(producer: Any) -> None:
    """Start the real buffer with a sender that never finishes (no broker here):
    queued writes stay pending until the test resolves their futures."""

    async def _never_sent(fut: Any) -> None:
        await asyncio.Event().wait()

    producer.buffer._send_pending = _never_sent
    await producer.buffer.start()


async def _stop_buffer(producer: Any) -> None:
    queue = producer.buffer.pending
    while not queue.empty():  # Faust's stop refuses to flush a queue it cannot send
        queue.get_nowait()
    await producer.buffer.stop()


def test_flush_waits_for_queued_changelog_writes_and_a_failure_sticks(tmp_path: Path) -> None:
    async def run() -> None:
        wapp = _app(tmp_path)
        producer = wapp.app.producer
        await _start_blocked_buffer(producer)
        try:
            first = wapp.sessions.send_changelog(1, b"s1", b"v1")
            second = wapp.budgets.send_changelog(2, b"s1", b"v2")
            assert producer.queued == 2
            waiter = asyncio.ensure_future(producer.deliver_queued())
            await asyncio.sleep(0.3)
            assert not waiter.done()  # Faust's buffer flush would have returned by now
            first.set_result(None)
            await asyncio.sleep(0.3)
            assert not waiter.done()
            second.set_exception(RuntimeError("broker said no"))
            with pytest.raises(DeliveryError, match=r"budgets-changelog\[2\].*broker said no"):
                await waiter
            assert producer.queued == 0
            # sticky: no later flush (hence no offset commit) passes after a lost write
            with pytest.raises(DeliveryError, match="budgets-changelog"):
                await producer.deliver_queued()
        finally:
            await _stop_buffer(producer)

    asyncio.run(run())


def test_flush_returns_once_every_queued_write_is_acknowledged(tmp_path: Path) -> None:
    async def run() -> None:
        wapp = _app(tmp_path)
        producer = wapp.app.producer
        await _start_blocked_buffer(producer)
        try:
            fut = wapp.minutes.send_changelog(0, b"s1@0", b"v")
            asyncio.get_running_loop().call_later(0.3, fut.set_result, None)
            await asyncio.wait_for(producer.deliver_queued(), 5)
            assert fut.done() and producer.queued == 0
        finally:
            await _stop_buffer(producer)

    asyncio.run(run())


def test_writes_left_in_a_buffer_that_is_not_running_are_named(tmp_path: Path) -> None:
    async def run() -> None:
        wapp = _app(tmp_path)
        producer = wapp.app.producer  # its buffer never started: nothing would send
        wapp.sessions.send_changelog(0, b"s1", b"v")
        with pytest.raises(DeliveryError, match=r"1 changelog write\(s\) still queued"):
            await asyncio.wait_for(producer.deliver_queued(), 5)

    asyncio.run(run())
