"""PatternObserver: turns the analysis' active patterns into one actionable assessment.

One :class:`~streams.core.assessment.Observation` per active pattern (category =
pattern type, evidence = the pattern's evidence lines) and concrete suggestions
per pattern type.

Severity policy (a false *warning* on a healthy run is costly, so warning is
reserved for strong evidence):

* ``warning`` — a doom loop with confidence >= ``warning_confidence``; a
  repeated error seen >= ``warning_error_count`` times with confidence >=
  ``caution_confidence``;
* ``caution`` — a loop-like pattern (:data:`ESCALATING_PATTERNS`: the agent
  repeats the same thing) with confidence >= ``caution_confidence``; a
  heuristic pattern (context degradation, error cascade, thrashing, progress
  stall, drift, tool avoidance, file churn: inferred from kinds of calls, not
  from the agent repeating itself) with confidence >=
  ``heuristic_caution_confidence`` (0.7 by default);
* ``info`` — weaker evidence (still reported, so the agent can see it).

Why two caution thresholds: ``context_for`` injects caution into the agent's
context, so a caution on a healthy run is a false alarm the agent acts on.  A
loop-like pattern at 0.6 already means the same call or error came back at
least three times; a heuristic pattern at 0.6 is one or two steps above its
detector's firing floor (error cascade: three failures in a row, thrashing:
one verb 9 of 10 calls, context degradation: four symptoms) and was, on the
real runs of ``../shared/trajdata``, what raised caution on resolved runs.  It
needs one more step of evidence before the agent is interrupted.

It is meant to run on every call but only *answers* (``should_run``) when a
pattern of at least caution severity newly fired on this event, or when the
severity of the active patterns differs from its own previous assessment
(escalation, or patterns clearing — then it says so once at ``info``, naming
what stopped).  A healthy session therefore never gets a pattern assessment,
and weak (info) patterns alone never trigger one.

Persistence and escalation (the specification's "severity trends" and
"assessment history" extensions), driven by events only:

* **refresh** — while a pattern of at least caution severity stays active (its
  detector confirmed it again on the last completed call: a pattern the
  detector no longer sees is dropped by the analysis), the observer answers
  again once ``refresh_calls`` tool calls have passed since it last spoke, and
  on the next call step whenever another observer's assessment replaced its
  own as the session's current one.  With ``refresh_calls`` below the
  staleness horizon (20 calls, ``CurrentAssessment.is_stale``), the agent's
  context is never stale while the problem lasts;
* **memory** — every assessment records in ``Assessment.tracked`` which pattern
  instances (type + the call it fired at) it reported at caution or above and
  since which call they were first reported; the next assessment reads that
  back from the history, so the text says how long the pattern has lasted and
  since which call it was first reported;
* **escalation** — a pattern reported at ``caution`` that is still active
  ``escalate_after_calls`` calls after it was first reported is raised to
  ``warning`` (it went on after the agent was told) — for the loop-like types
  of :data:`ESCALATING_PATTERNS` only.

Invariant: the same events give the same assessments (event time and call
counts only, no timers), so a replay reproduces refreshes and escalations.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

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


#: Pattern types whose persistence after a report is itself strong evidence (the
#: agent repeats the same thing although it was told): only these escalate.
#: Heuristic patterns (context degradation, thrashing, stall, drift) stay at
#: their own severity however long they last: on resolved runs they are the
#: usual source of false alarms.
ESCALATING_PATTERNS: Final[frozenset[str]] = frozenset(
    {"doom_loop", "repeated_error", "monologue", "context_loop", "alternating_cycle"}
)


#: :meth:`PatternObserver.assess_quiet`'s "silent at every call count".
_QUIET_FOREVER: Final = sys.maxsize

#: Pattern types whose confidence alone can reach warning (the detectors raise it
#: with every further repeat).
_WARN_AT_CONFIDENCE: Final[frozenset[str]] = frozenset({"doom_loop", "monologue", "context_loop"})


@functools.lru_cache(maxsize=1024)
def _inspects(tool_name: str) -> bool:
    """The tool's name has an ``_INSPECT_HINTS`` fragment (memoized: asked for up to
    ``recent_window`` calls per assessment, over the same few tool names)."""
    lowered = tool_name.lower()
    return any(h in lowered for h in _INSPECT_HINTS)


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + " ..."


def _call_label(call: ToolCallView) -> str:
    """``tool(params)``, with long params cut to their first word and `` ...``."""
    params = " ".join((call.params_summary or "").split())
    if len(params) > 30:
        params = _short(params.split(" ")[0], 30) + " ..."
    return f"{call.tool_name}({params})"


class _Judged(NamedTuple):
    """One active pattern as the observer judges it on this call (a NamedTuple:
    built for every active pattern on nearly every event, and a tuple is the
    cheapest immutable value to build)."""

    pattern: PatternView
    base: Severity
    effective: Severity
    first_reported: int | None


def _pattern_start(p: PatternView, last_completed: int) -> int:
    """The first call of the pattern: for a loop (``repetitions`` x ``cycle_length``
    ending at the last completed call) its first repeated call, else the call it
    fired at."""
    reps = getattr(p, "repetitions", None)
    length = getattr(p, "cycle_length", None)
    if isinstance(reps, int) and isinstance(length, int) and reps > 0 and length > 0:
        return max(1, min(p.call_index, last_completed - reps * length + 1))
    return p.call_index


@dataclass(frozen=True, slots=True)
class PatternObserver:
    """Report active trajectory patterns with evidence and per-type advice."""

    warning_confidence: float = 0.9
    caution_confidence: float = 0.6
    heuristic_caution_confidence: float = 0.7
    warning_error_count: int = 5
    recent_window: int = 50
    refresh_calls: int = 5
    escalate_after_calls: int = 3

    def __post_init__(self) -> None:
        for key in ("warning_confidence", "caution_confidence", "heuristic_caution_confidence"):
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise ConfigError(
                    f"thresholds.{key}", f"expected a confidence between 0 and 1, got {value!r}"
                )
        for key in (
            "warning_error_count",
            "recent_window",
            "refresh_calls",
            "escalate_after_calls",
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"thresholds.{key}", f"expected a positive integer, got {value!r}"
                )

    @property
    def name(self) -> str:
        return "Patterns"

    @property
    def watches_agent_events(self) -> bool:
        """Run on agent messages/model steps too (monologue, context loop)."""
        return True

    @property
    def idle_when_unchanged(self) -> bool:
        """The engine may skip a run that would see what its last silent run saw.

        Contract (what makes the skip exact): whether it speaks is decided from
        ``analysis.patterns()``, ``analysis.tool_call_count``, ``new_patterns``,
        ``observer_state`` and ``history`` only, never from the budget or the
        clock.  So with no new patterns and the same patterns (the builder's
        ``patterns_version``), history, observer state and call count as a run
        that returned nothing, it returns nothing again.  Keep ``should_run``
        that way or drop this flag.
        """
        return True

    # ------------------------------------------------------------------ policy

    def pattern_severity(self, pattern: PatternView) -> Severity:
        """Severity of one pattern (see the module docstring)."""
        ptype = pattern.pattern_type
        conf = pattern.confidence
        if ptype in _WARN_AT_CONFIDENCE and conf >= self.warning_confidence:
            return "warning"
        if ptype == "repeated_error" and conf >= self.caution_confidence:
            count = int(getattr(pattern, "count", pattern.occurrences))
            if count >= self.warning_error_count:
                return "warning"
        floor = (
            self.caution_confidence
            if ptype in ESCALATING_PATTERNS
            else self.heuristic_caution_confidence
        )
        if conf >= floor:
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

    def _judge(self, context: ObserverContext, previous: Assessment | None) -> list[_Judged]:
        """Each active pattern with its base and effective severity and, when the
        agent was already told about it, the call it was first reported at.

        ``previous`` is this observer's last assessment (``history.last_for``)."""
        active = self._active(context)
        if not active:
            return []
        tracked = previous.tracked if previous is not None else ()
        call = context.analysis.tool_call_count
        severity = self.pattern_severity
        out: list[_Judged] = []
        for p in active:
            base = severity(p)
            first: int | None = None
            if tracked:  # a few entries: a scan is cheaper than building a dict per event
                ptype = p.pattern_type
                fired_at = p.call_index
                for t, fired, reported in tracked:
                    if fired == fired_at and t == ptype:
                        first = reported  # the last match wins, as in a dict of tracked
            effective = base
            if (
                base == "caution"
                and first is not None
                and p.pattern_type in ESCALATING_PATTERNS
                and call - first >= self.escalate_after_calls
            ):
                effective = "warning"
            out.append(_Judged(p, base, effective, first))
        return out

    def assess(self, context: ObserverContext) -> Assessment | None:
        """``observe(context) if should_run(context) else None``, judging the
        context once (the engine calls this on every event that may concern it)."""
        previous = context.history.last_for(self.name)
        judged = self._judge(context, previous)
        if not self._should_run(context, judged, previous):
            return None
        return self._observe(context, judged, previous)

    def assess_quiet(self, context: ObserverContext) -> tuple[Assessment | None, int]:
        """:meth:`assess`, and the call count before which it would say nothing
        (``_QUIET_FOREVER``: at every count): after this silent run, or, when it
        spoke, after the engine committed what it said (see :meth:`_quiet_after`).

        Contract (what lets the engine skip runs across calls, not only on the same
        call as ``idle_when_unchanged``): when this returns ``(None, until)``, a run
        with no new patterns, the same patterns (``patterns_version``) and the same
        history returns None at every call count below ``until``, whatever the
        ``observer_state`` (it reads ``last_assessment_call_index`` only, which
        changes only when this observer speaks, i.e. with the history), the budget
        and the clock.  A silent run with new patterns vouches so for later runs
        without them, or returns 0 (no span).  Why it holds: with the patterns and
        the previous assessment fixed, the call count reaches ``_should_run`` only
        through escalation (a caution pattern already reported becomes warning
        ``escalate_after_calls`` calls after its report) and the ``refresh_calls``
        repeat (see :meth:`_quiet_until`).
        """
        previous = context.history.last_for(self.name)
        judged = self._judge(context, previous)
        if self._should_run(context, judged, previous):
            said = self._observe(context, judged, previous)
            return said, self._quiet_after(context, judged, said)
        return None, self._quiet_until(context, judged, previous)

    @staticmethod
    def _shows_new(context: ObserverContext) -> bool:
        """The new patterns are the very patterns the analysis shows by type: then a
        run without them judges the same active patterns (``_active``)."""
        if not context.new_patterns:
            return True
        shown = context.analysis.patterns()
        return all(shown.get(p.pattern_type) is p for p in context.new_patterns)

    def _quiet_after(
        self, context: ObserverContext, judged: list[_Judged], said: Assessment
    ) -> int:
        """For a run that said ``said``: the quiet span (see :meth:`assess_quiet`) of
        the runs after the engine committed it, i.e. with ``said`` as the previous
        assessment and in the latest current one, and ``last_assessment_call_index``
        at this call count.

        Why it is silent then: the severity is what it just said (patterns reported
        before keep their first report, new ones are first reported now, so none
        escalates at this count), no call has passed since it spoke, and the latest
        current assessment holds its own; the cleared assessment has no
        observations.  It speaks again at the ``refresh_calls`` repeat or (below
        warning) when an escalating caution pattern escalates.
        """
        if not self._shows_new(context):
            return 0
        if not judged:
            return _QUIET_FOREVER
        current = said.severity
        if current == "info":
            return _QUIET_FOREVER
        call = context.call_index
        until = call + self.refresh_calls
        if current == "caution":
            after = self.escalate_after_calls
            for j in judged:
                if j.base == "caution" and j.pattern.pattern_type in ESCALATING_PATTERNS:
                    first = j.first_reported if j.first_reported is not None else call
                    until = min(until, first + after)
        return until

    def _quiet_until(
        self, context: ObserverContext, judged: list[_Judged], previous: Assessment | None
    ) -> int:
        """For a silent run: the first call count at which ``_should_run`` could say
        True with the same patterns, history and no new patterns.

        No previous assessment: escalation needs a report, so the severity and the
        answer (speak iff not info) do not move.  No active pattern: the answer is
        ``previous.observations``, fixed.  Severity info (so no caution pattern can
        escalate): fixed.  Otherwise it speaks at the ``refresh_calls`` repeat, or
        (below warning) when a reported escalating caution pattern escalates,
        changing the severity it last said.
        """
        if not self._shows_new(context):
            # a silent run with new patterns speaks for later runs without them only
            # when they are the very patterns the analysis shows (then ``_active``
            # is the same, and new patterns can only make it speak)
            return 0
        if previous is None or not judged:
            return _QUIET_FOREVER
        current: Severity = "info"
        for j in judged:
            if j.effective == "warning":
                current = "warning"
                break
            if j.effective == "caution":
                current = "caution"
        if current == "info":
            return _QUIET_FOREVER
        until = context.observer_state.last_assessment_call_index + self.refresh_calls
        if current == "caution":
            after = self.escalate_after_calls
            for j in judged:
                first = j.first_reported
                if (
                    j.base == "caution"
                    and first is not None
                    and j.pattern.pattern_type in ESCALATING_PATTERNS
                    and first + after < until
                ):
                    until = first + after
        return until

    def should_run(self, context: ObserverContext) -> bool:
        """Speak on a newly fired pattern of at least caution severity, when the
        active patterns' severity differs from what this observer last said
        (escalation, or "everything cleared"), and, while a caution-or-warning
        pattern lasts, every ``refresh_calls`` calls or when another observer's
        assessment replaced this one's (module docstring).  Weak (info) patterns
        alone never make it speak; they are included when it speaks for another
        reason."""
        previous = context.history.last_for(self.name)
        return self._should_run(context, self._judge(context, previous), previous)

    def _should_run(
        self, context: ObserverContext, judged: list[_Judged], previous: Assessment | None
    ) -> bool:
        current: Severity = "info"
        for j in judged:  # max_severity, written out (this runs on nearly every event)
            if j.effective == "warning":
                current = "warning"
                break
            if j.effective == "caution":
                current = "caution"
        if previous is None:
            return current != "info"
        if not judged:
            return bool(previous.observations)  # patterns cleared since we last spoke: say so once
        for p in context.new_patterns:
            if self.pattern_severity(p) != "info":
                return True
        if current != previous.severity:
            return True
        if current == "info":
            return False
        since = context.call_index - context.observer_state.last_assessment_call_index
        if since >= self.refresh_calls:
            return True
        latest = context.history.latest
        if latest is None:
            return False
        name = self.name
        return all(a.observer_name != name for a in latest.assessments)

    # ----------------------------------------------------------------- observe

    def observe(self, context: ObserverContext) -> Assessment:
        previous = context.history.last_for(self.name)
        return self._observe(context, self._judge(context, previous), previous)

    def _observe(
        self, context: ObserverContext, judged: list[_Judged], previous: Assessment | None
    ) -> Assessment:
        if not judged:
            return self._cleared(context, previous)
        call = context.call_index
        recent = context.recent_tool_calls(self.recent_window)
        observations: list[Observation] = []
        suggestions: list[str] = []
        tools: list[str] = []
        tracked: list[tuple[str, int, int]] = []
        told: list[int] = []
        escalated = False
        for j in judged:
            p = j.pattern
            description = self._describe(p)
            if j.base != "info":
                first = j.first_reported if j.first_reported is not None else call
                tracked.append((p.pattern_type, p.call_index, first))
                if j.first_reported is not None:
                    told.append(j.first_reported)
                    last = recent[-1].call_index if recent else call
                    start = _pattern_start(p, last)
                    description += (
                        f" It has lasted {call - start + 1} calls (since call #{start}) and "
                        f"is still going {call - j.first_reported} calls after it was first "
                        f"reported (after call #{j.first_reported})."
                    )
                    if j.effective != j.base:
                        escalated = True
                        description += " Raised to warning: it continued after you were told."
            observations.append(
                Observation(
                    category=p.pattern_type,
                    description=description,
                    evidence="\n".join(p.evidence) if p.evidence else None,
                )
            )
            for text, tool in self._advise(p, recent):
                if text not in suggestions:
                    suggestions.append(text)
                if tool is not None and tool not in tools:
                    tools.append(tool)
        names = ", ".join(j.pattern.pattern_type.replace("_", " ") for j in judged)
        plural = "s" if len(judged) != 1 else ""
        summary = (
            f"Detected {len(judged)} trajectory pattern{plural} after {call} tool calls: {names}."
        )
        if told:
            summary += (
                f" Still unresolved {call - min(told)} calls after it was first reported "
                f"(after call #{min(told)})"
                + ("; severity raised to warning." if escalated else ".")
            )
        return Assessment(
            observer_name=self.name,
            summary=summary,
            observations=tuple(observations),
            suggestions=tuple(suggestions),
            severity=max_severity(*(j.effective for j in judged)),
            timestamp_ms=context.now_ms,
            suggested_tools=tuple(tools),
            tracked=tuple(tracked),
        )

    def _cleared(self, context: ObserverContext, previous: Assessment | None) -> Assessment:
        """Say once that the patterns stopped (naming those that were reported)."""
        stopped = previous.tracked if previous is not None else ()
        if not stopped:
            summary = "No trajectory patterns are active any more; the earlier ones cleared."
        else:
            what = ", ".join(
                f"{t.replace('_', ' ')} (first reported after call #{first})"
                for t, _, first in stopped
            )
            summary = (
                f"No trajectory patterns are active any more: {what} stopped "
                f"by tool call #{context.call_index}."
            )
        return Assessment(
            observer_name=self.name,
            summary=summary,
            severity="info",
            timestamp_ms=context.now_ms,
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
        if ptype == "monologue":
            reps = getattr(p, "repetitions", p.occurrences)
            return f"You sent the same message {reps} times without a tool call ({conf})."
        if ptype == "context_loop":
            n = getattr(p, "count", p.occurrences)
            return (
                f"{n} context-window errors or condensations with no progress "
                f"between them ({conf})."
            )
        if ptype == "alternating_cycle":
            actions = tuple(getattr(p, "cycle_actions", ()) or ())
            reps = getattr(p, "repetitions", p.occurrences)
            same = " with the same results" if getattr(p, "identical_results", False) else ""
            return f"Alternating {' <-> '.join(actions)} {reps} times{same} ({conf})."
        return f"Pattern {ptype.replace('_', ' ')} seen {p.occurrences} times ({conf})."

    @staticmethod
    def _last_call(recent: Sequence[ToolCallView], actions: tuple[str, ...]) -> ToolCallView | None:
        """The most recent call of the cycle, preferring a failed one (the one to stop).

        Cycle actions may be bare tool names or ``tool(params)`` labels.
        """
        names = {a.split("(", 1)[0] for a in actions}
        last: ToolCallView | None = None  # the newest matching call, if none failed
        for call in reversed(recent):
            if names and call.tool_name not in names:
                continue
            if not call.success:
                return call
            if last is None:
                last = call
        return last

    @staticmethod
    def _inspect_tool(recent: Sequence[ToolCallView], exclude: tuple[str, ...]) -> str | None:
        """A read-only tool the agent already used successfully, to point it back to."""
        for call in reversed(recent):
            name = call.tool_name
            if call.success and name not in exclude and _inspects(name):
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
        elif ptype == "monologue":
            out.append(
                (
                    "Stop repeating the message: act on it with a tool call, "
                    "or finish if the task is done.",
                    None,
                )
            )
        elif ptype == "context_loop":
            out.append(
                (
                    "The context keeps overflowing: read smaller pieces (line ranges, head/grep) "
                    "and avoid commands with large outputs.",
                    None,
                )
            )
        elif ptype == "alternating_cycle":
            out.append(
                (
                    "You keep alternating between the same two actions; "
                    "change the approach instead of another round.",
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


__all__ = ["ESCALATING_PATTERNS", "PatternObserver"]
