"""Event streams shared by the worker-side unit tests (test modules never import
one another: tests/unit/test_test_layout.py)."""

from __future__ import annotations

from streams.core.events import TraceEvent

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
