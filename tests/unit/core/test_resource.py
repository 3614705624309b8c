"""ResourceObserver: the specification's sentences, severities and rendered examples.

The spec's markdown paragraphs are soft-wrapped at ~72 columns, while
``render()`` writes each summary on one line.  :func:`unwrap` joins the soft
line breaks inside a paragraph with single spaces (list items, headings and
other block starts stay on their own lines), so the spec text below is pasted
verbatim from ``trajectory-observers.md`` and compared byte for byte.
``CurrentAssessment.render()`` ends with the blank line the spec code appends
after each assessment, hence the trailing newline in that comparison.
"""

from __future__ import annotations

import pytest
from observer_fakes import FakeAnalysis

from streams.core.assessment import CurrentAssessment
from streams.core.errors import ConfigError
from streams.core.events import Budget
from streams.core.observers import ObserverContext, ObserverState
from streams.core.resource import ResourceObserver, format_duration

MIN = 60_000
T0 = 1_700_000_000_000

SPEC_EXAMPLE_47 = """\
## Trajectory Assessment

_Generated after tool call #47_

### Resources [caution]

You have 8 minutes remaining before the deadline. You have used 35,000 of
50,000 tokens (70% of budget). 15,000 tokens remaining. You have made 47 of
100 allowed tool calls. 53 calls remaining.

**Suggestions**:
- Be mindful of remaining resources when planning next steps."""

SPEC_INFO = """\
### Resources [info]

You have 25 minutes remaining before the deadline. You have used 12,000 of
50,000 tokens (24% of budget). 38,000 tokens remaining."""

SPEC_CAUTION = """\
### Resources [caution]

You have 6 minutes remaining before the deadline. You have used 42,000 of
50,000 tokens (84% of budget). 8,000 tokens remaining.

**Suggestions**:
- Be mindful of remaining resources when planning next steps."""

SPEC_WARNING = """\
### Resources [warning]

You have 2 minutes remaining before the deadline. You have used 48,500 of
50,000 tokens (97% of budget). 1,500 tokens remaining.

**Suggestions**:
- Prioritize completing the most critical remaining work.
- Consider wrapping up with a summary of progress and remaining tasks."""


def unwrap(markdown: str) -> str:
    """Join soft-wrapped paragraph lines with single spaces (see the module docstring)."""
    out: list[str] = []
    block_start = ("#", "- ", "**", "_", "```")
    for line in markdown.split("\n"):
        if (
            out
            and out[-1]
            and line
            and not line.startswith(block_start)
            and not out[-1].startswith(("#", "- ", "**", "_", "```"))
        ):
            out[-1] = f"{out[-1]} {line}"
        else:
            out.append(line)
    return "\n".join(out)


def ctx(
    *,
    elapsed_ms: int,
    remaining_ms: int | None = None,
    max_tokens: int | None = None,
    tokens_used: int | None = None,
    max_tool_calls: int | None = None,
    calls: int = 0,
) -> ObserverContext:
    now = T0 + elapsed_ms
    budget = Budget(
        deadline_ms=None if remaining_ms is None else now + remaining_ms,
        max_tokens=max_tokens,
        tokens_used=tokens_used,
        max_tool_calls=max_tool_calls,
    )
    return ObserverContext(
        session_id="s",
        analysis=FakeAnalysis(tool_call_count=calls),
        observer_state=ObserverState(),
        budget=budget,
        now_ms=now,
        session_start_ms=T0,
    )


def test_unwrap_helper() -> None:
    assert unwrap("a\nb\n\n- x\n- y") == "a b\n\n- x\n- y"


def test_spec_example_after_call_47_verbatim() -> None:
    c = ctx(
        elapsed_ms=22 * MIN,
        remaining_ms=8 * MIN + 30_000,
        max_tokens=50_000,
        tokens_used=35_000,
        max_tool_calls=100,
        calls=47,
    )
    a = ResourceObserver().observe(c)
    cur = CurrentAssessment(assessments=(a,), call_index=47)
    assert cur.render() == unwrap(SPEC_EXAMPLE_47) + "\n"
    assert a.timestamp_ms == c.now_ms


@pytest.mark.parametrize(
    ("spec", "elapsed_min", "remaining_ms", "used"),
    [
        (SPEC_INFO, 35, 25 * MIN + 30_000, 12_000),
        (SPEC_CAUTION, 40, 6 * MIN + 30_000, 42_000),
        (SPEC_WARNING, 90, 2 * MIN + 30_000, 48_500),
    ],
)
def test_spec_severity_examples_verbatim(
    spec: str, elapsed_min: int, remaining_ms: int, used: int
) -> None:
    c = ctx(
        elapsed_ms=elapsed_min * MIN, remaining_ms=remaining_ms, max_tokens=50_000, tokens_used=used
    )
    assert ResourceObserver().observe(c).render() == unwrap(spec)


def test_no_constraints() -> None:
    a = ResourceObserver().observe(ctx(elapsed_ms=MIN))
    assert a.summary == "No resource constraints configured."
    assert a.severity == "info" and a.suggestions == () and a.observations == ()


