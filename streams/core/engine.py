"""SessionEngine: one session's analysis, observers and assessments, as pure code.

The Faust worker, the CLI and offline replay all run this same engine, so the
same events always give byte-identical outputs (no wall clock, no randomness,
no hash-order dependence).

Per applied event, in order:

1. **dedupe** — ``seq <= last applied seq`` returns ``applied=False`` and changes
   nothing (at-least-once delivery becomes exactly-once effect);
2. **control** — ``budget`` replaces the limits (and the token count, when it
   carries ``tokens_used``); ``session_start`` may pick an observer profile
   (``metadata["observer_profile"]``); ``snapshot`` stores a restore point under
   ``metadata["snapshot_id"]`` and ``restore`` goes back to one.  At most
   ``EngineConfig.max_snapshots`` restore points are kept (the oldest is
   evicted; re-using an id replaces it and makes it the newest);
3. **tokens** — ``model_step`` input+output tokens are added to ``tokens_used``;
4. **analysis** — the event goes to the ``TrajectoryBuilder``; the patterns that
   fired become :class:`PatternDetection` values;
5. **observers** — each observer's own trigger is checked against its own
   :class:`~streams.core.observers.ObserverState`; the assessments produced
   become the session's :class:`~streams.core.assessment.CurrentAssessment`
   (``call_index`` = tool calls so far), tools they suggest are reported back
   to the builder (``note_suggestion``).  An observer whose
   ``watches_agent_events`` is true (the pattern observer) also runs on
   agent messages, model steps and agent-level errors, which event detectors
   (monologue, context loop) judge although they make no tool call.

Bad events raise :class:`~streams.core.errors.InvalidEventError` naming the
field (another session's id, a ``budget`` event without a budget, a
``snapshot``/``restore`` without a known ``snapshot_id``, an unknown profile)
*before* anything is changed: a rejected event leaves the engine exactly as it
was, so the caller can dead-letter it and carry on.

:meth:`SessionEngine.on_timer` lets a quiet session still get time-triggered
and deadline assessments; those are marked ``trigger="timer"`` because they
depend on when the timer ran and are not reproduced by a replay of events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from streams.core.assessment import (
    Assessment,
    AssessmentHistory,
    CurrentAssessment,
    TriggerKind,
    max_severity,
    severity_rank,
    severity_trend,
)
from streams.core.errors import ConfigError, InvalidEventError
from streams.core.events import META_OBSERVER_PROFILE, META_SNAPSHOT_ID, Budget, TraceEvent
from streams.core.frozen import quick_init
from streams.core.observers import (
    AnalysisView,
    ObserverConfig,
    ObserverContext,
    ObserverState,
    PatternView,
    time_trigger_due,
)
from streams.core.patterns import TrajectoryPattern
from streams.core.statecodec import state_type

if TYPE_CHECKING:
    from streams.core.config import EngineConfig

#: How many tool calls another observer's caution-or-warning assessment stays in the
#: current one while that observer does not run again (``SessionEngine._with_standing``);
#: the specification's staleness window, ``CurrentAssessment.is_stale``'s default.
STANDING_MAX_AGE_CALLS = 20
_CAUTION_RANK = severity_rank("caution")
#: Event types ``_validate`` can reject (besides another session's id): every other
#: event of this session passes, so the per-event path skips the call.
_CHECKED_TYPES: Final = frozenset({"budget", "snapshot", "restore", "session_start"})


class AnalysisBuilder(AnalysisView, Protocol):
    """The seam to ``streams.core.analysis.TrajectoryBuilder`` (see the architecture).

    The builder is itself a live analysis view; observers read it directly
    (no per-event copy via ``build()``).
    """

    def on_event(self, event: TraceEvent) -> Sequence[TrajectoryPattern]: ...
    def build(self) -> AnalysisView: ...
    def snapshot(self) -> Any: ...
    def note_suggestion(self, tool_name: str) -> None: ...


class BuilderFactory(Protocol):
    """How the engine makes builders: the ``TrajectoryBuilder`` class satisfies it."""

    def from_config(self, cfg: Any) -> AnalysisBuilder: ...
    def build_from(self, cfg: Any, state: Any) -> AnalysisBuilder: ...


def _default_factory() -> BuilderFactory:
    from streams.core.analysis import TrajectoryBuilder

    factory: BuilderFactory = TrajectoryBuilder
    return factory


@state_type("engine.pattern_detection/1")
@quick_init
@dataclass(frozen=True, slots=True)
class PatternDetection:
    """A pattern that fired on one event of one session (``<prefix>.patterns``)."""

    session_id: str
    seq: int
    call_index: int
    timestamp_ms: int
    pattern: TrajectoryPattern


@state_type("engine.output/1")
@quick_init
@dataclass(frozen=True, slots=True)
class EngineOutput:
    """What one event produced; ``applied`` is False for duplicates."""

    applied: bool
    patterns: tuple[PatternDetection, ...] = ()
    assessment: CurrentAssessment | None = None


@state_type("engine.session_state/1")
@dataclass(frozen=True, slots=True)
class SessionState:
    """Everything needed to resume a session's engine: plain frozen values only.

    ``analysis`` is the builder's own ``snapshot()`` value.  ``observer_states``
    pairs each active observer's name with its counters, in configuration
    order.  ``snapshots`` holds restore points (their own ``snapshots`` is
    always empty), oldest first.  ``deadline_reported_ms`` is the deadline
    whose crossing was already reported, so it is reported once.
    """

    session_id: str
    last_seq: int = -1
    profile: str = "default"
    session_start_ms: int | None = None
    last_event_ms: int | None = None
    budget: Budget = field(default_factory=Budget)
    tokens_used: int = 0
    analysis: Any = None
    observer_states: tuple[tuple[str, ObserverState], ...] = ()
    current: CurrentAssessment | None = None
    history: AssessmentHistory = field(default_factory=AssessmentHistory)
    deadline_reported_ms: int | None = None
    snapshots: tuple[tuple[str, SessionState], ...] = ()


class SessionEngine:
    """Runs one session (see the module docstring). Not thread-safe; one per session."""

    __slots__ = (
        "_budget",
        "_budget_view",
        "_builder",
        "_call_count",
        "_cfg",
        "_current",
        "_deadline_reported_ms",
        "_factory",
        "_history",
        "_idle",
        "_last_event_ms",
        "_last_seq",
        "_observer_states",
        "_observers",
        "_profile",
        "_runners",
        "_session_id",
        "_session_start_ms",
        "_snapshots",
        "_tokens_used",
        "_uncounted",
    )

    def __init__(self, cfg: EngineConfig, state: SessionState, factory: BuilderFactory) -> None:
        self._cfg = cfg
        self._factory = factory
        self._snapshots: tuple[tuple[str, SessionState], ...] = state.snapshots
        self._load(state)

    # ----------------------------------------------------------------- creation

    @classmethod
    def create(
        cls,
        session_id: str,
        cfg: EngineConfig | None = None,
        *,
        factory: BuilderFactory | None = None,
    ) -> SessionEngine:
        """A fresh engine for ``session_id`` (``cfg`` defaults to ``EngineConfig()``)."""
        if cfg is None:
            from streams.core.config import EngineConfig

            cfg = EngineConfig()
        history = AssessmentHistory(max_entries=cfg.history_size)
        return cls(
            cfg, SessionState(session_id=session_id, history=history), factory or _default_factory()
        )

    @classmethod
    def build(
        cls, cfg: EngineConfig, state: SessionState, *, factory: BuilderFactory | None = None
    ) -> SessionEngine:
        """Resume from ``state`` (as returned by :meth:`snapshot`, possibly via the codec)."""
        if not isinstance(state, SessionState):
            raise TypeError(f"expected SessionState, got {type(state).__name__}")
        return cls(cfg, state, factory or _default_factory())

    def _load(self, state: SessionState) -> None:
        """Install ``state`` (all but the snapshot store) into this engine."""
        self._session_id = state.session_id
        self._last_seq = state.last_seq
        self._session_start_ms = state.session_start_ms
        self._last_event_ms = state.last_event_ms
        self._budget = state.budget
        self._tokens_used = state.tokens_used
        self._budget_view: Budget | None = None
        self._current = state.current
        history = state.history
        if history.max_entries != self._cfg.history_size:
            history = AssessmentHistory(
                entries=history.entries[-self._cfg.history_size :],
                max_entries=self._cfg.history_size,
            )
        self._history = history
        self._deadline_reported_ms = state.deadline_reported_ms
        if state.analysis is None:
            self._builder = self._factory.from_config(self._cfg.analysis)
        else:
            self._builder = self._factory.build_from(self._cfg.analysis, state.analysis)
        self._call_count = self._builder.tool_call_count
        self._idle: dict[str, tuple[int, AssessmentHistory, ObserverState, int]] = {}
        self._uncounted = 0
        self._set_profile(state.profile, dict(state.observer_states))

    def _counted_states(self) -> dict[str, ObserverState]:
        """The observer states with every tool call counted.

        Invariant: each observer's true ``tool_calls_since_assessment`` is its
        state's value plus ``_uncounted``; whatever reads the states as values
        (a run, a commit, a snapshot, the timer, a profile change) calls this
        first.  Why: rebuilding every observer's frozen state on every tool call
        cost more than the runs that read it (most calls run no observer).
        """
        n = self._uncounted
        states = self._observer_states
        if n:
            self._uncounted = 0
            for name, st in states.items():  # values replaced, keys unchanged
                states[name] = ObserverState(  # positional, in field order
                    st.tool_calls_since_assessment + n,
                    st.last_assessment_ms,
                    st.last_assessment_call_index,
                    st.total_assessments,
                )
        return states

    def _set_profile(self, profile: str, states: dict[str, ObserverState]) -> None:
        specs = self._cfg.observers_for(profile)
        self._profile = profile
        try:
            built = _BUILT.get(specs)
            cacheable = True
        except TypeError:  # an unhashable threshold value: build it, do not cache it
            built, cacheable = None, False
        if built is None:
            observers = tuple((s.name, s.build()) for s in specs)
            built = (observers, tuple(_Runner(n, oc) for n, oc in observers))
            if cacheable:
                if len(_BUILT) >= _BUILT_MAX:
                    _BUILT.clear()
                _BUILT[specs] = built
        self._observers: tuple[tuple[str, ObserverConfig], ...] = built[0]
        self._runners: tuple[_Runner, ...] = built[1]
        self._observer_states: dict[str, ObserverState] = {
            s.name: states.get(s.name, ObserverState()) for s in specs
        }
        self._idle.clear()

    # -------------------------------------------------------------- accessors

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def profile(self) -> str:
        return self._profile

    @property
    def current(self) -> CurrentAssessment | None:
        """The latest assessment (for prompt injection)."""
        return self._current

    @property
    def history(self) -> AssessmentHistory:
        return self._history

    @property
    def budget(self) -> Budget:
        """The effective budget: the last limits plus the tokens counted so far.

        Cached (every observer run reads it): invariant ``_budget_view`` is None or
        equals the value built from ``_budget`` and ``_tokens_used``; whatever
        assigns either of them resets it to None.
        """
        view = self._budget_view
        if view is None:
            b = self._budget  # built field by field: dataclasses.replace costs ~5x more
            view = self._budget_view = Budget(
                deadline_ms=b.deadline_ms,
                max_tokens=b.max_tokens,
                tokens_used=self._tokens_used,
                max_tool_calls=b.max_tool_calls,
            )
        return view

    def analysis(self) -> AnalysisView:
        return self._builder.build()

    # ------------------------------------------------------------------- state

    def _state(self, *, with_snapshots: bool) -> SessionState:
        return SessionState(
            session_id=self._session_id,
            last_seq=self._last_seq,
            profile=self._profile,
            session_start_ms=self._session_start_ms,
            last_event_ms=self._last_event_ms,
            budget=self._budget,
            tokens_used=self._tokens_used,
            analysis=self._builder.snapshot(),
            observer_states=tuple(self._counted_states().items()),
            current=self._current,
            history=self._history,
            deadline_reported_ms=self._deadline_reported_ms,
            snapshots=self._snapshots if with_snapshots else (),
        )

    def snapshot(self) -> SessionState:
        """The whole engine state as a plain frozen value (encode with the codec)."""
        return self._state(with_snapshots=True)

    # ------------------------------------------------------------------ events

    def _validate(self, ev: TraceEvent) -> None:
        """Every check that can reject ``ev``, before anything is changed."""
        if ev.session_id != self._session_id:
            raise InvalidEventError(
                "session_id",
                f"event of session {ev.session_id!r} sent to the engine of {self._session_id!r}",
            )
        if ev.type == "budget" and ev.budget is None:
            raise InvalidEventError(
                "budget", "a budget event must carry a budget (limits may be null)"
            )
        if ev.type in ("snapshot", "restore"):
            sid = ev.metadata.get(META_SNAPSHOT_ID)
            if not sid:
                raise InvalidEventError(
                    f"metadata.{META_SNAPSHOT_ID}", f"a {ev.type} event needs a snapshot id"
                )
            if ev.type == "restore" and sid not in dict(self._snapshots):
                known = ", ".join(k for k, _ in self._snapshots) or "none"
                raise InvalidEventError(
                    f"metadata.{META_SNAPSHOT_ID}",
                    f"no snapshot {sid!r} in this session (known: {known})",
                )
        if ev.type == "session_start":
            profile = ev.metadata.get(META_OBSERVER_PROFILE)
            if profile is not None:
                try:
                    self._cfg.observers_for(profile)
                except ConfigError as exc:
                    raise InvalidEventError(f"metadata.{META_OBSERVER_PROFILE}", str(exc)) from exc

    def on_event(self, ev: TraceEvent) -> EngineOutput:
        """Apply one event (see the module docstring for the steps)."""
        etype = ev.type
        if ev.session_id == self._session_id:
            if ev.seq <= self._last_seq:
                return _NOT_APPLIED
            if etype in _CHECKED_TYPES:
                self._validate(ev)
        else:
            self._validate(ev)  # raises: another session's event

        if etype == "restore":
            self._restore(ev)
            return EngineOutput(applied=True)

        if self._session_start_ms is None:
            self._session_start_ms = ev.timestamp_ms
        now = ev.timestamp_ms
        last = self._last_event_ms
        if last is not None and last > now:
            now = last  # event time never goes back (``max``, without the call)
        self._last_event_ms = now

        if ev.type == "snapshot":
            self._take_snapshot(ev)
            self._last_seq = ev.seq
            return EngineOutput(applied=True)
        if ev.type == "budget":
            assert ev.budget is not None
            b = ev.budget
            self._budget = Budget(
                deadline_ms=b.deadline_ms, max_tokens=b.max_tokens, max_tool_calls=b.max_tool_calls
            )
            if b.tokens_used is not None:
                self._tokens_used = b.tokens_used
            self._budget_view = None
        elif ev.type == "session_start":
            profile = ev.metadata.get(META_OBSERVER_PROFILE)
            if profile is not None and profile != self._profile:
                self._set_profile(profile, self._counted_states())
        elif etype == "model_step":
            tokens = ev.total_tokens
            if tokens:
                self._tokens_used += tokens
                self._budget_view = None

        before = self._call_count
        fired = tuple(self._builder.on_event(ev))
        analysis: AnalysisView = self._builder
        count = analysis.tool_call_count
        self._call_count = count
        delta = count - before if count > before else 0
        is_result = etype == "tool_result" or (etype == "error" and ev.call_id is not None)
        call_step = delta > 0 or is_result
        failure = is_result and (etype == "error" or ev.is_error)
        # an agent message/model step/agent error is no call step, but event
        # detectors (monologue, context loop) judge it: observers that say so
        # (``watches_agent_events``) run on it too
        agent_step = not call_step and (bool(fired) or etype in ("message", "model_step", "error"))

        if delta:
            self._uncounted += delta  # counted when read (``_counted_states``)
        uncounted = self._uncounted

        deadline_due = self._budget.deadline_ms is not None and self._deadline_due(now)
        produced: list[tuple[str, Assessment]] = []
        # quiet observers that spoke, and their quiet span once that is committed
        spoke: list[tuple[str, ObserverState, int]] = []
        states = self._observer_states
        version: int | None = getattr(analysis, "patterns_version", None)
        idle = self._idle
        b = self._budget
        unlimited = b.deadline_ms is None and b.max_tokens is None and b.max_tool_calls is None
        for r in self._runners:
            if unlimited and r.silent_without_limits:
                continue  # its should_run is False without a limit (its declared contract)
            st = states[r.name]
            n_calls = r.every_n_calls
            n_errors = r.after_errors
            if (
                # ``should_trigger``, written out (two calls with keywords per event cost
                # more than the checks); test_engine_trigger_digest pins it
                (
                    call_step
                    and (
                        r.on_every_call
                        or (n_calls and st.tool_calls_since_assessment + uncounted >= n_calls)
                    )
                )
                or (failure and n_errors and analysis.consecutive_errors >= n_errors)
                or (r.timed and time_trigger_due(r.trigger, st, now, self._session_start_ms))
                or (deadline_due and r.watches_deadline)
                or (agent_step and r.watches_agent_events)
            ):
                quiet = r.assess_quiet
                if quiet is not None and version is not None and not fired:
                    # silent on the same patterns and history below that call count
                    # (``assess_quiet``, its declared contract)
                    seen = idle.get(r.name)
                    if (
                        seen is not None
                        and seen[0] == version
                        and seen[1] is self._history
                        and count < seen[3]
                    ):
                        continue
                if uncounted:  # it runs: its state must count every call
                    st = self._counted_states()[r.name]
                    uncounted = 0
                if quiet is not None and version is not None:
                    a, until = quiet(self._context(st, analysis, now, fired))
                    if a is None:
                        idle[r.name] = (version, self._history, st, until)
                    elif until:
                        spoke.append((r.name, st, until))
                elif not r.idle_when_unchanged or fired or version is None:
                    a = self._run(r, st, analysis, now, fired)
                else:
                    # it said nothing on the same patterns, history, counters and call
                    # count: it would say nothing again (its declared contract)
                    seen = idle.get(r.name)
                    if (
                        seen is not None
                        and seen[0] == version
                        and seen[1] is self._history
                        and seen[2] is st
                        and seen[3] == count
                    ):
                        continue
                    a = self._run(r, st, analysis, now, fired)
                    if a is None:
                        idle[r.name] = (version, self._history, st, count)
                if a is not None:
                    produced.append((r.name, a))

        assessment = (
            self._commit(produced, analysis, now, ev.seq, "event", deadline_due)
            if produced
            else None
        )
        if spoke and version is not None:
            for name, st, until in spoke:
                idle[name] = (version, self._history, st, until)  # see ``assess_quiet``
        self._last_seq = ev.seq
        if not fired and assessment is None:
            return _APPLIED
        patterns = tuple(
            PatternDetection(
                session_id=self._session_id,
                seq=ev.seq,
                call_index=count,
                timestamp_ms=ev.timestamp_ms,
                pattern=p,
            )
            for p in fired
        )
        return EngineOutput(applied=True, patterns=patterns, assessment=assessment)

    def on_timer(self, now_ms: int) -> CurrentAssessment | None:
        """Time-triggered and deadline assessments for a quiet session, or None.

        ``now_ms`` earlier than the last event time is treated as that time
        (event time never goes backwards here).
        """
        if self._session_start_ms is None:
            return None
        now = now_ms if self._last_event_ms is None else max(self._last_event_ms, now_ms)
        analysis: AnalysisView = self._builder
        deadline_due = self._deadline_due(now)
        produced: list[tuple[str, Assessment]] = []
        states = self._counted_states()
        for r in self._runners:
            st = states[r.name]
            due = time_trigger_due(r.trigger, st, now, self._session_start_ms) or (
                deadline_due and r.watches_deadline
            )
            if due:
                a = self._run(r, st, analysis, now, ())
                if a is not None:
                    produced.append((r.name, a))
        return self._commit(produced, analysis, now, self._last_seq, "timer", deadline_due)

    # ---------------------------------------------------------------- helpers

    def _deadline_due(self, now: int) -> bool:
        deadline = self._budget.deadline_ms
        return deadline is not None and now >= deadline and self._deadline_reported_ms != deadline

    def _run(
        self,
        r: _Runner,
        st: ObserverState,
        analysis: AnalysisView,
        now: int,
        fired: tuple[PatternView, ...],
    ) -> Assessment | None:
        ctx = self._context(st, analysis, now, fired)
        if r.assess is not None:
            return r.assess(ctx)
        observer = r.observer
        if not observer.should_run(ctx):
            return None
        return observer.observe(ctx)

    def _context(
        self, st: ObserverState, analysis: AnalysisView, now: int, fired: tuple[PatternView, ...]
    ) -> ObserverContext:
        assert self._session_start_ms is not None
        return ObserverContext(
            self._session_id,
            analysis,
            st,
            self._budget_view or self.budget,
            now,
            self._session_start_ms,
            fired,
            self._history,
        )

    def _commit(
        self,
        produced: list[tuple[str, Assessment]],
        analysis: AnalysisView,
        now: int,
        seq: int,
        trigger: TriggerKind,
        deadline_due: bool,
    ) -> CurrentAssessment | None:
        if not produced:
            return None
        count = analysis.tool_call_count
        states = self._counted_states()
        for name, _ in produced:
            st = states[name]
            states[name] = ObserverState(
                tool_calls_since_assessment=0,
                last_assessment_ms=now,
                last_assessment_call_index=count,
                total_assessments=st.total_assessments + 1,
            )
        if deadline_due and any(r.watches_deadline for r in self._runners):
            self._deadline_reported_ms = self._budget.deadline_ms
        previous = self._history.latest
        assessments = self._with_standing(produced, count)
        severity = max_severity(*(a.severity for a in assessments))
        current = CurrentAssessment(
            assessments=assessments,
            generated_at_ms=now,
            call_index=count,
            session_id=self._session_id,
            seq=seq,
            trigger=trigger,
            trend=severity_trend(previous.severity if previous else None, severity),
        )
        self._current = current
        self._history = self._history.add(current)
        for _, a in produced:
            for tool in a.suggested_tools:
                self._builder.note_suggestion(tool)
        return current

    def _with_standing(
        self, produced: list[tuple[str, Assessment]], count: int
    ) -> tuple[Assessment, ...]:
        """The new assessments plus every other observer's standing caution or
        warning, in the observers' configured order.

        Why: the specification replaces the current assessment with what ran at this
        trigger, so a budget warning made at call 30 vanished from the agent's context
        as soon as the pattern observer said anything at call 31, while the budget was
        still exceeded.  An assessment of caution or above stays in the current one
        while its observer has not run again and it is at most
        ``STANDING_MAX_AGE_CALLS`` calls old (the staleness window ``context_for``
        uses); its observer's next run replaces it.  Deterministic: the call count
        only, no clock.
        """
        ran = {name for name, _ in produced}
        new = dict(produced)
        standing: dict[str, Assessment] = {}
        current = self._current
        if current is not None:
            by_observer = {r.observer.name: r.name for r in self._runners}
            for a in current.assessments:
                name = by_observer.get(a.observer_name)
                if name is None or name in ran or severity_rank(a.severity) < _CAUTION_RANK:
                    continue
                made_at = self._observer_states[name].last_assessment_call_index
                if count - made_at <= STANDING_MAX_AGE_CALLS:
                    standing[name] = a
        return tuple(
            new.get(name) or standing[name]
            for name, _ in self._observers
            if name in new or name in standing
        )

    def _take_snapshot(self, ev: TraceEvent) -> None:
        sid = ev.metadata[META_SNAPSHOT_ID]
        point = replace(self._state(with_snapshots=False), last_seq=ev.seq)
        kept = tuple((k, s) for k, s in self._snapshots if k != sid)
        self._snapshots = (*kept, (sid, point))[-self._cfg.max_snapshots :]

    def _restore(self, ev: TraceEvent) -> None:
        """Go back to a restore point; ``last_seq`` and the event clock move forward
        (dedupe and event time stay monotonic), everything else is the point's."""
        point = dict(self._snapshots)[ev.metadata[META_SNAPSHOT_ID]]
        last_event = point.last_event_ms
        if last_event is None or ev.timestamp_ms > last_event:
            last_event = ev.timestamp_ms
        self._load(replace(point, last_seq=ev.seq, last_event_ms=last_event))


