"""PatternObserver: turns the analysis' active patterns into one actionable assessment.

One :class:`~streams.core.assessment.Observation` per active pattern (category =
pattern type, evidence = the pattern's evidence lines) and concrete suggestions
per pattern type.

Severity policy (a false *warning* on a healthy run is costly, so warning is
reserved for strong evidence):

* ``warning`` — a doom loop with confidence >= ``warning_confidence``; a
  repeated error seen >= ``warning_error_count`` times with confidence >=
  ``caution_confidence``;
* ``caution`` — any other pattern with confidence >= ``caution_confidence``;
* ``info`` — weaker evidence (still reported, so the agent can see it).

It is meant to run on every call but only *answers* (``should_run``) when a
pattern of at least caution severity newly fired on this event, or when the
severity of the active patterns differs from its own previous assessment
(escalation, or patterns clearing — then it says so once at ``info``).  A
healthy session therefore never gets a pattern assessment, and weak (info)
patterns alone never trigger one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streams.core.assessment import Assessment, Observation, Severity, max_severity
from streams.core.errors import ConfigError
from streams.core.observers import ObserverContext, PatternView, ToolCallView

#: Tool-name fragments of tools that inspect rather than change things; a
#: successful earlier use of one is what we recommend when an agent is stuck.
_INSPECT_HINTS = (
    "read",
    "view",
    "cat",
    "grep",
    "search",
    "find",
    "open",
    "list",
    "ls",
    "inspect",
    "show",
)


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + " ..."


def _call_label(call: ToolCallView) -> str:
    """``tool(params)``, with long params cut to their first word and `` ...``."""
    params = " ".join((call.params_summary or "").split())
    if len(params) > 30:
        params = _short(params.split(" ")[0], 30) + " ..."
    return f"{call.tool_name}({params})"


@dataclass(frozen=True, slots=True)
class PatternObserver:
    """Report active trajectory patterns with evidence and per-type advice."""

    warning_confidence: float = 0.9
    caution_confidence: float = 0.6
    warning_error_count: int = 5
    recent_window: int = 50

    def __post_init__(self) -> None:
        for key in ("warning_confidence", "caution_confidence"):
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise ConfigError(
                    f"thresholds.{key}", f"expected a confidence between 0 and 1, got {value!r}"
                )
        for key in ("warning_error_count", "recent_window"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"thresholds.{key}", f"expected a positive integer, got {value!r}"
                )

    @property
    def name(self) -> str:
        return "Patterns"

    # ------------------------------------------------------------------ policy

    def pattern_severity(self, pattern: PatternView) -> Severity:
        """Severity of one pattern (see the module docstring)."""
        ptype = pattern.pattern_type
        conf = pattern.confidence
        if ptype == "doom_loop" and conf >= self.warning_confidence:
            return "warning"
        if ptype == "repeated_error" and conf >= self.caution_confidence:
            count = int(getattr(pattern, "count", pattern.occurrences))
            if count >= self.warning_error_count:
                return "warning"
        if conf >= self.caution_confidence:
            return "caution"
        return "info"

    def _active(self, context: ObserverContext) -> tuple[PatternView, ...]:
        """Active patterns, with patterns that fired on this event taking precedence."""
        by_type: dict[str, PatternView] = {}
        for p in context.analysis.patterns().values():
            by_type[p.pattern_type] = p
        for p in context.new_patterns:
            by_type[p.pattern_type] = p
        return tuple(by_type.values())

    def should_run(self, context: ObserverContext) -> bool:
        """Speak on a newly fired pattern of at least caution severity, or when the
        active patterns' severity differs from what this observer last said
        (including "everything cleared").  Weak (info) patterns alone never make
        it speak; they are included when it speaks for another reason."""
        active = self._active(context)
        current = max_severity(*(self.pattern_severity(p) for p in active))
        previous = context.history.last_for(self.name)
        if previous is None:
            return current != "info"
        if not active:
            return bool(previous.observations)  # patterns cleared since we last spoke: say so once
        if any(self.pattern_severity(p) != "info" for p in context.new_patterns):
            return True
        return current != previous.severity

    # ----------------------------------------------------------------- observe

    def observe(self, context: ObserverContext) -> Assessment:
        active = self._active(context)
        if not active:
            return Assessment(
                observer_name=self.name,
                summary="No trajectory patterns are active any more; the earlier ones cleared.",
                severity="info",
                timestamp_ms=context.now_ms,
            )
        recent = context.recent_tool_calls(self.recent_window)
        observations: list[Observation] = []
        suggestions: list[str] = []
        tools: list[str] = []
        severities: list[Severity] = []
        for p in active:
            severities.append(self.pattern_severity(p))
            observations.append(
                Observation(
                    category=p.pattern_type,
                    description=self._describe(p),
                    evidence="\n".join(p.evidence) if p.evidence else None,
                )
            )
            for text, tool in self._advise(p, recent):
                if text not in suggestions:
                    suggestions.append(text)
                if tool is not None and tool not in tools:
                    tools.append(tool)
        names = ", ".join(p.pattern_type.replace("_", " ") for p in active)
        plural = "s" if len(active) != 1 else ""
        summary = (
            f"Detected {len(active)} trajectory pattern{plural} "
            f"after {context.call_index} tool calls: {names}."
        )
        return Assessment(
            observer_name=self.name,
            summary=summary,
            observations=tuple(observations),
            suggestions=tuple(suggestions),
            severity=max_severity(*severities),
            timestamp_ms=context.now_ms,
            suggested_tools=tuple(tools),
        )

    @staticmethod
    def _describe(p: PatternView) -> str:
        conf = f"confidence {p.confidence:.0%}"
        ptype = p.pattern_type
        if ptype == "doom_loop":
            actions = tuple(getattr(p, "cycle_actions", ()) or ())
            reps = getattr(p, "repetitions", p.occurrences)
            cycle = " -> ".join(actions) if actions else "the same calls"
            return f"The cycle {cycle} repeated {reps} times ({conf})."
        if ptype == "repeated_error":
            count = getattr(p, "count", p.occurrences)
            tool = getattr(p, "tool_name", None)
            sig = getattr(p, "error_signature", None)
            src = f" from `{tool}`" if tool else ""
            what = f": {_short(str(sig), 80)}" if sig else ""
            return f"The same error occurred {count} times{src}{what} ({conf})."
        if ptype == "progress_stall":
            n = getattr(p, "actions_during_stall", p.occurrences)
            return f"No progress over the last {n} tool calls ({conf})."
        if ptype == "tool_avoidance":
            tool = getattr(p, "avoided_tool", "the suggested tool")
            n = getattr(p, "alternative_attempts", p.occurrences)
            return f"`{tool}` was suggested but not used; {n} other approaches were tried ({conf})."
        if ptype == "context_degradation":
            symptoms = tuple(getattr(p, "symptoms", ()) or ())
            what = "; ".join(symptoms) if symptoms else "signs of context pressure"
            return f"Context degradation: {what} ({conf})."
        return f"Pattern {ptype.replace('_', ' ')} seen {p.occurrences} times ({conf})."

    @staticmethod
    def _last_call(recent: Sequence[ToolCallView], actions: tuple[str, ...]) -> ToolCallView | None:
        """The most recent call of the cycle, preferring a failed one (the one to stop).

        Cycle actions may be bare tool names or ``tool(params)`` labels.
        """
        names = {a.split("(", 1)[0] for a in actions}
        matching = [c for c in recent if not names or c.tool_name in names]
        for call in reversed(matching):
            if not call.success:
                return call
        return matching[-1] if matching else None

    @staticmethod
    def _inspect_tool(recent: Sequence[ToolCallView], exclude: tuple[str, ...]) -> str | None:
        """A read-only tool the agent already used successfully, to point it back to."""
        for call in reversed(recent):
            name = call.tool_name
            if (
                call.success
                and name not in exclude
                and any(h in name.lower() for h in _INSPECT_HINTS)
            ):
                return name
        return None

    def _advise(
        self, p: PatternView, recent: Sequence[ToolCallView]
    ) -> list[tuple[str, str | None]]:
        """Concrete suggestions for one pattern, each with the tool it recommends (if any)."""
        ptype = p.pattern_type
        out: list[tuple[str, str | None]] = []
        if ptype == "doom_loop":
            actions = tuple(getattr(p, "cycle_actions", ()) or ())
            call = self._last_call(recent, actions)
            label = f"`{_call_label(call)}`" if call is not None else "the same calls"
            if call is not None and call.success:
                text = (
                    f"Stop repeating {label}; "
                    "check what the last result told you and change approach."
                )
            else:
                text = f"Stop repeating {label}; read the last error and change approach."
            out.append((text, None))
            inspect = self._inspect_tool(recent, tuple(a.split("(", 1)[0] for a in actions))
            if inspect:
                out.append(
                    (f"Use `{inspect}` to check your assumptions before the next attempt.", inspect)
                )
        elif ptype == "repeated_error":
            tool = getattr(p, "tool_name", None)
            src = f"`{tool}`" if tool else "the failing call"
            out.append(
                (f"Fix the cause of the repeated error from {src} before retrying it.", None)
            )
            inspect = self._inspect_tool(recent, (tool,) if tool else ())
            if inspect:
                out.append(
                    (f"Use `{inspect}` to look at the code or data the error points to.", inspect)
                )
        elif ptype == "progress_stall":
            out.append(
                ("Step back: re-read the task and try a smaller step or a different tool.", None)
            )
        elif ptype == "tool_avoidance":
            tool = getattr(p, "avoided_tool", None)
            if tool:
                out.append(
                    (f"Try `{tool}` as suggested, or note why it does not apply.", str(tool))
                )
        elif ptype == "context_degradation":
            out.append(("Write a short summary of what you know so far before continuing.", None))
        elif ptype == "error_cascade":
            out.append(
                (
                    "Several calls failed in a row: diagnose the first failure before trying more.",
                    None,
                )
            )
        elif ptype == "thrashing":
            out.append(
                (
                    "You keep switching back and forth on the same target; "
                    "make one complete change, then verify.",
                    None,
                )
            )
        elif ptype == "drift":
            out.append(("Recent work is outside the task's scope; return to the task.", None))
        elif ptype == "file_churn":
            out.append(
                (
                    "The same file keeps being rewritten; "
                    "plan the whole change before editing it again.",
                    None,
                )
            )
        else:
            out.append(
                (f"Review the {ptype.replace('_', ' ')} pattern above and change approach.", None)
            )
        return out


__all__ = ["PatternObserver"]
