"""``TailTrace`` (issue #12): off unless ``$TRAJECTORY_WORKER_TRACE`` names a file; when
on, a blocked event loop shows as ``lag`` and ``slow`` lines naming the coroutine, and
a collection as a ``gc`` line.  Real asyncio loops and real collections, no Kafka."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from pathlib import Path
from typing import Any

import pytest

from streams.worker.faust_app import TRACE_ENV, TailTrace


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_off_unless_the_variable_names_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert TailTrace.from_env() is None
    monkeypatch.setenv(TRACE_ENV, "")
    assert TailTrace.from_env() is None


def test_a_blocked_loop_is_seen_as_lag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(path))
    trace = TailTrace.from_env()
    assert trace is not None

    async def main() -> None:
        lag = asyncio.create_task(trace.loop_lag())
        await asyncio.sleep(0.03)
        time.sleep(0.06)  # holds the loop: the sleeper wakes >= ~50 ms late
        await asyncio.sleep(0.03)
        lag.cancel()

    asyncio.run(main())
    trace.flush()
    lags = [e["ms"] for e in lines(path) if e["k"] == "lag"]
    assert lags and max(lags) >= 40, lags


def test_slow_callbacks_and_collections_are_named(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = TailTrace(str(path))
    trace.GC_S = 0.0  # every collection, so one forced collection is seen
    handle_run = asyncio.events.Handle._run
    try:
        trace.install()

        async def hog() -> None:
            time.sleep(0.02)  # one step of 20 ms, on the CPU
            sum(range(200_000))
            await asyncio.sleep(0)

        asyncio.run(hog())
        gc.collect(2)
    finally:
        asyncio.events.Handle._run = handle_run  # type: ignore[method-assign]
        gc.callbacks.remove(trace._on_gc)
    trace.flush()
    events = lines(path)
    slow = [e for e in events if e["k"] == "slow" and "hog" in e["cb"]]
    assert slow, events
    assert slow[0]["ms"] >= 20 and 0 <= slow[0]["cpu"] <= slow[0]["ms"] + 1
    assert slow[0]["th"] == "MainThread"
    assert any(e["k"] == "gc" and e["gen"] == 2 for e in events), events
