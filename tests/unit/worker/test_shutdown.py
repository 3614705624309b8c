"""ShutdownWatchdog: a stop past its budget is logged with every stack and ends the
process with exit code 3 (the exit is a recording fake here; the real one is
os._exit, used by tests/integration/test_worker_shutdown.py's workers)."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest

from streams.errors import ConfigError
from streams.worker.shutdown import (
    STOP_TIMEOUT_EXIT_CODE,
    ShutdownWatchdog,
    check_stop_timeout,
)


class _Exit:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_a_stop_past_its_budget_dumps_threads_and_tasks_and_exits_3() -> None:
    out = io.StringIO()
    exit_ = _Exit()

    async def main() -> None:
        async def stuck_step() -> None:
            await asyncio.Event().wait()  # a stop step that never finishes

        task = asyncio.create_task(stuck_step(), name="stuck-step")
        dog = ShutdownWatchdog(0.05, loop=asyncio.get_running_loop(), stream=out, exit=exit_)
        dog.arm("SIGTERM")
        dog.arm("later")  # keeps the first deadline and reason
        await asyncio.get_running_loop().run_in_executor(None, exit_.called.wait, 30)
        task.cancel()

    asyncio.run(main())
    assert exit_.codes == [STOP_TIMEOUT_EXIT_CODE]
    text = out.getvalue()
    assert "did not stop within 0 s of SIGTERM" in text
    assert "stuck_step" in text  # the asyncio task and where it waits
    assert "Thread" in text  # every thread's stack


def test_disarmed_in_time_it_does_not_fire() -> None:
    exit_ = _Exit()
    dog = ShutdownWatchdog(0.2, stream=io.StringIO(), exit=exit_)
    dog.arm("SIGTERM")
    assert dog.armed
    dog.disarm()
    assert not dog.armed
    assert not exit_.called.wait(0.6)
    assert exit_.codes == []


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_stop_timeout_must_be_positive_and_the_error_names_the_flag(bad: float) -> None:
    with pytest.raises(ConfigError, match="--stop-timeout"):
        check_stop_timeout(bad)
    with pytest.raises(ConfigError, match="--stop-timeout"):
        ShutdownWatchdog(bad)
