"""Sessions shared by the replay unit tests (test modules never import one another:
tests/unit/test_test_layout.py)."""

from __future__ import annotations

from streams.core.events import Budget, TraceEvent

T0 = 1_700_000_000_000


def failing_session(sid: str, start: int, n: int = 8) -> list[TraceEvent]:
    out = [
        TraceEvent("session_start", sid, 0, start, agent_id="ag", metadata={"task": "fix foo.py"}),
        # budgeted from the start, so the Resources observer speaks (it is quiet without limits)
        TraceEvent("budget", sid, 1, start, budget=Budget(max_tool_calls=100)),
    ]
    t = start
    for i in range(n):
        t += 1000
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                len(out),
                t,
                tool_name="bash",
                call_id=f"c{i}",
                input={"command": "pytest -x"},
            )
        )
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                len(out),
                t + 200,
                call_id=f"c{i}",
                is_error=True,
                error_message="1 failed",
                output={"rc": 1},
            )
        )
    out.append(
        TraceEvent("budget", sid, len(out), t + 300, budget=Budget(max_tokens=10, tokens_used=3))
    )
    return out