def test_exhausted_everything_is_warning() -> None:
    c = ctx(
        elapsed_ms=10 * MIN,
        remaining_ms=0,
        max_tokens=100,
        tokens_used=100,
        max_tool_calls=5,
        calls=7,
    )
    a = ResourceObserver().observe(c)
    assert a.summary == (
        "You have reached the time deadline. You have exhausted your token budget. "
        "You have exhausted your tool call budget."
    )
    assert a.severity == "warning"
    assert a.suggestions == (
        "Prioritize completing the most critical remaining work.",
        "Consider wrapping up with a summary of progress and remaining tasks.",
    )
    assert a.observations == ()  # no pace projection past the deadline


def test_tool_calls_use_session_total_and_thresholds() -> None:
    # 500 calls made (far beyond any analysis window), 1000 allowed: 50% left -> info
    a = ResourceObserver().observe(ctx(elapsed_ms=MIN, max_tool_calls=1000, calls=500))
    assert a.summary == "You have made 500 of 1000 allowed tool calls. 500 calls remaining."
    assert a.severity == "info"
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=MIN, max_tool_calls=100, calls=70)).severity
        == "caution"
    )
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=MIN, max_tool_calls=100, calls=69)).severity
        == "info"
    )
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=MIN, max_tool_calls=100, calls=90)).severity
        == "warning"
    )


def test_time_fraction_uses_elapsed_since_session_start() -> None:
    # 10 of 40 minutes left = 25% -> caution; the same 10 minutes of a 12-minute run -> info
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=30 * MIN, remaining_ms=10 * MIN)).severity
        == "caution"
    )
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=2 * MIN, remaining_ms=10 * MIN)).severity
        == "info"
    )
    assert (
        ResourceObserver().observe(ctx(elapsed_ms=95 * MIN, remaining_ms=5 * MIN)).severity
        == "warning"
    )


def test_custom_thresholds() -> None:
    obs = ResourceObserver(caution_threshold=0.5, warning_threshold=0.2)
    assert obs.observe(ctx(elapsed_ms=MIN, max_tokens=100, tokens_used=60)).severity == "caution"
    assert obs.observe(ctx(elapsed_ms=MIN, max_tokens=100, tokens_used=80)).severity == "warning"


def test_threshold_validation_names_key() -> None:
    with pytest.raises(ConfigError, match=r"thresholds\.caution_threshold"):
        ResourceObserver(caution_threshold=1.5)
    with pytest.raises(ConfigError, match=r"thresholds\.warning_threshold"):
        ResourceObserver(caution_threshold=0.1, warning_threshold=0.2)


def test_pace_projects_exhaustion_before_deadline() -> None:
    # 20,000 tokens in 10 minutes = 2,000/min; 10,000 left -> 5 minutes < 30 minute deadline
    c = ctx(
        elapsed_ms=10 * MIN,
        remaining_ms=30 * MIN,
        max_tokens=30_000,
        tokens_used=20_000,
        max_tool_calls=100,
        calls=10,
    )
    a = ResourceObserver().observe(c)
    assert len(a.observations) == 1
    obs = a.observations[0]
    assert obs.category == "pace"
    assert obs.description == (
        "At the current pace (2,000.0 tokens per minute) your token budget runs out in about "
        "5 minutes, before the deadline in 30 minutes."
    )
    assert a.severity == "caution"  # tokens 33% left alone would be info
    assert "**pace**: At the current pace" in a.render()


def test_pace_for_tool_calls_and_quiet_when_on_track() -> None:
    c = ctx(elapsed_ms=10 * MIN, remaining_ms=60 * MIN, max_tool_calls=100, calls=40)
    a = ResourceObserver().observe(c)
    assert [o.description.split(" your ")[1].split(" runs")[0] for o in a.observations] == [
        "tool call budget"
    ]
    on_track = ctx(elapsed_ms=10 * MIN, remaining_ms=5 * MIN, max_tool_calls=100, calls=40)
    assert ResourceObserver().observe(on_track).observations == ()


def test_pace_needs_minimum_elapsed_and_can_be_disabled() -> None:
    early = ctx(elapsed_ms=30_000, remaining_ms=30 * MIN, max_tokens=30_000, tokens_used=20_000)
    assert ResourceObserver().observe(early).observations == ()
    late = ctx(elapsed_ms=10 * MIN, remaining_ms=30 * MIN, max_tokens=30_000, tokens_used=20_000)
    assert ResourceObserver(pace=False).observe(late).observations == ()
    # no deadline -> no projection
    assert (
        ResourceObserver()
        .observe(ctx(elapsed_ms=10 * MIN, max_tokens=30_000, tokens_used=20_000))
        .observations
        == ()
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 seconds"),
        (1, "1 seconds"),
        (59.9, "59 seconds"),
        (60, "1 minute"),
        (119, "1 minute"),
        (120, "2 minutes"),
        (3599, "59 minutes"),
        (3600, "1.0 hours"),
        (5400, "1.5 hours"),
        (86_399, "24.0 hours"),
        (86_400, "1.0 days"),
        (3 * 86_400 + 43_200, "3.5 days"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert ResourceObserver()._format_duration(seconds) == text


def test_name_and_should_run() -> None:
    obs = ResourceObserver()
    assert obs.name == "Resources"
    assert obs.should_run(ctx(elapsed_ms=0)) is True
    assert obs.reports_deadline is True
