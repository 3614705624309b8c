"""Assessment / CurrentAssessment rendering, staleness, history and build_context."""

from __future__ import annotations

import pytest

from streams.core.assessment import (
    Assessment,
    AssessmentHistory,
    CurrentAssessment,
    Observation,
    build_context,
    max_severity,
    severity_rank,
    severity_trend,
)


def test_assessment_render_matches_spec_format_with_all_parts() -> None:
    a = Assessment(
        observer_name="Patterns",
        summary="Loop detected.",
        observations=(
            Observation("doom_loop", "The cycle repeated 3 times.", "#1 bash(ls)\n#2 bash(ls)"),
            Observation("stall", "No progress."),
        ),
        suggestions=("Stop.", "Think."),
        severity="warning",
        suggested_tools=("read_file",),
    )
    assert a.render() == (
        "### Patterns [warning]\n"
        "\n"
        "Loop detected.\n"
        "\n"
        "**doom_loop**: The cycle repeated 3 times.\n"
        "```\n#1 bash(ls)\n#2 bash(ls)\n```\n"
        "**stall**: No progress.\n"
        "\n"
        "**Suggestions**:\n"
        "- Stop.\n"
        "- Think."
    )
    # suggested_tools is machine-facing only
    assert "read_file" not in a.render()


def test_assessment_render_minimal() -> None:
    assert Assessment("Resources", "No resource constraints configured.").render() == (
        "### Resources [info]\n\nNo resource constraints configured."
    )


def test_assessment_rejects_unknown_severity() -> None:
    with pytest.raises(ValueError, match="severity 'fatal'"):
        Assessment("X", "y", severity="fatal")  # type: ignore[arg-type]


def test_current_assessment_render_and_empty() -> None:
    a = Assessment("Resources", "Fine.")
    b = Assessment("Patterns", "Loop.", severity="caution")
    cur = CurrentAssessment(assessments=(a, b), call_index=12)
    assert cur.render() == (
        "## Trajectory Assessment\n\n_Generated after tool call #12_\n\n"
        "### Resources [info]\n\nFine.\n\n"
        "### Patterns [caution]\n\nLoop.\n"
    )
    assert cur.severity == "caution"
    assert CurrentAssessment().render() == ""


@pytest.mark.parametrize(("now", "stale"), [(12, False), (32, False), (33, True), (100, True)])
def test_is_stale_boundary(now: int, stale: bool) -> None:
    assert CurrentAssessment(call_index=12).is_stale(now) is stale


def test_is_stale_custom_age() -> None:
    assert CurrentAssessment(call_index=5).is_stale(8, max_age_calls=2)
    assert not CurrentAssessment(call_index=5).is_stale(7, max_age_calls=2)


def test_build_context_skips_stale_and_empty() -> None:
    cur = CurrentAssessment(assessments=(Assessment("R", "s"),), call_index=10)
    assert build_context(cur, 15) == cur.render()
    assert build_context(cur, 31) == ""
    assert build_context(cur, 31, max_age_calls=30) == cur.render()
    assert build_context(None, 3) == ""
    assert build_context(CurrentAssessment(call_index=3), 3) == ""


def test_severity_ordering_is_by_rank_not_string() -> None:
    # "info" > "caution" as strings; the spec's intent (and ours) is the opposite.
    assert max_severity("info", "caution") == "caution"
    assert max_severity("warning", "caution", "info") == "warning"
    assert max_severity() == "info"
    assert [severity_rank(s) for s in ("info", "caution", "warning")] == [0, 1, 2]
    with pytest.raises(ValueError):
        severity_rank("nope")


def test_trend() -> None:
    assert severity_trend(None, "warning") == "steady"
    assert severity_trend("info", "warning") == "escalating"
    assert severity_trend("warning", "caution") == "de-escalating"
    assert severity_trend("caution", "caution") == "steady"


def _cur(sev: str, name: str = "R", idx: int = 0) -> CurrentAssessment:
    return CurrentAssessment(assessments=(Assessment(name, "s", severity=sev),), call_index=idx)  # type: ignore[arg-type]


def test_history_bounded_and_trend() -> None:
    h = AssessmentHistory(max_entries=3)
    assert h.latest is None and h.trend() == "steady"
    for i, sev in enumerate(["info", "caution", "warning", "caution"]):
        h = h.add(_cur(sev, idx=i))
    assert [e.call_index for e in h.entries] == [1, 2, 3]
    assert h.latest is not None and h.latest.call_index == 3
    assert h.trend() == "de-escalating"
    h = h.add(_cur("warning", idx=4))
    assert h.trend() == "escalating"


def test_history_per_observer_and_last_for() -> None:
    h = AssessmentHistory()
    h = h.add(_cur("caution", "P")).add(_cur("info", "R")).add(_cur("warning", "P"))
    assert h.trend("P") == "escalating"
    assert h.trend("R") == "steady"
    last = h.last_for("P")
    assert last is not None and last.severity == "warning"
    assert h.last_for("nobody") is None


def test_history_invariants() -> None:
    with pytest.raises(ValueError):
        AssessmentHistory(max_entries=0)
    with pytest.raises(ValueError):
        AssessmentHistory(entries=(_cur("info"), _cur("info")), max_entries=1)
