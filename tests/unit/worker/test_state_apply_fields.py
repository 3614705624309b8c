"""``BudgetState.apply`` / ``MinuteCounts.apply`` build their next value with the
constructor (not ``dataclasses.replace``, which costs ~1.5 us per call on the per-event
path).  The risk of a hand-written constructor call: a field added later and not
carried over silently resets to its default.  These tests set every field to a
non-default value and check that apply changes exactly the fields it should.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from streams.core.events import TraceEvent
from streams.worker.state import BudgetState, MinuteCounts

T0 = 1_767_225_600_000


def ev(seq: int, type_: str, **kw: Any) -> TraceEvent:
    return TraceEvent(type=type_, session_id="s-1", seq=seq, timestamp_ms=T0 + seq, **kw)  # type: ignore[arg-type]


def every_field_set(value: Any, **values: Any) -> Any:
    """``value`` with each field given in ``values``; fails if a field is not given."""
    missing = {f.name for f in fields(value)} - set(values)
    assert not missing, f"give the new field(s) {missing} a non-default value here"
    return replace(value, **values)


def test_budget_model_step_carries_every_other_field() -> None:
    before = every_field_set(
        BudgetState(session_id="s-1"),
        session_id="s-1",
        last_seq=4,
        deadline_ms=T0 + 9_000,
        max_tokens=50_000,
        max_tool_calls=40,
        reported_tokens_used=1_000,
        tokens_since_report=250,
        budget_seq=2,
    )
    after = before.apply(ev(7, "model_step", input_tokens=30, output_tokens=12))
    assert after == replace(before, last_seq=7, tokens_since_report=250 + 42)


def test_minute_counts_carry_every_other_field() -> None:
    before = every_field_set(
        MinuteCounts(session_id="s-1", minute_start_ms=T0),
        session_id="s-1",
        minute_start_ms=T0,
        tool_calls=3,
        errors=2,
        last_seq=5,
    )
    assert before.apply(ev(6, "tool_call")) == replace(before, tool_calls=4, last_seq=6)
    assert before.apply(ev(6, "error")) == replace(before, errors=3, last_seq=6)
    assert before.apply(ev(6, "tool_result", is_error=True)) == replace(
        before, errors=3, last_seq=6
    )
    assert before.apply(ev(6, "tool_result")) is None  # not counted
    assert before.apply(ev(5, "tool_call")) is None  # already applied
