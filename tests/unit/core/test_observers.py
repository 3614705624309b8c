"""Observer triggers (OR'd, per observer, event time) and the observer context."""

from __future__ import annotations

import pytest
from observer_fakes import FakeAnalysis, FakeCall

from streams.core.errors import ConfigError
from streams.core.events import Budget
from streams.core.observers import (
    ObserverContext,
    ObserverState,
    ObserverTrigger,
    TrajectoryObserver,
    should_trigger,
    time_trigger_due,
)
from streams.core.pattern_observer import PatternObserver
from streams.core.resource import ResourceObserver

T0 = 1_000_000


def fire(
    trigger: ObserverTrigger,
    state: ObserverState | None = None,
    *,
    consecutive: int = 0,
    now: int = T0,
    call_step: bool = True,
    failure: bool = False,
) -> bool:
    return should_trigger(
        trigger,
        state or ObserverState(),
        FakeAnalysis(consecutive_errors=consecutive),
        now_ms=now,
        session_start_ms=T0,
        call_step=call_step,
        failure_completed=failure,
    )


def test_empty_trigger_never_fires() -> None:
    t = ObserverTrigger()
    assert t.is_empty
    assert not fire(
        t,
        ObserverState(tool_calls_since_assessment=1000),
        consecutive=99,
        failure=True,
        now=T0 + 10**9,
    )


def test_on_every_call_only_on_call_steps() -> None:
    t = ObserverTrigger(on_every_call=True)
    assert fire(t)
    assert not fire(t, call_step=False)


def test_every_n_calls_boundary() -> None:
    t = ObserverTrigger(every_n_calls=15)
    assert not fire(t, ObserverState(tool_calls_since_assessment=14))
    assert fire(t, ObserverState(tool_calls_since_assessment=15))
    assert fire(t, ObserverState(tool_calls_since_assessment=16))
    assert not fire(t, ObserverState(tool_calls_since_assessment=15), call_step=False)


def test_after_consecutive_errors_fires_on_new_failures_only() -> None:
    t = ObserverTrigger(after_consecutive_errors=3)
    assert not fire(t, consecutive=2, failure=True)
    assert fire(t, consecutive=3, failure=True)
    assert fire(t, consecutive=4, failure=True)
    # the streak is still 3 on the next (non-failure) event: no re-fire
    assert not fire(t, consecutive=3, failure=False)


def test_spec_example_triggers_are_ored() -> None:
    t = ObserverTrigger(every_n_calls=15, after_consecutive_errors=3)
    assert fire(t, ObserverState(tool_calls_since_assessment=15))
    assert fire(t, ObserverState(tool_calls_since_assessment=2), consecutive=3, failure=True)
    assert not fire(t, ObserverState(tool_calls_since_assessment=2), consecutive=2, failure=True)


def test_every_n_seconds_is_event_time_from_last_assessment_or_start() -> None:
    t = ObserverTrigger(every_n_seconds=30)
    assert not fire(t, now=T0 + 29_999, call_step=False)
    assert fire(t, now=T0 + 30_000, call_step=False)
    st = ObserverState(last_assessment_ms=T0 + 100_000)
    assert not fire(t, st, now=T0 + 129_999)
    assert fire(t, st, now=T0 + 130_000)
    assert time_trigger_due(ObserverTrigger(every_n_seconds=0.5), ObserverState(), T0 + 500, T0)
    assert not time_trigger_due(ObserverTrigger(every_n_calls=1), ObserverState(), T0 + 10**9, T0)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"every_n_calls": 0}, "trigger.every_n_calls"),
        ({"every_n_calls": 2.5}, "trigger.every_n_calls"),
        ({"every_n_calls": True}, "trigger.every_n_calls"),
        ({"after_consecutive_errors": -1}, "trigger.after_consecutive_errors"),
        ({"every_n_seconds": 0}, "trigger.every_n_seconds"),
        ({"every_n_seconds": "10"}, "trigger.every_n_seconds"),
        ({"on_every_call": 1}, "trigger.on_every_call"),
    ],
)
def test_trigger_validation_names_field(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ObserverTrigger(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


def make_ctx(calls: tuple[FakeCall, ...], count: int | None = None) -> ObserverContext:
    return ObserverContext(
        session_id="s",
        analysis=FakeAnalysis(tool_call_count=len(calls) if count is None else count, calls=calls),
        observer_state=ObserverState(),
        budget=Budget(max_tokens=10),
        now_ms=T0 + 5_000,
        session_start_ms=T0,
    )


def test_context_queries() -> None:
    calls = tuple(
        FakeCall(i, "bash", success=i % 2 == 0, timestamp_ms=T0 + i * 1000) for i in range(1, 7)
    )
    c = make_ctx(calls)
    assert [r.call_index for r in c.recent_tool_calls(2)] == [5, 6]
    assert len(c.recent_tool_calls(100)) == 6
    assert c.recent_tool_calls(0) == ()
    assert [r.call_index for r in c.tool_calls_since(T0 + 4000)] == [4, 5, 6]
    assert c.error_rate(4) == 0.5  # calls 3,4,5,6 -> 3 and 5 failed
    assert c.error_rate(1) == 0.0
    assert make_ctx(()).error_rate(10) == 0.0
    assert c.call_index == 6 and c.elapsed_ms == 5_000
    assert c.budget.max_tokens == 10


def test_builtin_observers_satisfy_protocol() -> None:
    assert isinstance(ResourceObserver(), TrajectoryObserver)
    assert isinstance(PatternObserver(), TrajectoryObserver)
