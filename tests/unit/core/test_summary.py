"""AgentV TraceSummary: what counts as an event, a tool call and an error."""

from __future__ import annotations

import pytest

from streams.core.errors import InvalidEventError
from streams.core.events import Budget, TraceEvent
from streams.core.summary import SummaryBuilder, compute_trace_summary, summarize_events


def ev(etype: str, seq: int, sid: str = "s", **kw: object) -> TraceEvent:
    return TraceEvent(type=etype, session_id=sid, seq=seq, timestamp_ms=1000 + seq, **kw)  # type: ignore[arg-type]


def test_counts_agentv_types_only_and_both_error_forms() -> None:
    events = [
        ev("session_start", 0),
        ev("model_step", 1, text="think"),
        ev("tool_call", 2, tool_name="search", call_id="a"),
        ev("tool_result", 3, tool_name="search", call_id="a", is_error=True),
        ev("tool_call", 4, tool_name="analyze", call_id="b"),
        ev("error", 5, call_id="b", text="crash"),
        ev("tool_call", 6, tool_name="search", call_id="c"),
        ev("tool_result", 7, tool_name="search", call_id="c"),
        ev("message", 8, text="done"),
        ev("budget", 9, budget=Budget(max_tokens=10)),
        ev("session_end", 10),
    ]
    s = compute_trace_summary(events)
    assert s.session_id == "s"
    assert s.event_count == 8  # control events (start, budget, end) excluded
    assert s.tool_names == ("analyze", "search")
    assert dict(s.tool_calls_by_name) == {"analyze": 1, "search": 2}
    assert s.error_count == 2  # the failed tool_result + the error event
    assert s.to_json() == {
        "session_id": "s",
        "eventCount": 8,
        "toolNames": ["analyze", "search"],
        "toolCallsByName": {"analyze": 1, "search": 2},
        "errorCount": 2,
    }


def test_tool_call_without_name_is_not_a_tool() -> None:
    s = compute_trace_summary([ev("tool_call", 0, call_id="x")])
    assert s.event_count == 1 and s.tool_names == () and s.error_count == 0


def test_several_sessions_in_first_seen_order() -> None:
    events = [
        ev("tool_call", 0, "b", tool_name="t"),
        ev("tool_call", 0, "a", tool_name="u"),
        ev("tool_call", 1, "b", tool_name="t"),
        ev("session_start", 1, "c"),
    ]
    summaries = summarize_events(events)
    assert [(x.session_id, x.event_count) for x in summaries] == [("b", 2), ("a", 1), ("c", 0)]
    assert dict(summaries[0].tool_calls_by_name) == {"t": 2}
    with pytest.raises(InvalidEventError, match="session_id"):
        compute_trace_summary(events)


def test_empty_and_incremental_builder() -> None:
    assert compute_trace_summary([]).event_count == 0
    b = SummaryBuilder()
    b.add(ev("tool_call", 0, tool_name="z"))
    first = b.summaries()[0]
    b.add(ev("tool_call", 1, tool_name="a"))
    assert first.tool_names == ("z",)  # earlier results are immutable values
    assert b.summaries()[0].tool_names == ("a", "z")
