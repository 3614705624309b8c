"""The built-in ResourceObserver: remaining time, tokens and tool calls, in words.

It follows the trajectory-observers specification sentence for sentence
(thresholds, severities, suggestions, ``_format_duration``), with event time in
place of ``datetime.utcnow()``:

* remaining time = ``budget.deadline_ms - context.now_ms``;
* elapsed time = ``context.now_ms - context.session_start_ms`` (the session's
  first event);
* tool calls used = the session's total ``tool_call_count`` (not capped by the
  analysis window);
* severities are ranked (info < caution < warning); the specification's
  ``max(severity, "caution")`` compares strings and would never escalate.

Beyond the specification, *pace estimation*: when a deadline is set, the burn
rate of tokens and tool calls over elapsed event time projects when each budget
runs out; if that is before the deadline, a ``pace`` observation says so and
the severity is raised to at least caution.  Pace is only estimated after
``pace_min_elapsed_ms`` of session time and once something was consumed, so a
single early burst cannot raise an alarm.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.assessment import Assessment, Observation, Severity, max_severity
from streams.core.errors import ConfigError
from streams.core.observers import ObserverContext

_WARNING_SUGGESTIONS = (
    "Prioritize completing the most critical remaining work.",
    "Consider wrapping up with a summary of progress and remaining tasks.",
)
_CAUTION_SUGGESTIONS = ("Be mindful of remaining resources when planning next steps.",)


def format_duration(seconds: float) -> str:
    """Seconds as a human-readable duration, exactly as the specification words it."""
    if seconds < 60:
        return f"{int(seconds)} seconds"
    elif seconds < 3600:
        minutes = int(seconds / 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    else:
        hours = seconds / 3600
        if hours < 24:
            return f"{hours:.1f} hours"
        days = hours / 24
        return f"{days:.1f} days"


@dataclass(frozen=True, slots=True)
class ResourceObserver:
    """Report remaining time, token and tool-call budget in natural language.

    Thresholds are fractions *remaining*: caution at or below
    ``caution_threshold``, warning at or below ``warning_threshold``.
    """

    caution_threshold: float = 0.3
    warning_threshold: float = 0.1
    pace: bool = True
    pace_min_elapsed_ms: int = 60_000
    #: Spec behaviour (False): always run when triggered, saying "No resource
    #: constraints configured." for a session without a budget.  The default
    #: deployment config sets True, so budget-less sessions get no Resources
    #: assessment at all (an assessment the agent can do nothing with is noise).
    require_budget: bool = False

    def __post_init__(self) -> None:
        for key in ("caution_threshold", "warning_threshold"):
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise ConfigError(
                    f"thresholds.{key}", f"expected a fraction between 0 and 1, got {value!r}"
                )
        if self.warning_threshold > self.caution_threshold:
            raise ConfigError(
                "thresholds.warning_threshold",
                f"{self.warning_threshold} is above caution_threshold {self.caution_threshold}; "
                "warning must be the smaller fraction remaining",
            )
        if (
            isinstance(self.pace_min_elapsed_ms, bool)
            or not isinstance(self.pace_min_elapsed_ms, int)
            or (self.pace_min_elapsed_ms < 0)
        ):
            raise ConfigError(
                "thresholds.pace_min_elapsed_ms",
                f"expected an int >= 0, got {self.pace_min_elapsed_ms!r}",
            )

        if not isinstance(self.pace, bool):
            raise ConfigError("thresholds.pace", f"expected true/false, got {self.pace!r}")
        if not isinstance(self.require_budget, bool):
            raise ConfigError(
                "thresholds.require_budget", f"expected true/false, got {self.require_budget!r}"
            )

    @property
    def name(self) -> str:
        return "Resources"

    @property
    def reports_deadline(self) -> bool:
        return True

    @property
    def silent_without_limits(self) -> bool:
        """The engine may skip this observer, without building a context, while the
        session's budget sets no limit (no deadline, token or tool-call limit).

        Contract (what makes the skip exact): with ``require_budget`` true,
        ``should_run`` returns False whenever ``context.budget`` has none of the
        three limits, so such a run produces nothing and changes no counter.
        Keep ``should_run`` that way or drop this flag.
        """
        return self.require_budget

    def should_run(self, context: ObserverContext) -> bool:
        # The trigger configuration controls frequency; with ``require_budget`` a
        # session that never set a limit has nothing to report.
        if not self.require_budget:
            return True
        b = context.budget
        return b.deadline_ms is not None or b.max_tokens is not None or b.max_tool_calls is not None

    def _fraction_severity(self, severity: Severity, pct_remaining: float) -> Severity:
        if pct_remaining <= self.warning_threshold:
            return "warning"
        if pct_remaining <= self.caution_threshold:
            return max_severity(severity, "caution")
        return severity

    def observe(self, context: ObserverContext) -> Assessment:
        budget = context.budget
        statements: list[str] = []
        severity: Severity = "info"
        remaining_seconds: float | None = None

        if budget.deadline_ms is not None:
            remaining_seconds = (budget.deadline_ms - context.now_ms) / 1000
            if remaining_seconds <= 0:
                statements.append("You have reached the time deadline.")
                severity = "warning"
            else:
                time_str = format_duration(remaining_seconds)
                elapsed = context.elapsed_ms / 1000
                total = elapsed + remaining_seconds
                pct_remaining = remaining_seconds / total if total > 0 else 0
                statements.append(f"You have {time_str} remaining before the deadline.")
                severity = self._fraction_severity(severity, pct_remaining)

        tokens_used = budget.tokens_used or 0
        if budget.max_tokens is not None:
            remaining = budget.max_tokens - tokens_used
            if remaining <= 0:
                statements.append("You have exhausted your token budget.")
                severity = "warning"
            else:
                pct_used = tokens_used / budget.max_tokens
                statements.append(
                    f"You have used {tokens_used:,} of {budget.max_tokens:,} tokens "
                    f"({pct_used:.0%} of budget). {remaining:,} tokens remaining."
                )
                severity = self._fraction_severity(severity, remaining / budget.max_tokens)

        calls_used = context.analysis.tool_call_count
        if budget.max_tool_calls is not None:
            remaining = budget.max_tool_calls - calls_used
            if remaining <= 0:
                statements.append("You have exhausted your tool call budget.")
                severity = "warning"
            else:
                statements.append(
                    f"You have made {calls_used} of {budget.max_tool_calls} allowed tool calls. "
                    f"{remaining} calls remaining."
                )
                severity = self._fraction_severity(severity, remaining / budget.max_tool_calls)

        observations = self._pace(context, remaining_seconds, tokens_used, calls_used)
        if observations:
            severity = max_severity(severity, "caution")

        suggestions: tuple[str, ...] = ()
        if severity == "warning":
            suggestions = _WARNING_SUGGESTIONS
        elif severity == "caution":
            suggestions = _CAUTION_SUGGESTIONS

        summary = " ".join(statements) if statements else "No resource constraints configured."
        return Assessment(
            observer_name=self.name,
            summary=summary,
            observations=observations,
            suggestions=suggestions,
            severity=severity,
            timestamp_ms=context.now_ms,
        )

    def _pace(
        self,
        context: ObserverContext,
        remaining_seconds: float | None,
        tokens_used: int,
        calls_used: int,
    ) -> tuple[Observation, ...]:
        """Budgets projected to run out before the deadline at the current burn rate."""
        budget = context.budget
        elapsed_ms = context.elapsed_ms
        if not self.pace or remaining_seconds is None or remaining_seconds <= 0:
            return ()
        if elapsed_ms < max(self.pace_min_elapsed_ms, 1):
            return ()
        out: list[Observation] = []
        checks = (
            ("tokens", tokens_used, budget.max_tokens, "token budget"),
            ("tool calls", calls_used, budget.max_tool_calls, "tool call budget"),
        )
        for unit, used, limit, label in checks:
            if limit is None or used <= 0 or used >= limit:
                continue
            rate_per_s = used / (elapsed_ms / 1000)
            runs_out_s = (limit - used) / rate_per_s
            if runs_out_s < remaining_seconds:
                per_minute = rate_per_s * 60
                out.append(
                    Observation(
                        category="pace",
                        description=(
                            f"At the current pace ({per_minute:,.1f} {unit} per minute) "
                            f"your {label} "
                            f"runs out in about {format_duration(runs_out_s)}, before the deadline "
                            f"in {format_duration(remaining_seconds)}."
                        ),
                    )
                )
        return tuple(out)

    def _format_duration(self, seconds: float) -> str:
        """The specification's method name; see :func:`format_duration`."""
        return format_duration(seconds)


__all__ = ["ResourceObserver", "format_duration"]
