"""``streams.core.frozen.quick_init``: the same values as the dataclass's ``__init__``."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

import streams.core.analysis
import streams.core.assessment
import streams.core.engine
import streams.core.observers
import streams.core.patterns
import streams.worker.processor
import streams.worker.state  # noqa: F401  (imports register the decorated classes)
from streams.core.events import TraceEvent
from streams.core.frozen import quick_init, quick_init_classes


def _distinct_values(cls: type[Any]) -> dict[str, Any]:
    """A distinct, recognizable value per field (the types do not matter here)."""
    return {f.name: (f"{cls.__name__}.{f.name}", i) for i, f in enumerate(dataclasses.fields(cls))}


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _built_by(init: Any, cls: type[Any], *args: Any, **kwargs: Any) -> Any:
    obj = object.__new__(cls)
    init(obj, *args, **kwargs)
    return obj


HOT = [
    "TraceEvent",
    "Budget",
    "ToolCallRecord",
    "PendingCall",
    "DoomLoop",
    "ObserverState",
    "ObserverContext",
    "Assessment",
    "CurrentAssessment",
    "EngineOutput",
    "PatternDetection",
    # the worker's per-event values (streams.worker: each event's ApplyResult, a
    # tool call's or error's minute, a model step's budget)
    "ApplyResult",
    "MinuteCounts",
    "BudgetState",
]


def test_the_values_built_on_every_event_have_the_quick_init() -> None:
    names = {cls.__name__ for cls in quick_init_classes()}
    assert set(HOT) <= names


@pytest.mark.parametrize("cls", sorted(quick_init_classes(), key=lambda c: c.__qualname__), ids=str)
def test_every_field_gets_what_the_dataclass_init_gives_it(cls: type[Any]) -> None:
    original = quick_init_classes()[cls]
    assert inspect.signature(cls.__init__) == inspect.signature(original)
    values = _distinct_values(cls)
    params = list(inspect.signature(original).parameters.values())[1:]
    if hasattr(cls, "__post_init__"):
        pytest.skip("checked with real values below (its __post_init__ validates them)")
    positional = [values[p.name] for p in params if p.kind is not p.KEYWORD_ONLY]
    keywords = {p.name: values[p.name] for p in params if p.kind is p.KEYWORD_ONLY}
    fast = cls(*positional, **keywords)
    assert type(fast) is cls
    assert _fields(fast) == _fields(_built_by(original, cls, *positional, **keywords)) == values
    # all by keyword too
    assert _fields(cls(**values)) == values


@pytest.mark.parametrize("cls", sorted(quick_init_classes(), key=lambda c: c.__qualname__), ids=str)
def test_defaults_and_factories_are_the_dataclass_ones(cls: type[Any]) -> None:
    original = quick_init_classes()[cls]
    params = list(inspect.signature(original).parameters.values())[1:]
    required = {p.name: _distinct_values(cls)[p.name] for p in params if p.default is p.empty}
    if hasattr(cls, "__post_init__"):
        pytest.skip("checked with real values below (its __post_init__ validates them)")
    fast, slow = cls(**required), _built_by(original, cls, **required)
    assert _fields(fast) == _fields(slow)
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:  # a fresh value per instance
            assert getattr(cls(**required), f.name) is not getattr(fast, f.name)


def test_a_trace_event_is_still_frozen_and_behaves_as_a_dataclass() -> None:
    ev = TraceEvent("tool_call", "s", 3, 1_000, call_id="c", tool_name="bash", input={"a": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.seq = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del ev.seq  # type: ignore[misc]
    assert dataclasses.replace(ev, seq=4).seq == 4
    assert pickle.loads(pickle.dumps(ev)) == ev
    assert copy.deepcopy(ev) == ev and copy.copy(ev) == ev
    assert ev.metadata == {} and ev.metadata is not TraceEvent("message", "s", 1, 1).metadata
    assert ev == TraceEvent("tool_call", "s", 3, 1_000, None, None, "c", "bash", {"a": 1})


def test_a_post_init_still_runs() -> None:
    from streams.core.assessment import Assessment

    with pytest.raises(ValueError):
        Assessment("obs", "summary", (), (), "not-a-severity")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Assessment(observer_name="obs", summary="s", severity="nope")  # type: ignore[arg-type]
    ok = Assessment("obs", "summary", severity="caution", timestamp_ms=5)
    slow = _built_by(quick_init_classes()[Assessment], Assessment, "obs", "summary")
    assert ok == dataclasses.replace(slow, severity="caution", timestamp_ms=5)
    original = quick_init_classes()[Assessment]
    assert _fields(Assessment("obs", "s")) == _fields(_built_by(original, Assessment, "obs", "s"))


def test_quick_init_refuses_what_it_cannot_build_exactly() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class NotInInit:
        a: int
        b: int = field(init=False, default=0)

    for cls in (NoSlots, NotFrozen):
        with pytest.raises(TypeError, match=r"needs @dataclass\(frozen=True, slots=True\)"):
            quick_init(cls)
    with pytest.raises(TypeError, match="every field must be an __init__ parameter"):
        quick_init(NotInInit)


def test_keyword_only_and_factory_fields_of_a_new_class() -> None:
    @quick_init
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Base:
        kind: str = "base"
        n: int

    @quick_init
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Child(Base):
        kind: str = "child"
        tags: list[str] = field(default_factory=list)

    c = Child(n=2)
    assert (c.kind, c.n, c.tags) == ("child", 2, [])
    assert Child(n=1).tags is not c.tags
    with pytest.raises(TypeError):  # keyword-only, as the dataclass has it
        Child(2)  # type: ignore[misc, call-arg, arg-type]
    with pytest.raises(TypeError):  # n is required
        Child()  # type: ignore[call-arg]
    assert inspect.signature(Child.__init__) == inspect.signature(quick_init_classes()[Child])