_APPLIED: Final = EngineOutput(applied=True)
#: Built observers and their runners per observer-spec tuple: every session of a
#: configuration runs the same frozen observers (built-in kinds are frozen values
#: with no per-session state), so they are built once, not once per session.
_BUILT: dict[
    tuple[Any, ...], tuple[tuple[tuple[str, ObserverConfig], ...], tuple[_Runner, ...]]
] = {}
_BUILT_MAX: Final = 64
_NOT_APPLIED: Final = EngineOutput(applied=False)


class _Runner:
    """One configured observer with what the per-event loop asks of it, looked up
    once per profile instead of once per event (getattr, not
    ``isinstance(obs, DeadlineAware)``: a runtime Protocol check is slow,
    docs/faust-notes.md).

    ``assess`` is the observer's optional one-pass ``assess(context)`` (equal to
    ``observe(context) if should_run(context) else None``, judging the context
    once); None for observers without it.  Both it and ``idle_when_unchanged``
    are promises about ``should_run``/``observe``, so they are honoured only when
    the class that defines them also defines those (a subclass overriding
    ``should_run`` falls back to the plain calls).  So are ``assess_quiet``
    (``assess`` plus the call count a silence lasts to, with the patterns and the
    history unchanged: the idle skip then holds across calls, not only within one;
    the pattern observer) and ``silent_without_limits`` (``should_run`` is False
    while the budget sets no limit: the resource observer with ``require_budget``,
    skipped without building a context).  The trigger's conditions are unpacked
    here because the loop checks them inline (``should_trigger``, written out).
    """

    __slots__ = (
        "after_errors",
        "assess",
        "assess_quiet",
        "every_n_calls",
        "idle_when_unchanged",
        "name",
        "observer",
        "on_every_call",
        "silent_without_limits",
        "timed",
        "trigger",
        "watches_agent_events",
        "watches_deadline",
    )

    def __init__(self, name: str, oc: ObserverConfig) -> None:
        self.name = name
        self.observer = oc.observer
        self.trigger = oc.trigger
        self.on_every_call = oc.trigger.on_every_call
        # ``should_trigger``'s conditions, unpacked for the per-event loop
        self.every_n_calls = oc.trigger.every_n_calls
        self.after_errors = oc.trigger.after_consecutive_errors
        self.timed = oc.trigger.every_n_seconds is not None
        self.watches_agent_events = bool(getattr(oc.observer, "watches_agent_events", False))
        self.watches_deadline = bool(getattr(oc.observer, "reports_deadline", False))
        cls = type(oc.observer)
        self.idle_when_unchanged = _defined_together(
            cls, "idle_when_unchanged", "should_run"
        ) and bool(getattr(oc.observer, "idle_when_unchanged", False))
        quiet = getattr(oc.observer, "assess_quiet", None)
        self.assess_quiet: Callable[[ObserverContext], tuple[Assessment | None, int]] | None = (
            quiet
            if self.idle_when_unchanged
            and callable(quiet)
            and _defined_together(
                cls, "assess_quiet", "idle_when_unchanged", "should_run", "observe"
            )
            else None
        )
        self.silent_without_limits = _defined_together(
            cls, "silent_without_limits", "should_run"
        ) and bool(getattr(oc.observer, "silent_without_limits", False))
        assess = getattr(oc.observer, "assess", None)
        self.assess: Callable[[ObserverContext], Assessment | None] | None = (
            assess
            if callable(assess) and _defined_together(cls, "assess", "should_run", "observe")
            else None
        )


def _defined_together(cls: type, *names: str) -> bool:
    """True when one class of ``cls``'s MRO defines all of ``names`` (the first that
    defines each is the same class)."""
    owners = {next((k for k in cls.__mro__ if name in vars(k)), None) for name in names}
    return len(owners) == 1 and None not in owners


__all__ = [
    "AnalysisBuilder",
    "BuilderFactory",
    "EngineOutput",
    "PatternDetection",
    "SessionEngine",
    "SessionState",
]
