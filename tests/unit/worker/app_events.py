"""Event streams and an offline worker app shared by the worker-side unit tests
(test modules never import one another: tests/unit/test_test_layout.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.core.events import TraceEvent
from streams.settings import Settings
from streams.worker.config import WorkerConfig

T0 = 1_767_225_600_000


def looping(n: int) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    for i in range(n):
        ts = T0 + i * 2000
        out.append(
            TraceEvent(
                "tool_call",
                "s1",
                2 * i,
                ts,
                call_id=f"c{i}",
                tool_name="run_tests",
                input={"cmd": "pytest"},
            )
        )
        out.append(
            TraceEvent(
                "tool_result",
                "s1",
                2 * i + 1,
                ts + 500,
                call_id=f"c{i}",
                tool_name="run_tests",
                is_error=True,
                error_message="AssertionError: assert 404 == 200",
            )
        )
    return out


def offline_app(tmp_path: Path, prefix: str) -> tuple[Any, Settings]:
    """The worker's real Faust app (memory store, no web, 3 partitions), pointed at
    no broker and never started: its consumer's own methods run, aiokafka's calls
    are the test's stand-ins."""
    from streams.worker.faust_app import create_app

    settings = Settings(bootstrap="127.0.0.1:1", prefix=prefix)
    config = WorkerConfig(
        store="memory://", data_dir=str(tmp_path), web_enabled=False, partitions=3
    )
    return create_app(settings, config).app, settings
