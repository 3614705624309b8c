"""A table-recovery step that outlasts Faust's timeout stops the worker, loudly.

Faust's ``Recovery._wait`` reports a step that timed out exactly as a stop, and its
recovery loop then ends for good without a word: the worker stayed up and applied
nothing (reproduced on the broker with the seek: tests/integration/
test_worker_stall.py).  ``_LoudRecovery`` (a real Faust ``Recovery`` of a real,
not started app) must turn that timeout into a crash with ``RecoveryTimeoutError``
naming the step, and leave a real stop a stop.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import faust
import pytest
from faust.tables.recovery import ServiceStopped

from streams.errors import EXIT_IO, RecoveryTimeoutError, exit_code
from streams.worker.faust_app import _LoudRecovery, _LoudTableManager


def _recovery() -> tuple[faust.App, _LoudRecovery]:
    app = faust.App("recovery-timeout-test", TableManager=_LoudTableManager, autodiscover=False)
    recovery = app.tables.recovery
    assert isinstance(recovery, _LoudRecovery)
    return app, recovery


async def _changelog_highwaters() -> None:
    await asyncio.sleep(30)


def test_a_step_past_its_timeout_crashes_the_app_naming_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> tuple[faust.App, BaseException]:
        app, recovery = _recovery()
        with pytest.raises(RecoveryTimeoutError) as info:
            await recovery._wait(_changelog_highwaters(), timeout=0.05)
        return app, info.value

    with caplog.at_level(logging.CRITICAL, logger="streams.worker.faust_app"):
        app, exc = asyncio.run(run())
    assert "_changelog_highwaters has not ended after 0 s" in str(exc), exc
    assert app.crash_reason is exc
    assert exit_code(exc) == EXIT_IO
    (line,) = [r.getMessage() for r in caplog.records if r.name == "streams.worker.faust_app"]
    assert "table recovery: " in line and "stopping the worker" in line, line


def test_a_real_stop_is_still_a_stop() -> None:
    async def run() -> faust.App:
        app, recovery = _recovery()
        recovery._stopped.set()
        with pytest.raises(ServiceStopped):
            await recovery._wait(_changelog_highwaters(), timeout=5)
        return app

    assert asyncio.run(run()).crash_reason is None


def test_a_step_that_ends_in_time_returns() -> None:
    async def quick() -> None:
        await asyncio.sleep(0)

    async def run() -> faust.App:
        app, recovery = _recovery()
        await recovery._wait(quick(), timeout=5)
        return app

    assert asyncio.run(run()).crash_reason is None


def test_the_worker_app_recovers_with_it_and_faust_s_timeout_above_the_seek_s(
    tmp_path: Path,
) -> None:
    from streams.settings import Settings
    from streams.worker.config import BROKER_REQUEST_TIMEOUT_S, WorkerConfig
    from streams.worker.faust_app import create_app

    async def run() -> faust.App:
        return create_app(
            Settings(bootstrap="127.0.0.1:1", prefix="tst"),
            WorkerConfig(
                store="memory://",
                data_dir=str(tmp_path),
                web_enabled=False,
                seek_timeout_s=12.0,
            ),
        ).app

    app = asyncio.run(run())
    assert isinstance(app.tables.recovery, _LoudRecovery)
    assert app.conf.broker_request_timeout == BROKER_REQUEST_TIMEOUT_S
    assert app.seek_timeout_s == 12.0 < BROKER_REQUEST_TIMEOUT_S
