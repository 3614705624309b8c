"""The engine's per-event fast paths against the straightforward path they replace.

Each fast path (issue #12) must change nothing a consumer sees:

* an observer that declares ``idle_when_unchanged`` is skipped while the
  patterns (``TrajectoryBuilder.patterns_version``), the history, its counters
  and the call count are those of its last silent run: compared here against
  the same observer with the skip turned off, event by event;
* an observer that also declares ``assess_quiet`` (the pattern observer) is skipped
  across calls while the patterns and the history stay and the call count is
  below its quiet span (after a silent run, or after its own assessment was
  committed): compared against the always-run observer with one-call spans too;
* ``silent_without_limits`` is honoured only with the ``should_run`` it describes;
  tool calls counted late (``_counted_states``) are all seen by a run and a
  snapshot; ``canonical_json`` is ``json.dumps(sort_keys=True, default=str)``;
* patterns are restamped by copying their fields, not ``dataclasses.replace``;
* the effective budget is cached between the changes that invalidate it;
* drift's task-path pattern (possessive, lookbehind-guarded) finds what the plain
  one found.

``test_engine_digest`` pins the outputs against digests taken before the change;
these tests name which fast path broke.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

import pytest
from engine_sessions import mixed_events
from hypothesis import given, settings
from hypothesis import strategies as st
from json_strategies import json_values

import streams.core.config as config_module
import streams.core.detectors.drift as drift_module
import streams.core.engine as engine_module
from streams.core.analysis import TrajectoryAnalysisConfig, TrajectoryBuilder, _restamped
from streams.core.assessment import Assessment
from streams.core.config import EngineConfig, ObserverSpec
from streams.core.detectors.drift import task_paths
from streams.core.engine import SessionEngine
from streams.core.events import Budget, TraceEvent
from streams.core.observers import ObserverContext, ObserverTrigger
from streams.core.pattern_observer import PatternObserver
from streams.core.patterns import AnalysisView, TrajectoryPattern
from streams.core.resource import ResourceObserver
from streams.core.similarity import canonical_json


@dataclass(frozen=True, slots=True)
class _AlwaysRunPatternObserver(PatternObserver):
    """The pattern observer without the skip: the reference behaviour."""

    @property
    def idle_when_unchanged(self) -> bool:
        return False


def _outputs(events: list[TraceEvent], cfg: EngineConfig) -> list[str]:
    engine = SessionEngine.create(events[0].session_id, cfg)
    out: list[str] = []
    for i, ev in enumerate(events):
        res = engine.on_event(ev)
        out.append(repr(res))
        if i % 50 == 49:
            out.append(repr(engine.on_timer(ev.timestamp_ms + 30_000)))
    out.append(repr(engine.snapshot()))
    return out


#: A pattern observer that never refreshes (its standing assessment ages out of the
#: current one) and a resource observer without a budget requirement that speaks
#: every 7 calls: the history then changes while the patterns do not.
_QUIET_REFRESH = EngineConfig(
    observers=(
        ObserverSpec("resource", ObserverTrigger(every_n_calls=7), ()),
        ObserverSpec("pattern", ObserverTrigger(on_every_call=True), (("refresh_calls", 1000),)),
    )
)


#: Quiet spans across calls (``assess_quiet``) end at a refresh or an escalation:
#: one configuration where escalation comes first, one where refreshes do.
_ESCALATES_FIRST = EngineConfig(
    observers=(
        ObserverSpec("resource", ObserverTrigger(every_n_calls=5), ()),
        ObserverSpec(
            "pattern",
            ObserverTrigger(on_every_call=True),
            (("refresh_calls", 9), ("escalate_after_calls", 2)),
        ),
    )
)
_REFRESHES_FIRST = EngineConfig(
    observers=(
        ObserverSpec(
            "pattern",
            ObserverTrigger(on_every_call=True),
            (("refresh_calls", 2), ("escalate_after_calls", 6)),
        ),
    )
)


#: Spans of one call: the next tool call already refreshes or escalates (a span
#: one call too long skips exactly that run).
_NEXT_CALL = {
    f"next-call-{what}": EngineConfig(
        observers=(
            ObserverSpec(
                "pattern",
                ObserverTrigger(on_every_call=True),
                (("refresh_calls", refresh), ("escalate_after_calls", escalate)),
            ),
        )
    )
    for what, refresh, escalate in (("refresh", 1, 4), ("escalate", 4, 1))
}


@pytest.mark.parametrize(
    "cfg",
    [EngineConfig(), _QUIET_REFRESH, _ESCALATES_FIRST, _REFRESHES_FIRST, *_NEXT_CALL.values()],
    ids=["default", "no-refresh", "escalates-first", "refreshes-first", *_NEXT_CALL],
)
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_skipping_an_idle_observer_changes_no_output(
    cfg: EngineConfig, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = mixed_events(seed, 2_000)
    fast = _outputs(events, cfg)
    monkeypatch.setitem(config_module.OBSERVER_KINDS, "pattern", _AlwaysRunPatternObserver)
    monkeypatch.setattr(engine_module, "_BUILT", {})
    reference = _outputs(events, cfg)
    assert len(fast) == len(reference)
    for i, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert got == want, f"first difference at output {i}"


def _ev(etype: str, seq: int, **kw: object) -> TraceEvent:
    return TraceEvent(etype, "s", seq, 1_700_000_000_000 + 1000 * seq, **kw)  # type: ignore[arg-type]


def test_another_observers_assessment_alone_wakes_the_idle_pattern_observer() -> None:
    """The same failing call looping: the pattern observer warns, then is silent
    (no refresh) while its warning stands in the current assessment.  When the
    resource observer's assessment (made on a ``tool_call``) replaces the current
    one after that warning aged out (20 calls), only the history changed for the
    pattern observer: on the model step that follows it must speak again (the
    specification's "another observer replaced its own"), skip or no skip."""
    engine = SessionEngine.create("s", _QUIET_REFRESH)
    seq = 0
    engine.on_event(_ev("session_start", seq))
    woke_after_other: list[int] = []
    for call in range(1, 45):
        seq += 1
        res = engine.on_event(
            _ev("tool_call", seq, call_id=f"c{call}", tool_name="bash", input="make")
        )
        other_only = res.assessment is not None and all(
            a.observer_name != "Patterns" for a in res.assessment.assessments
        )
        seq += 1
        step = engine.on_event(_ev("model_step", seq, input_tokens=1, output_tokens=1))
        if other_only and step.assessment is not None:
            assert [a.observer_name for a in step.assessment.assessments] == ["Patterns"]
            woke_after_other.append(call)
        seq += 1
        engine.on_event(
            _ev("tool_result", seq, call_id=f"c{call}", is_error=True, error_message="boom")
        )
    assert woke_after_other == [28]


def test_patterns_version_moves_with_every_change_and_never_back() -> None:
    b = TrajectoryBuilder()
    versions = [b.patterns_version]
    seq = 0
    for call in range(6):
        seq += 1
        b.on_event(_ev("tool_call", seq, call_id=f"c{call}", tool_name="bash", input="make"))
        seq += 1
        b.on_event(_ev("tool_result", seq, call_id=f"c{call}", is_error=True, error_message="x"))
        versions.append(b.patterns_version)
    assert b.patterns(), "a failing loop must leave active patterns"
    assert versions == sorted(versions) and versions[-1] > versions[0]
    before = b.patterns_version
    seq += 1
    b.on_event(_ev("model_step", seq, input_tokens=1, output_tokens=1))
    assert b.patterns_version == before  # nothing seen on a model step: unchanged
    b.reset()
    assert b.patterns_version > before and b.patterns() == {}


def test_restamped_equals_dataclasses_replace_for_every_fired_pattern() -> None:
    seen: dict[type, TrajectoryPattern] = {}
    for seed in range(4):
        b = TrajectoryBuilder()
        for ev in mixed_events(seed, 1_500):
            for p in b.on_event(ev):
                seen.setdefault(type(p), p)
            for p in b.patterns().values():
                seen.setdefault(type(p), p)
    assert len(seen) >= 5, sorted(t.__name__ for t in seen)
    for p in seen.values():
        fast = _restamped(p, 7, 123, 9)
        assert fast == replace(p, occurrences=7, first_seen_ms=123, call_index=9)
        assert type(fast) is type(p) and repr(fast) == repr(
            replace(p, occurrences=7, first_seen_ms=123, call_index=9)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _DerivedPattern(TrajectoryPattern):
    """A plugin pattern deriving a field in ``__post_init__``: restamping must run it."""

    pattern_type: str = "derived"
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", f"x{self.occurrences}")


def test_restamped_lets_a_plugin_pattern_derive_its_fields() -> None:
    p = _DerivedPattern(confidence=0.5, evidence=(), first_seen_ms=1)
    fresh = _restamped(p, 3, 2, 1)
    assert isinstance(fresh, _DerivedPattern) and fresh.label == "x3"


def test_the_cached_budget_follows_budget_events_tokens_and_restores() -> None:
    engine = SessionEngine.create("s")
    seq = 0

    def send(etype: str, **kw: object) -> None:
        nonlocal seq
        seq += 1
        engine.on_event(_ev(etype, seq, **kw))

    send("session_start")
    assert engine.budget == Budget(tokens_used=0)
    send("model_step", input_tokens=10, output_tokens=5)
    assert engine.budget == Budget(tokens_used=15)
    send("budget", budget=Budget(max_tokens=100, deadline_ms=5))
    assert engine.budget == Budget(max_tokens=100, deadline_ms=5, tokens_used=15)
    send("snapshot", metadata={"snapshot_id": "p"})
    send("budget", budget=Budget(max_tool_calls=3, tokens_used=50))
    assert engine.budget == Budget(max_tool_calls=3, tokens_used=50)
    send("model_step", input_tokens=0, output_tokens=0)
    assert engine.budget == Budget(max_tool_calls=3, tokens_used=50)
    send("restore", metadata={"snapshot_id": "p"})
    assert engine.budget == Budget(max_tokens=100, deadline_ms=5, tokens_used=15)


_PLAIN_TASK_PATH = re.compile(r"[A-Za-z_][\w\-]*(?:[/.][\w\-]+){2,}")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab_Z9-/. \né.x", max_size=80))
def test_the_task_path_pattern_finds_what_the_plain_pattern_finds(text: str) -> None:
    """The possessive, lookbehind-guarded pattern (drift's scope) matches exactly the
    spans of the straightforward one it replaced."""
    want = [m.span() for m in _PLAIN_TASK_PATH.finditer(text)]
    assert [m.span() for m in drift_module._TASK_PATH.finditer(text)] == want


def test_task_paths_on_real_tasks_equal_the_plain_pattern() -> None:
    texts = [
        "fix src/app/core.py and tests/test_core.py; see pkg.sub.mod and a.b",
        "x1a2b/c/d 9abc/d/e __init__.py/a/b ./rel/path/x.py é/a/b-c/d",
    ]
    for text in texts:
        want = [m.group(0) for m in _PLAIN_TASK_PATH.finditer(text)]
        assert [m.group(0) for m in drift_module._TASK_PATH.finditer(text)] == want
    assert task_paths(texts[0]) == ["src/app/core.py", "tests/test_core.py", "pkg/sub/mod"]
    first = task_paths(texts[0])
    first.append("changed")  # the memo hands out copies
    assert task_paths(texts[0]) == ["src/app/core.py", "tests/test_core.py", "pkg/sub/mod"]


@dataclass(frozen=True, slots=True)
class _ChattyPatternObserver(PatternObserver):
    """Overrides ``should_run`` only: the inherited one-pass ``assess`` and the idle
    skip describe the parent's ``should_run``, so the engine must not use them."""

    def should_run(self, context: ObserverContext) -> bool:
        return True


def test_a_subclass_overriding_should_run_is_asked_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(config_module.OBSERVER_KINDS, "pattern", _ChattyPatternObserver)
    monkeypatch.setattr(engine_module, "_BUILT", {})
    engine = SessionEngine.create("s")
    spoke = 0
    for seq in range(1, 21):
        etype = "model_step" if seq % 2 else "message"
        res = engine.on_event(_ev(etype, seq, input_tokens=1, output_tokens=1, text=f"t{seq}"))
        spoke += res.assessment is not None
    assert spoke == 20


@dataclass(frozen=True, slots=True)
class _ChattyResourceObserver(ResourceObserver):
    """Overrides ``should_run`` only: the inherited ``silent_without_limits`` describes
    the parent's ``should_run``, so the engine must not skip this one."""

    def should_run(self, context: ObserverContext) -> bool:
        return True


def test_silent_without_limits_is_honoured_only_with_the_should_run_it_describes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def resource_runs(kind: type[ResourceObserver]) -> int:
        monkeypatch.setitem(config_module.OBSERVER_KINDS, "resource", kind)
        monkeypatch.setattr(engine_module, "_BUILT", {})
        engine = SessionEngine.create("s")  # default: resource with require_budget
        spoke = 0
        for call in range(1, 31):
            for res in (
                engine.on_event(_ev("tool_call", 2 * call, call_id=f"c{call}", tool_name="ls")),
                engine.on_event(_ev("tool_result", 2 * call + 1, call_id=f"c{call}")),
            ):
                spoke += res.assessment is not None and any(
                    a.observer_name == "Resources" for a in res.assessment.assessments
                )
        return spoke

    assert resource_runs(ResourceObserver) == 0  # no budget: skipped, as should_run says
    assert resource_runs(_ChattyResourceObserver) == 3  # every 10 calls


_JSON_VALUES = json_values(non_finite=True, key_size=5, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_JSON_VALUES)
def test_canonical_json_is_json_dumps_sorted(value: object) -> None:
    assert canonical_json(value) == json.dumps(value, sort_keys=True, default=str)


def test_canonical_json_raises_what_json_dumps_raises() -> None:
    circular: list[object] = []
    circular.append(circular)
    for bad in ({1: 2, "a": 3}, {(1,): 2}, circular):
        with pytest.raises((TypeError, ValueError)) as want:
            json.dumps(bad, sort_keys=True, default=str)
        with pytest.raises(want.type, match=re.escape(str(want.value))):
            canonical_json(bad)
    assert canonical_json({"b": object, "a": (1, "é")}) == json.dumps(
        {"b": object, "a": (1, "é")}, sort_keys=True, default=str
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tagged(TrajectoryPattern):
    """A plugin pattern whose instances differ by ``tag``."""

    tag: str = ""

    @property
    def key(self) -> str:
        return self.tag


class _FreshInfo:
    """Fires a new info-level ``custom`` pattern on every call."""

    name = "fresh_info"

    def detect(self, analysis: AnalysisView) -> TrajectoryPattern | None:
        n = analysis.tool_call_count
        return _Tagged(
            pattern_type="custom", confidence=0.1, evidence=(), first_seen_ms=n, tag=f"a{n}"
        )

    def reset(self) -> None:
        return None


class _GrowingCaution:
    """One ``custom`` instance that fires at info and is refreshed to caution."""

    name = "growing_caution"

    def detect(self, analysis: AnalysisView) -> TrajectoryPattern | None:
        conf = 0.1 if analysis.tool_call_count < 2 else 0.9
        return _Tagged(
            pattern_type="custom", confidence=conf, evidence=(), first_seen_ms=0, tag="b"
        )

    def reset(self) -> None:
        return None


def test_a_silent_run_on_a_pattern_the_analysis_does_not_show_vouches_for_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two detectors report the same pattern type: the one that fired on this event
    (info) hides, for this run only, the one the analysis shows (caution).  The
    silence of that run must not carry over to the next event, where the pattern
    observer sees the caution pattern and speaks (``_quiet_until`` returns 0)."""
    cfg = EngineConfig(
        analysis=TrajectoryAnalysisConfig(detectors=(_FreshInfo(), _GrowingCaution())),
        observers=(ObserverSpec("pattern", ObserverTrigger(on_every_call=True)),),
    )
    events = [_ev("session_start", 0)]
    for call in range(1, 6):
        events.append(_ev("tool_call", len(events), call_id=f"c{call}", tool_name="ls"))
        events.append(_ev("tool_result", len(events), call_id=f"c{call}"))
        events.append(_ev("model_step", len(events), input_tokens=1, output_tokens=1))
    fast = _outputs(events, cfg)
    assert any("Patterns" in out for out in fast)
    monkeypatch.setitem(config_module.OBSERVER_KINDS, "pattern", _AlwaysRunPatternObserver)
    monkeypatch.setattr(engine_module, "_BUILT", {})
    assert fast == _outputs(events, cfg)


@dataclass(frozen=True, slots=True)
class _CallCounter:
    """Says how many tool calls its state counted since its last assessment."""

    @property
    def name(self) -> str:
        return "Counter"

    def should_run(self, context: ObserverContext) -> bool:
        return True

    def observe(self, context: ObserverContext) -> Assessment:
        st = context.observer_state
        return Assessment(
            observer_name=self.name,
            summary=f"{st.tool_calls_since_assessment} calls, {st.total_assessments} before",
        )


def test_an_observer_sees_every_call_counted_although_counting_is_deferred(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine adds tool calls to the observers' states only when something reads
    them (``_counted_states``): a run, a commit, a snapshot must see them all."""
    monkeypatch.setitem(config_module.OBSERVER_KINDS, "counter", _CallCounter)
    cfg = EngineConfig(observers=(ObserverSpec("counter", ObserverTrigger(every_n_calls=3)),))
    engine = SessionEngine.create("s", cfg)
    said: list[str] = []
    seq = 0
    for call in range(1, 10):
        seq += 1
        res = engine.on_event(_ev("tool_call", seq, call_id=f"c{call}", tool_name="ls"))
        if res.assessment is not None:
            said.append(res.assessment.assessments[0].summary)
        seq += 1
        engine.on_event(_ev("tool_result", seq, call_id=f"c{call}"))
    assert said == ["3 calls, 0 before", "3 calls, 1 before", "3 calls, 2 before"]
    seq += 1
    engine.on_event(_ev("tool_call", seq, call_id="c10", tool_name="ls"))
    (_, st), *_ = engine.snapshot().observer_states
    assert (st.tool_calls_since_assessment, st.total_assessments) == (1, 3)
