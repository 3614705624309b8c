"""PatternObserver: one observation per active pattern, advice, severity policy, when it speaks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from observer_fakes import FakeAnalysis, FakeCall

from streams.core.assessment import Assessment, AssessmentHistory, CurrentAssessment
from streams.core.errors import ConfigError
from streams.core.events import Budget
from streams.core.observers import ObserverContext, ObserverState
from streams.core.pattern_observer import PatternObserver


@dataclass(frozen=True)
class P:
    pattern_type: str
    confidence: float = 0.8
    evidence: tuple[str, ...] = ()
    first_seen_ms: int = 0
    occurrences: int = 1
    call_index: int = 0
    cycle_actions: tuple[str, ...] = field(default=())
    repetitions: int = 3
    count: int = 3
    tool_name: str = "bash"
    error_signature: str = "ModuleNotFoundError: No module named <x>"
    avoided_tool: str = "read_file"
    alternative_attempts: int = 4


CALLS = (
    FakeCall(1, "read_file", "src/app.py", True),
    FakeCall(2, "bash", "pytest tests/test_app.py -k test_login -x", False, "E   AssertionError"),
    FakeCall(3, "edit_file", "src/app.py", True),
    FakeCall(4, "bash", "pytest tests/test_app.py -k test_login -x", False, "E   AssertionError"),
)


def ctx(
    active: tuple[P, ...] = (),
    new: tuple[P, ...] = (),
    history: AssessmentHistory | None = None,
    calls: tuple[FakeCall, ...] = CALLS,
) -> ObserverContext:
    return ObserverContext(
        session_id="s",
        analysis=FakeAnalysis(
            tool_call_count=len(calls), calls=calls, active={p.pattern_type: p for p in active}
        ),
        observer_state=ObserverState(),
        budget=Budget(),
        now_ms=42,
        session_start_ms=0,
        new_patterns=new,
        history=history or AssessmentHistory(),
    )


def hist(*assessments: Assessment) -> AssessmentHistory:
    h = AssessmentHistory()
    for a in assessments:
        h = h.add(CurrentAssessment(assessments=(a,)))
    return h


DOOM = P(
    "doom_loop",
    confidence=0.95,
    evidence=("#2 bash(pytest tests/test_app.py -k test_login -x)", "#4 bash(pytest ...)"),
    cycle_actions=("bash", "edit_file"),
)


def test_doom_loop_assessment_full_render() -> None:
    a = PatternObserver().observe(ctx(active=(DOOM,), new=(DOOM,)))
    assert a.severity == "warning"
    assert a.timestamp_ms == 42
    assert a.render() == (
        "### Patterns [warning]\n\n"
        "Detected 1 trajectory pattern after 4 tool calls: doom loop.\n\n"
        "**doom_loop**: The cycle bash -> edit_file repeated 3 times (confidence 95%).\n"
        "```\n#2 bash(pytest tests/test_app.py -k test_login -x)\n#4 bash(pytest ...)\n```\n\n"
        "**Suggestions**:\n"
        "- Stop repeating `bash(pytest ...)`; read the last error and change approach.\n"
        "- Use `read_file` to check your assumptions before the next attempt."
    )
    assert a.suggested_tools == ("read_file",)


def test_weak_doom_loop_is_only_caution_and_very_weak_is_info() -> None:
    obs = PatternObserver()
    assert obs.pattern_severity(P("doom_loop", confidence=0.7)) == "caution"
    assert obs.pattern_severity(P("doom_loop", confidence=0.3)) == "info"


@pytest.mark.parametrize(
    ("count", "conf", "sev"), [(5, 0.8, "warning"), (4, 0.8, "caution"), (9, 0.4, "info")]
)
def test_repeated_error_severity(count: int, conf: float, sev: str) -> None:
    assert (
        PatternObserver().pattern_severity(P("repeated_error", confidence=conf, count=count)) == sev
    )


@pytest.mark.parametrize(
    "ptype",
    [
        "progress_stall",
        "error_cascade",
        "thrashing",
        "drift",
        "file_churn",
        "context_degradation",
        "tool_avoidance",
        "something_new",
    ],
)
def test_other_patterns_never_warning(ptype: str) -> None:
    obs = PatternObserver()
    assert obs.pattern_severity(P(ptype, confidence=1.0, count=100)) == "caution"
    a = obs.observe(ctx(active=(P(ptype, confidence=1.0),)))
    assert a.severity == "caution"
    assert a.observations[0].category == ptype
    assert a.suggestions, f"no advice for {ptype}"


def test_several_patterns_one_assessment_max_severity() -> None:
    err = P("repeated_error", confidence=0.9, count=3, evidence=("#2 bash(...)", "#4 bash(...)"))
    stall = P("progress_stall", confidence=0.6)
    a = PatternObserver().observe(ctx(active=(err, stall, DOOM)))
    assert [o.category for o in a.observations] == ["repeated_error", "progress_stall", "doom_loop"]
    assert a.severity == "warning"
    assert a.summary.startswith("Detected 3 trajectory patterns after 4 tool calls:")
    assert a.observations[0].evidence == "#2 bash(...)\n#4 bash(...)"
    assert a.observations[1].evidence is None
    assert a.observations[0].description == (
        "The same error occurred 3 times from `bash`: ModuleNotFoundError: No module named <x> "
        "(confidence 90%)."
    )


def test_tool_avoidance_suggests_the_tool() -> None:
    a = PatternObserver().observe(ctx(active=(P("tool_avoidance"),)))
    assert a.suggestions == ("Try `read_file` as suggested, or note why it does not apply.",)
    assert a.suggested_tools == ("read_file",)


def test_no_inspect_tool_no_suggested_tool() -> None:
    calls = (FakeCall(1, "bash", "make", False), FakeCall(2, "bash", "make", False))
    a = PatternObserver().observe(ctx(active=(DOOM,), calls=calls))
    assert a.suggested_tools == ()
    assert a.suggestions == (
        "Stop repeating `bash(make)`; read the last error and change approach.",
    )


def test_should_run_healthy_session_never() -> None:
    assert PatternObserver().should_run(ctx()) is False


def test_should_run_on_new_pattern() -> None:
    assert PatternObserver().should_run(ctx(active=(DOOM,), new=(DOOM,)))


def test_should_run_only_when_severity_changes() -> None:
    obs = PatternObserver()
    weak = P("doom_loop", confidence=0.6)
    first = obs.observe(ctx(active=(weak,), new=(weak,)))
    h = hist(first)
    # same active pattern, nothing new, same severity -> quiet
    assert not obs.should_run(ctx(active=(weak,), history=h))
    # escalates to a confident loop -> speaks
    assert obs.should_run(ctx(active=(DOOM,), history=h))
    # all patterns cleared -> says so once, at info
    assert obs.should_run(ctx(history=h))
    cleared = obs.observe(ctx(history=h))
    assert cleared.severity == "info" and cleared.observations == ()
    assert not obs.should_run(ctx(history=hist(first, cleared)))


def test_should_run_active_without_previous_assessment() -> None:
    # e.g. after a profile switch: active pattern, never reported
    assert PatternObserver().should_run(ctx(active=(DOOM,)))


def test_threshold_validation() -> None:
    with pytest.raises(ConfigError, match=r"thresholds\.warning_confidence"):
        PatternObserver(warning_confidence=2)
    with pytest.raises(ConfigError, match=r"thresholds\.warning_error_count"):
        PatternObserver(warning_error_count=0)


def test_with_real_pattern_classes() -> None:
    patterns = pytest.importorskip("streams.core.patterns")
    loop = patterns.DoomLoop(
        confidence=1.0,
        evidence=("#1 bash(ls)",),
        first_seen_ms=1,
        cycle_length=1,
        repetitions=4,
        cycle_actions=("bash",),
    )
    a = PatternObserver().observe(ctx(active=(loop,), new=(loop,)))
    assert a.severity == "warning"
    assert a.observations[0].description == "The cycle bash repeated 4 times (confidence 100%)."


def test_fuzzy_half_confident_loop_is_info_and_silent() -> None:
    weak = P("doom_loop", confidence=0.5)
    obs = PatternObserver()
    assert obs.pattern_severity(weak) == "info"
    assert not obs.should_run(ctx(active=(weak,), new=(weak,)))


def test_loop_of_successful_calls_is_not_told_to_read_an_error() -> None:
    calls = (FakeCall(1, "bash", "make", True), FakeCall(2, "bash", "make", True))
    a = PatternObserver().observe(ctx(active=(DOOM,), calls=calls))
    assert a.suggestions == (
        "Stop repeating `bash(make)`; check what the last result told you and change approach.",
    )
