"""Canonical codec: deterministic bytes, loud failures with field paths, exact round trips."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.assessment import Assessment, AssessmentHistory, CurrentAssessment, Observation
from streams.core.codec import (
    STATE_VERSION,
    decode_state,
    encode_state,
    from_canonical,
    to_canonical,
)
from streams.core.engine import SessionState
from streams.core.errors import StateDecodeError, UnserializableError
from streams.core.events import Budget
from streams.core.observers import ObserverState


@dataclass
class NotFrozen:
    x: int


def test_canonical_form_sorted_compact_utf8() -> None:
    assert (
        to_canonical({"b": 1, "a": [2.5, "é"], "c": None})
        == '{"a":{"!list":[2.5,"é"]},"b":1,"c":null}'.encode()
    )
    assert to_canonical((1, True, "x")) == b'[1,true,"x"]'
    assert to_canonical(1.0) == b"1.0" and to_canonical(1) == b"1"
    assert to_canonical(0.1) == repr(0.1).encode()
    assert to_canonical({"!t": 1}) == b'{"!dict":{"!t":1}}'


def test_dataclass_is_tagged() -> None:
    out = json.loads(to_canonical(Budget(max_tokens=5)))
    assert out == {
        "!t": "streams.core.events:Budget",
        "!f": {"deadline_ms": None, "max_tokens": 5, "tokens_used": None, "max_tool_calls": None},
    }


@pytest.mark.parametrize(
    ("value", "path", "why"),
    [
        ({"a": {"fn": lambda: 1}}, "state.a.fn", "code"),
        ({"a": [1, {2, 3}]}, "state.a[1]", "canonical order"),
        ({"a": frozenset()}, "state.a", "canonical order"),
        ({"blob": b"xx"}, "state.blob", "bytes"),
        ({"x": float("nan")}, "state.x", "finite"),
        ({"x": (1, float("inf"))}, "state.x[1]", "finite"),
        ({"k": {1: "a"}}, "state.k[1]", "str keys"),
        ({"o": object()}, "state.o", "unknown object"),
        ({"n": NotFrozen(1)}, "state.n", "not frozen"),
        ({"c": Observation}, "state.c", "class object"),
        ({"weird key": print}, "state['weird key']", "code"),
        ({"s": "\ud800"}, "state.s", "lone surrogate"),
    ],
)
def test_unserializable_names_the_path(value: Any, path: str, why: str) -> None:
    with pytest.raises(UnserializableError) as info:
        to_canonical(value)
    assert info.value.field == path
    assert why in str(info.value)


def test_cycles_are_detected_not_recursed() -> None:
    a: list[Any] = [1]
    a.append(a)
    with pytest.raises(UnserializableError) as info:
        to_canonical({"loop": a})
    assert info.value.field == "state.loop[1]"
    d: dict[str, Any] = {}
    d["self"] = d
    with pytest.raises(UnserializableError, match="cycle"):
        to_canonical(d)
    shared = [1, 2]
    assert to_canonical({"a": shared, "b": shared}) == b'{"a":{"!list":[1,2]},"b":{"!list":[1,2]}}'


def test_subclass_of_json_type_rejected() -> None:
    class MyStr(str):
        pass

    with pytest.raises(UnserializableError, match="subclass"):
        to_canonical({"x": MyStr("a")})


def test_root_is_configurable() -> None:
    with pytest.raises(UnserializableError) as info:
        to_canonical({"x": {1}}, root="PatternRecord")
    assert info.value.field == "PatternRecord.x"


def _state(**kw: Any) -> SessionState:
    cur = CurrentAssessment(
        assessments=(
            Assessment(
                "Resources",
                "You have 8 minutes…",
                (Observation("pace", "d", "e\nf"),),
                ("s1",),
                "caution",
                5,
                ("read_file",),
            ),
        ),
        generated_at_ms=5,
        call_index=3,
        session_id="s1",
        seq=9,
    )
    base: dict[str, Any] = dict(
        session_id="s1",
        last_seq=9,
        budget=Budget(deadline_ms=10, max_tokens=100),
        tokens_used=42,
        analysis={"params": [1, {"k": (2, 3.5)}], "dur": timedelta(seconds=3, microseconds=7)},
        observer_states=(("resource", ObserverState(3, 4, 5, 6)),),
        current=cur,
        history=AssessmentHistory(entries=(cur,)),
    )
    base.update(kw)
    return SessionState(**base)


def test_state_round_trip_exact_and_byte_identical() -> None:
    s = _state()
    inner = _state(snapshots=())
    s = _state(snapshots=(("snap-1", inner),))
    data = encode_state(s)
    back = decode_state(data)
    assert back == s
    assert encode_state(back) == data
    assert isinstance(back.analysis["params"], list)
    assert isinstance(back.analysis["params"][1]["k"], tuple)
    assert back.analysis["dur"] == timedelta(seconds=3, microseconds=7)
    assert json.loads(data)["version"] == STATE_VERSION


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xfe", "not canonical JSON"),
        (b"{not json", "not canonical JSON"),
        (b"[]", "not a session state"),
        (b'{"format":"other","version":1,"state":null}', "not a session state"),
        (
            b'{"format":"trajectory-session-state","version":99,"state":null}',
            "unknown state version 99",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"a":1}}',
            "not a SessionState",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":null,"x":1}',
            "unexpected envelope",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"os:system","!f":{}}}',
            "not a streams.core dataclass",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.nope:X","!f":{}}}',
            "unknown type",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.codec:to_canonical","!f":{}}}',
            "not a frozen dataclass",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.events:Budget","!f":{"bogus":1}}}',
            "cannot rebuild",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!zz":1}}',
            "unknown record marker",
        ),
    ],
)
def test_decode_garbage_fails_clearly(data: bytes, match: str) -> None:
    with pytest.raises(StateDecodeError, match=match):
        decode_state(data)


def test_decode_rejects_non_bytes_and_encode_rejects_non_state() -> None:
    with pytest.raises(StateDecodeError):
        decode_state("text")  # type: ignore[arg-type]
    with pytest.raises(UnserializableError):
        encode_state({"session_id": "x"})


# ------------------------------------------------------------------ hypothesis

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
plain = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(plain)
def test_round_trip_plain_values(value: Any) -> None:
    data = to_canonical(value)
    back = from_canonical(data)
    assert to_canonical(back) == data
    assert _same(back, value)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


severities = st.sampled_from(["info", "caution", "warning"])
assessments = st.builds(
    Assessment,
    observer_name=st.text(max_size=10),
    summary=st.text(max_size=30),
    observations=st.lists(
        st.builds(
            Observation, st.text(max_size=8), st.text(max_size=20), st.none() | st.text(max_size=20)
        ),
        max_size=2,
    ).map(tuple),
    suggestions=st.lists(st.text(max_size=10), max_size=2).map(tuple),
    severity=severities,
    timestamp_ms=st.integers(0, 2**45),
    suggested_tools=st.lists(st.text(max_size=5), max_size=2).map(tuple),
)
currents = st.builds(
    CurrentAssessment,
    assessments=st.lists(assessments, max_size=2).map(tuple),
    generated_at_ms=st.integers(0, 2**45),
    call_index=st.integers(0, 10_000),
    session_id=st.text(max_size=5),
    seq=st.integers(-1, 10_000),
    trigger=st.sampled_from(["event", "timer"]),
    trend=st.sampled_from(["escalating", "steady", "de-escalating"]),
)
states = st.builds(
    SessionState,
    session_id=st.text(min_size=1, max_size=8),
    last_seq=st.integers(-1, 2**40),
    profile=st.text(max_size=5),
    session_start_ms=st.none() | st.integers(0, 2**45),
    last_event_ms=st.none() | st.integers(0, 2**45),
    budget=st.builds(
        Budget,
        st.none() | st.integers(0, 2**45),
        st.none() | st.integers(0, 10**9),
        st.none() | st.integers(0, 10**9),
        st.none() | st.integers(0, 10**6),
    ),
    tokens_used=st.integers(0, 10**12),
    analysis=plain,
    observer_states=st.lists(
        st.tuples(
            st.text(max_size=5),
            st.builds(
                ObserverState,
                st.integers(0, 99),
                st.none() | st.integers(0, 99),
                st.integers(0, 99),
                st.integers(0, 99),
            ),
        ),
        max_size=2,
    ).map(tuple),
    current=st.none() | currents,
    history=st.lists(currents, max_size=3).map(lambda e: AssessmentHistory(entries=tuple(e))),
)


@settings(max_examples=150, deadline=None)
@given(states)
def test_round_trip_session_states(state: SessionState) -> None:
    data = encode_state(state)
    back = decode_state(data)
    assert encode_state(back) == data
    assert _same(back.analysis, state.analysis)
    assert back.current == state.current and back.history == state.history
    assert back.observer_states == state.observer_states and back.budget == state.budget


@settings(max_examples=100, deadline=None)
@given(states)
def test_fast_and_path_tracking_encoders_agree(state: SessionState) -> None:
    """The hot-path encoder/decoder (no path strings) must equal the path-tracking ones."""
    from streams.core import codec

    slow = codec._dumps(codec._to_plain(state, "state", set()), "state", state)
    assert codec.to_canonical(state) == slow
    plain = json.loads(slow)
    assert codec._from_plain(plain, "state") == codec._decode_plain(plain, "state")
