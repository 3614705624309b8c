"""Canonical codec: deterministic bytes, loud failures with field paths, exact round trips."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from codec_reference import reference_canonical, reference_encode_state
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.assessment import Assessment, AssessmentHistory, CurrentAssessment, Observation
from streams.core.engine import SessionState
from streams.core.errors import StateDecodeError, UnserializableError
from streams.core.events import Budget
from streams.core.observers import ObserverState
from streams.core.statecodec import (
    STATE_VERSION,
    decode_state,
    encode_state,
    from_canonical,
    state_type,
    to_canonical,
)


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
        "!t": "events.budget/1",
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


def test_compressed_state_decodes_to_the_same_value_and_is_smaller() -> None:
    s = _state(snapshots=(("snap-1", _state(snapshots=())),))
    plain = encode_state(s)
    packed = encode_state(s, compress=True)
    assert packed[:1] == b"\x00" and plain[:1] == b"{"
    assert len(packed) < len(plain)
    assert decode_state(packed) == s
    assert encode_state(decode_state(packed)) == plain
    assert encode_state(s, compress=True) == packed  # deterministic (same zlib build)


def test_compressed_states_are_zlib_streams_either_way() -> None:
    """The worker compresses with ISA-L (a dependency) and stored states written by
    stdlib zlib (before it, or where no isal wheel exists) still decode: both are
    zlib streams, so no stored state needs a migration."""
    from isal import isal_zlib

    from streams.core import statecodec

    assert statecodec.deflate is isal_zlib.compress  # installed: the fast one is used
    s = _state(snapshots=(("snap-1", _state(snapshots=())),))
    plain = encode_state(s)
    assert zlib.decompress(encode_state(s, compress=True)[1:]) == plain
    assert decode_state(b"\x00" + zlib.compress(plain, 1)) == s  # an older stored state
    assert decode_state(b"\x00" + zlib.compress(plain, 9)) == s


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x00not deflate", "compressed state bytes are corrupt"),
        (b"\x00" + zlib.compress(b"[]"), "not a session state"),
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
            "unknown type tag 'os:system'",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.nope:X","!f":{}}}',
            "unknown type tag",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.statecodec:to_canonical","!f":{}}}',
            "unknown type tag",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"streams.core.events:Budget","!f":{"bogus":1}}}',
            "cannot rebuild",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"events.budget/1","!f":{"bogus":1}}}',
            "cannot rebuild",
        ),
        (
            b'{"format":"trajectory-session-state","version":1,"state":{"!t":"events.budget/9","!f":{}}}',
            "unknown type tag 'events.budget/9'",
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
    from streams.core import statecodec as codec

    slow = codec._dumps(codec._to_plain(state, "state", set()), "state", state)
    assert codec.to_canonical(state) == slow
    plain = json.loads(slow)
    assert codec._from_plain(plain, "state") == codec._decode_plain(plain, "state")


# ------------------------------------------- fast fragment writer and its cache
#
# The reference (the encoder before the fragment writer) is in codec_reference.py,
# shared with tests/bench/bench_codec.py.


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """("ok", bytes) or ("error", (type, str, field)) of ``fn(*args)``."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # the very exception is compared
        return ("error", (type(exc), str(exc), getattr(exc, "field", None)))


def assert_same_as_reference(value: object, root: str = "state") -> None:
    """to_canonical equals the reference, cold and again with the cache warm."""
    want = _outcome(reference_canonical, value, root)
    assert _outcome(to_canonical, value, root) == want
    assert _outcome(to_canonical, value, root) == want  # second time: cached fragments


@pytest.fixture(autouse=True)
def _fresh_fragment_cache() -> Any:
    from streams.core import statecodec as codec

    codec.clear_fragment_cache()
    yield
    codec.clear_fragment_cache()


@state_type("test.leaf/1")
@dataclass(frozen=True)
class Leaf:
    a: Any = None
    b: Any = None


@state_type("test.node/1")
@dataclass(frozen=True, slots=True)
class Node:
    z_last: Any
    left: Any
    right: Any = None


@state_type("test.empty/1")
@dataclass(frozen=True)
class Empty:
    pass


# -------------------------------------------------------- (a) real engine states


def _sim_events(kind: str, seed: int, sid: str, n: int) -> list[Any]:
    """A simulated session's events, with a snapshot control event after 40
    events and a restore of it after 120 (seqs renumbered around them)."""
    from dataclasses import replace

    from streams.core.events import TraceEvent
    from streams.sim.events import session_events

    out: list[TraceEvent] = []
    for ev in session_events(kind, seed, sid, t0_ms=1_700_000_000_000):  # type: ignore[arg-type]
        if len(out) >= n:
            break
        if len(out) in (40, 120):
            ctl = "snapshot" if len(out) == 40 else "restore"
            out.append(
                TraceEvent(
                    type=ctl,
                    session_id=sid,
                    seq=len(out),
                    timestamp_ms=ev.timestamp_ms,
                    metadata={"snapshot_id": "p40"},
                )
            )
        out.append(replace(ev, seq=len(out)))
    return out


@pytest.mark.parametrize("kind", ["healthy", "looping", "stalled", "budget_burner"])
def test_engine_states_byte_identical_to_reference_after_every_event(kind: str) -> None:
    from streams.core import statecodec as codec
    from streams.core.engine import SessionEngine

    encoded = 0
    for seed in range(8) if kind == "healthy" else (7,):  # healthy sessions are short
        eng = SessionEngine.create(f"s-{kind}-{seed}")
        for ev in _sim_events(kind, seed, f"s-{kind}-{seed}", 200):
            eng.on_event(ev)
            state = eng.snapshot()
            data = encode_state(state)
            assert data == reference_encode_state(state), f"seed {seed} after seq {ev.seq}"
            assert to_canonical(state) == reference_canonical(state)
            encoded += 1
    assert encoded >= 100
    # the cache was in use: records from earlier encodes are still held
    held = [e[0] for e in (*codec._frag_new.values(), *codec._frag_old.values())]
    assert sum(type(o).__name__ == "ToolCallRecord" for o in held) >= 20
    # and a state decoded back (all new objects) still gives the same bytes
    assert encode_state(decode_state(data)) == data


def test_interleaved_sessions_share_one_cache() -> None:
    from streams.core.engine import SessionEngine

    engines = {k: SessionEngine.create(f"s-{k}") for k in ("healthy", "looping")}
    streams = {k: _sim_events(k, 3, f"s-{k}", 120) for k in engines}
    for i in range(120):
        for k, eng in engines.items():
            if i < len(streams[k]):
                eng.on_event(streams[k][i])
            state = eng.snapshot()
            assert encode_state(state) == reference_encode_state(state)


# ------------------------------------------------------------ (b) edge cases

EDGE_VALUES: list[Any] = [
    "",
    "plain ascii",
    "é日本語😀",
    'quote " backslash \\ slash /',
    "\b\f\n\r\t",
    "".join(chr(c) for c in range(0x20)) + "\x7f\x80\x9f",
    "\u2028\u2029\ufeff\ufffd\U0010ffff",
    0,
    -1,
    2**63,
    -(2**100),
    10**4000,
    True,
    False,
    None,
    0.1,
    1e300,
    -0.0,
    0.0,
    5e-324,
    1e16,
    1.0,
    -1.5e-7,
    (),
    ((),),
    (1, (2, (3, ("x", None)))),
    [],
    [[]],
    [(1, [2]), {"k": []}],
    {},
    {"a": {}},
    {"b": 1, "a": 2, "A": 3, "é": 4, "\x00": 5, "": 6, "aa": 7, "😀": 8, "\uffff": 9},
    {"!t": 1},
    {"a": {"!x": [1]}},
    {"!": None},
    {"x!": 1, "ok": "!"},
    timedelta(0),
    timedelta(days=-1, seconds=5, microseconds=7),
    timedelta(days=999_999, seconds=86_399, microseconds=999_999),
    Leaf(),
    Leaf("é\n", (1.5, -0.0)),
    Leaf({"k": [1, 2]}, Leaf(timedelta(seconds=3))),
    Node(1, Leaf([Leaf()]), (Leaf({"!d": 1}),)),
    Empty(),
    (Empty(), Empty()),
    Budget(max_tokens=5),
    {"nested": (Leaf(), [Leaf(a={})], {"d": Node("z", "l")})},
]


@pytest.mark.parametrize("value", EDGE_VALUES, ids=lambda v: repr(v)[:40])
def test_edge_values_match_reference(value: Any) -> None:
    assert_same_as_reference(value)
    assert_same_as_reference({"wrapped": value, "twice": value, "in": (value,)})


def test_shared_records_are_written_at_every_place() -> None:
    shared = Leaf({"k": 1})  # holds a dict: text around it is cached, the dict is not
    inner = Leaf(1, "x")  # deeply immutable: cached whole
    value = Node((shared, inner), [shared, inner], {"s": shared, "i": inner})
    assert_same_as_reference(value)
    assert to_canonical(value).count(b'{"!f":{"a":{"k":1},"b":null}') == 3


# Error cases: the fast writer must hand over to the path-tracking walk, which
# gives the same error, with the same field path, as before.
def _cyclic_leaf() -> Leaf:
    leaf = Leaf()
    object.__setattr__(leaf, "a", (1, leaf))
    return leaf


def _cyclic_list_in_record() -> Leaf:
    items: list[Any] = []
    leaf = Leaf(items)
    items.append(leaf)
    return leaf


ERROR_VALUES: list[tuple[Any, str, str]] = [
    ({"x": float("nan")}, "state.x", "finite"),
    ({"x": (1, float("-inf"))}, "state.x[1]", "finite"),
    (Leaf(1, Leaf(b=float("inf"))), "state.b.b", "finite"),
    ({"k": {1: "a"}}, "state.k[1]", "str keys"),
    ({"k": {"b": 1, 2: "a"}}, "state.k[2]", "str keys"),
    (Leaf({None: 1}), "state.a[None]", "str keys"),
    ({"n": NotFrozen(1)}, "state.n", "not frozen"),
    (Leaf(NotFrozen(1)), "state.a", "not frozen"),
    ({"c": Leaf}, "state.c", "class object"),
    ({"s": {1, 2}}, "state.s", "canonical order"),
    ({"b": bytearray(b"x")}, "state.b", "JSON text was expected"),
    ({"f": len}, "state.f", "code"),
    ({"o": object()}, "state.o", "unknown object"),
    (Leaf(a=Leaf(b=(1, object()))), "state.a.b[1]", "unknown object"),
    ({"s": "\ud800"}, "state.s", "lone surrogate"),
    (Leaf(b=("ok", "x\udfffy")), "state.b[1]", "lone surrogate"),
    ({"k": {"\udc80": 1}}, "state.k['\\udc80']", "lone surrogate"),
    (_cyclic_leaf(), "state.a[1]", "cycle"),
    (_cyclic_list_in_record(), "state.a[0]", "cycle"),
]


def _stable_id(value: Any) -> str:
    """A test id without memory addresses: pytest-xdist needs every worker to collect
    the same ids (``<object object at 0x7f...>`` differs from process to process)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))[:30]


@pytest.mark.parametrize(("value", "path", "why"), ERROR_VALUES, ids=_stable_id)
def test_errors_match_reference_with_the_same_path(value: Any, path: str, why: str) -> None:
    for _ in range(2):  # the second time, parts of the value are cached
        with pytest.raises(UnserializableError) as info:
            to_canonical(value)
        assert info.value.field == path
        assert why in str(info.value)
    assert_same_as_reference(value)


def test_subclasses_of_json_types_and_timedelta_take_the_slow_path() -> None:
    class MyInt(int):
        pass

    class MyTd(timedelta):
        pass

    class MyTuple(tuple):  # type: ignore[type-arg]
        pass

    for value in (MyInt(3), MyTd(1), MyTuple((1,))):
        assert_same_as_reference({"v": value})
        assert_same_as_reference(Leaf(value))


def test_int_too_long_for_str_raises_the_same_valueerror() -> None:
    import sys

    huge = 10 ** (sys.get_int_max_str_digits() + 5)
    want = _outcome(reference_canonical, Leaf(huge))
    assert want[0] == "error" and want[1][0] is ValueError
    assert _outcome(to_canonical, Leaf(huge)) == want
    # a finite-number error found first by the old walk still wins
    assert _outcome(to_canonical, Leaf(float("nan"), huge)) == _outcome(
        reference_canonical, Leaf(float("nan"), huge)
    )


def test_deep_nesting_matches_reference() -> None:
    value: Any = "leaf"
    for i in range(200):
        value = Leaf(value, i) if i % 3 else ((value,), [i])
    assert_same_as_reference(value)


def test_a_value_too_deep_to_walk_is_an_error_naming_its_root() -> None:
    """A chain deeper than Python's stack used to end in a bare RecursionError (the
    fast writer gave up, then the path-tracking walk overflowed): now it is an
    UnserializableError naming the root, and a value only one of the walks can
    write is still written (see test_deep_nesting_matches_reference)."""
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(100_000):
        cur["a"] = cur = {}
    with pytest.raises(UnserializableError) as err:
        to_canonical(deep)
    assert err.value.field == "state"
    assert "nested too deep to encode" in str(err.value)
    with pytest.raises(UnserializableError, match="nested too deep"):
        encode_state(_state(analysis=deep))
    # as deep as a state really nests (JSON payloads of 64 levels, ten levels down),
    # and well past it: written
    ok: Any = "leaf"
    for i in range(150):
        ok = Leaf(ok, i) if i % 2 else [ok]
    assert from_canonical(to_canonical(ok)) == ok


any_text = st.text(st.characters(blacklist_categories=()), max_size=8)
any_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),  # nan and infinities included: errors must match too
    any_text,
    st.builds(timedelta, st.integers(-5, 5), st.integers(0, 86_399), st.integers(0, 999_999)),
)
any_value = st.recursive(
    any_scalar,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(any_text, children, max_size=4),
        st.builds(Leaf, children, children),
        st.builds(Node, children, children, children),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(any_value)
def test_random_values_match_reference(value: Any) -> None:
    assert_same_as_reference(value)


# ------------------------------------------------------------ (c) the cache


def test_equal_but_distinct_objects_give_the_same_bytes_and_own_entries() -> None:
    from streams.core import statecodec as codec

    one, two = Leaf("x", (1, 2.5)), Leaf("x", (1, 2.5))
    assert one == two and one is not two
    assert to_canonical(one) == to_canonical(two) == reference_canonical(one)
    assert codec._frag_new[id(one)][0] is one
    assert codec._frag_new[id(two)][0] is two


def test_a_live_cached_object_is_served_from_the_cache() -> None:
    from streams.core import statecodec as codec

    leaf = Leaf("x", 1)
    outer = {"leaf": leaf}
    before = to_canonical(outer)
    assert codec._frag_new[id(leaf)] == (leaf, '{"!f":{"a":"x","b":1},"!t":"test.leaf/1"}')
    # plant a marker in the entry: the next encode must use it verbatim
    codec._frag_new[id(leaf)] = (leaf, '"FROM-CACHE"')
    assert to_canonical(outer) == b'{"leaf":"FROM-CACHE"}'
    # an equal but different object is not served another object's entry
    assert to_canonical({"leaf": Leaf("x", 1)}) == before


def test_an_entry_for_another_object_under_the_same_id_is_ignored() -> None:
    from streams.core import statecodec as codec

    leaf, other = Leaf("x", 1), Leaf("y", 2)
    codec._frag_new[id(leaf)] = (other, '"WRONG-NEW"')
    codec._frag_old[id(leaf)] = (other, '"WRONG-OLD"')
    assert to_canonical(leaf) == reference_canonical(leaf)
    assert codec._frag_new[id(leaf)][0] is leaf


def test_records_holding_dicts_or_lists_are_rewritten_after_in_place_changes() -> None:
    params: dict[str, Any] = {"cmd": "ls"}
    log: list[Any] = [1]
    rec = Leaf(params, (Leaf("imm"), log))
    plain_rec = Leaf(params)  # holds no other record: cached at once
    value = Node(rec, (rec, rec, plain_rec), {"again": rec, "p": plain_rec})
    seen = set()
    for i in range(4):  # cold, then cached (composites from the second time on)
        params["cmd"] = f"command-{i}"
        if i:
            params[f"new{i}"] = [2.5, {"i": i}]
            log.append({"k": f"v{i}"})
        data = to_canonical(value)
        assert data == reference_canonical(value)
        assert data.count(f'"cmd":"command-{i}"'.encode()) == 6
        assert data.count(f'"k":"v{i}"'.encode()) == (4 if i else 0)
        seen.add(data)
    assert len(seen) == 4


def test_deeply_immutable_records_are_cached_whole_others_around_their_dicts() -> None:
    from streams.core import statecodec as codec

    imm = Leaf(1, (Leaf("a"), timedelta(seconds=1)))
    mut = Leaf(imm, {"k": 1})
    to_canonical(mut)
    to_canonical(mut)  # composites are cached when met a second time
    assert isinstance(codec._frag_new[id(imm)][1], str)
    _head, rest = codec._frag_new[id(mut)][1]
    assert [name for name, _ in rest] == ["b"]
    assert codec._frag_new[id(imm.b[0])] == (
        imm.b[0],
        '{"!f":{"a":"a","b":null},"!t":"test.leaf/1"}',
    )
    # the inner tuple is not cached on its own (tuples are usually rebuilt)
    assert id(imm.b) not in codec._frag_new


def test_generation_eviction_and_promotion(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.core import statecodec as codec

    monkeypatch.setattr(codec, "_FRAGMENT_CACHE_LIMIT", 3)
    leaves = [Leaf(i) for i in range(8)]

    def where(leaf: Leaf) -> str:
        if id(leaf) in codec._frag_new and codec._frag_new[id(leaf)][0] is leaf:
            return "new"
        if id(leaf) in codec._frag_old and codec._frag_old[id(leaf)][0] is leaf:
            return "old"
        return "-"

    for leaf in leaves[:3]:
        to_canonical(leaf)
    assert [where(x) for x in leaves[:3]] == ["new"] * 3 and not codec._frag_old
    to_canonical(leaves[3])  # the 4th entry exceeds the limit: new becomes old
    assert [where(x) for x in leaves[:4]] == ["old"] * 4 and not codec._frag_new
    assert to_canonical(leaves[1]) == reference_canonical(leaves[1])  # a hit in old...
    assert where(leaves[1]) == "new"  # ...is promoted
    for leaf in leaves[4:7]:  # 4 entries in new again: rotate, dropping the old old
        to_canonical(leaf)
    assert [where(x) for x in leaves] == ["-", "old", "-", "-", "old", "old", "old", "-"]
    assert len(codec._frag_old) == 4 and not codec._frag_new
    for leaf in leaves:  # evicted ones are simply written again
        assert to_canonical(leaf) == reference_canonical(leaf)
    codec.clear_fragment_cache()
    assert not codec._frag_new and not codec._frag_old


def test_long_fragments_are_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.core import statecodec as codec

    monkeypatch.setattr(codec, "_FRAGMENT_MAX_CHARS", 60)
    small, big = Leaf(1), Leaf("x" * 20)  # 47 and 68 chars
    outer = Leaf(small, big)
    for _ in range(3):
        assert to_canonical(outer) == reference_canonical(outer)
    assert id(small) in codec._frag_new
    assert id(big) not in codec._frag_new and id(outer) not in codec._frag_new


def test_a_cycle_made_after_caching_is_still_detected() -> None:
    from streams.core import statecodec as codec

    items: list[Any] = []
    leaf = Leaf(items, 1)
    assert to_canonical(leaf) == reference_canonical(leaf)  # cached around the list
    items.append(Node(1, leaf))
    with pytest.raises(codec._Slow):  # detected by the fast writer itself
        codec._frag(leaf, codec._Walk())
    with pytest.raises(UnserializableError, match="cycle") as info:
        to_canonical(leaf)
    assert info.value.field == "state.a[0].left"


def test_records_holding_records_are_cached_when_met_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A composite with a dict or list below (the spine of a state: its window
    holds ``params`` dicts) waits for a second sight before it is cached."""
    from streams.core import statecodec as codec

    inner = Leaf("in")
    outer = Node(1, inner, [Leaf(2)])
    assert to_canonical(outer) == reference_canonical(outer)
    assert id(inner) in codec._frag_new  # holds no record: cached at once
    assert id(outer) not in codec._frag_new and codec._probation[id(outer)] is outer
    # an equal but different composite is not let in by the first one's visit
    twin = Node(1, inner, [Leaf(2)])
    assert to_canonical(twin) == reference_canonical(outer)
    assert id(twin) not in codec._frag_new and id(twin) in codec._probation
    assert to_canonical(outer) == reference_canonical(outer)  # met again: cached
    assert codec._frag_new[id(outer)][0] is outer
    assert id(outer) not in codec._probation
    outer.right.append(Leaf(3))  # its list is written afresh: the change shows
    assert to_canonical(outer) == reference_canonical(outer)
    # a waiting entry for another object under the same id lets nothing in
    other = Node(2, inner, [])
    codec._probation[id(other)] = outer
    assert to_canonical(other) == reference_canonical(other)
    assert id(other) not in codec._frag_new and codec._probation[id(other)] is other
    # the waiting room is bounded
    monkeypatch.setattr(codec, "_PROBATION_LIMIT", 3)
    codec.clear_fragment_cache()
    nodes = [Node(i, Leaf(i), [i]) for i in range(4)]
    for node in nodes[:3]:
        to_canonical(node)
    assert [codec._probation.get(id(x)) is x for x in nodes] == [True, True, True, False]
    to_canonical(nodes[3])  # a fourth one overflows it: emptied
    assert not codec._probation
    for node in nodes:  # so none of them is cached yet, and it overflows again
        assert to_canonical(node) == reference_canonical(node)
    assert not codec._probation
    assert all(id(x) not in codec._frag_new for x in nodes)
    for node in nodes[:3]:  # met twice between overflows: cached
        to_canonical(node)
        to_canonical(node)
    assert all(codec._frag_new[id(x)][0] is x for x in nodes[:3])


def test_deeply_immutable_composites_are_cached_at_once_within_a_char_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A detector's snapshot (records of records, no dict or list) is handed out
    again by the builder until the detector runs: its first re-encode hits."""
    from streams.core import statecodec as codec

    codec.clear_fragment_cache()
    outer = Node(1, Leaf("in"), (Leaf(2), Leaf(3)))
    text = to_canonical(outer).decode()
    assert text == reference_canonical(outer).decode()
    assert codec._frag_new[id(outer)] == (outer, text) and id(outer) not in codec._probation
    assert codec._composite_chars == len(text)
    # an equal but different composite gets its own entry, the first one's is kept
    twin = Node(1, Leaf("in"), (Leaf(2), Leaf(3)))
    assert to_canonical(twin).decode() == text
    assert codec._frag_new[id(twin)][0] is twin and codec._frag_new[id(outer)][0] is outer
    # too long: not cached at once (nor later), waits like the spine
    long_one = Node(2, Leaf("x" * codec._FRAGMENT_MAX_CHARS), (Leaf(1),))
    assert to_canonical(long_one) == reference_canonical(long_one)
    assert id(long_one) not in codec._frag_new and codec._probation[id(long_one)] is long_one
    # the characters of composite text bound a generation
    nodes = [Node(i, Leaf("in"), (Leaf(2), Leaf(3))) for i in range(10, 13)]
    monkeypatch.setattr(codec, "_COMPOSITE_CHARS", 2 * len(to_canonical(nodes[0])))
    codec.clear_fragment_cache()
    to_canonical(nodes[0])
    to_canonical(nodes[1])
    assert all(codec._frag_new[id(x)][0] is x for x in nodes[:2])
    to_canonical(nodes[2])  # over the budget: the generation becomes the old one
    assert not codec._frag_new and codec._composite_chars == 0
    assert all(codec._frag_old[id(x)][0] is x for x in nodes)
    for node in nodes:  # still hits (moved back to the new generation), same text
        assert to_canonical(node) == reference_canonical(node)
        assert codec._frag_new[id(node)][0] is node


# ------------------------------------------------------- (d) stable state type tags


def test_unregistered_dataclass_is_refused_naming_the_path() -> None:
    @dataclass(frozen=True)
    class Unregistered:
        x: int = 1

    with pytest.raises(UnserializableError) as info:
        to_canonical({"a": (1, Unregistered())})
    assert info.value.field == "state.a[1]"
    assert "no registered state type" in str(info.value) and "@state_type" in str(info.value)


def test_registration_rules() -> None:
    from streams.core.statecodec import register_state_type, state_tag

    @dataclass(frozen=True)
    class V1:
        x: int = 0

    @dataclass(frozen=True)
    class Other:
        x: int = 0

    register_state_type(V1, "test.versioned/2", aliases=("test.versioned/1",))
    register_state_type(V1, "test.versioned/2")  # again, same tag: a no-op
    assert state_tag(V1) == "test.versioned/2" and state_tag(Other) is None
    assert json.loads(to_canonical(V1(3)))["!t"] == "test.versioned/2"
    assert from_canonical(b'{"!t":"test.versioned/1","!f":{"x":4}}') == V1(4)  # the alias
    with pytest.raises(ValueError, match="taken by"):
        register_state_type(Other, "test.versioned/1")
    with pytest.raises(ValueError, match=r"already registered as 'test\.versioned/2'"):
        register_state_type(V1, "test.versioned/3")
    for bad in ("Test.x/1", "x", "x/0", "x/01", "x.y:Z/1", "streams.core.events:Budget"):
        with pytest.raises(ValueError, match="not a state type tag"):
            register_state_type(Other, bad)
    with pytest.raises(TypeError, match="not a frozen dataclass"):
        register_state_type(NotFrozen, "test.not_frozen/1")
    assert state_tag(Other) is None  # refused registrations left nothing behind


def test_every_legacy_tag_maps_to_a_registered_type_of_that_name() -> None:
    from streams.core.statecodec import LEGACY_TAGS, state_types

    types = state_types()
    for old, new in LEGACY_TAGS.items():
        assert new in types, old
        assert types[new].__qualname__ == old.partition(":")[2]


def test_builtin_state_types_carry_no_module_paths() -> None:
    from streams.core.statecodec import LEGACY_TAGS, state_types

    builtin = {t: c for t, c in state_types().items() if c.__module__.startswith("streams.")}
    assert len(builtin) >= len(LEGACY_TAGS) == 36
    for tag in builtin:
        assert ":" not in tag and not tag.startswith("streams")


def test_dict_texts_are_cached_by_content_never_served_stale() -> None:
    """A record's dict is written from the dict-text cache only while its content,
    types included, is what the text was made from (statecodec "Dicts")."""
    import enum

    from streams.core import statecodec as codec

    params = {"command": "ls -la", "n": 1, "opts": ["-a", ("x", None)], "deep": {"k": 2.5}}
    rec = Leaf("bash", params)
    first = to_canonical(rec)
    assert first == reference_canonical(rec)
    assert any(t.startswith('{"command":"ls -la"') for t in codec._dict_new.values())
    # the same content in another dict (a looping agent's next call) is a hit...
    again = Leaf("bash", dict(reversed(list(params.items()))))
    assert to_canonical(again) == reference_canonical(again)
    # ...and a dict changed in place is written afresh, at every level
    for change in (
        lambda: params.__setitem__("n", 1.0),  # 1 == 1.0, but another text
        lambda: params.__setitem__("n", True),  # 1 == True, likewise
        lambda: params["deep"].__setitem__("k", -0.0),
        lambda: params["opts"].append("-l"),
        lambda: params.__setitem__("opts", ("-a", ("x", None))),  # a tuple, not a list
        lambda: params.pop("deep"),
    ):
        change()
        assert to_canonical(rec) == reference_canonical(rec)

    # values marshal refuses (subclasses, enums) are written as before, uncached
    class Tag(str):
        pass

    class Level(enum.IntEnum):
        HIGH = 3

    for odd in ({"t": Tag("x")}, {Tag("k"): 1}, {"lvl": Level.HIGH}):
        assert_same_as_reference(Leaf("x", odd))
    # what the walk refuses is never stored: a '!' key, NaN, a cycle
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    for bad in ({"!list": 1}, {"x": math.nan}, loop):
        n = len(codec._dict_new)
        assert_same_as_reference(Leaf("x", bad))
        assert len(codec._dict_new) == n
    codec.clear_fragment_cache()
    assert not codec._dict_new and not codec._dict_old


def test_dict_text_cache_keeps_two_generations(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.core import statecodec as codec

    monkeypatch.setattr(codec, "_DICT_CACHE_LIMIT", 2)
    dicts = [{"i": i} for i in range(5)]
    for d in dicts[:3]:  # the third entry exceeds the limit: new becomes old
        to_canonical(Leaf(None, d))
    assert len(codec._dict_old) == 3 and not codec._dict_new
    key = codec._content_key(dicts[0], b"D")
    assert to_canonical(Leaf(None, {"i": 0})) == reference_canonical(Leaf(None, dicts[0]))
    assert key in codec._dict_new and key not in codec._dict_old  # promoted
    for d in dicts:
        assert to_canonical(Leaf(None, d)) == reference_canonical(Leaf(None, d))
    # a generation also ends at its character budget (long texts, few entries)
    codec.clear_fragment_cache()
    monkeypatch.setattr(codec, "_DICT_CACHE_LIMIT", 1000)
    monkeypatch.setattr(codec, "_DICT_CACHE_CHARS", 5000)  # ~2,000 an entry
    for i in range(3):
        to_canonical(Leaf(None, {"text": str(i) * 1000}))
    assert len(codec._dict_old) == 3 and not codec._dict_new
    # lists are cached too, apart from dicts
    to_canonical(Leaf(None, ["a", 1]))
    assert '{"!list":["a",1]}' in codec._dict_new.values()


def test_only_the_outermost_dict_or_list_is_marshalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A nested value is covered by its outermost container's key; marshalling each
    level again made a deep value cost depth x size.  A record inside a container
    starts again: its own dicts are looked up."""
    from streams.core import statecodec as codec

    seen: list[object] = []
    real = codec._marshal_dumps

    def counting(value: object, version: int) -> bytes:
        seen.append(value)
        return real(value, version)

    monkeypatch.setattr(codec, "_marshal_dumps", counting)
    deep: dict[str, Any] = {"leaf": "x"}
    for i in range(30):
        deep = {"k": deep, "n": [i, {"i": i}]}
    rec = Leaf("x", deep)
    assert to_canonical(rec) == reference_canonical(rec)
    assert seen == [deep]
    seen.clear()
    inner = {"command": "ls"}
    holder = Leaf("y", [Leaf("z", inner)])  # marshal refuses the list (a record in it)
    assert to_canonical(holder) == reference_canonical(holder)
    assert seen == [holder.b, inner]


# ------------------------------------------------------------ (d) the memo per session


def test_a_memo_gives_the_same_bytes_for_interleaved_long_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one memo per session the bytes are the reference's after every event,
    while the shared cache is too small to keep anything (the worker's case: many
    sessions flushed in turn), and the memo does serve records it kept."""
    from streams.core import statecodec as codec
    from streams.core.engine import SessionEngine

    monkeypatch.setattr(codec, "_FRAGMENT_CACHE_LIMIT", 2)
    monkeypatch.setattr(codec, "_COMPOSITE_CHARS", 10)
    kinds = ("looping", "stalled", "budget_burner")
    engines = {k: SessionEngine.create(f"s-{k}") for k in kinds}
    streams = {k: _sim_events(k, 5, f"s-{k}", 160) for k in kinds}
    memos = {k: codec.EncodeMemo() for k in kinds}
    served = 0
    real_hit = codec.EncodeMemo._hit

    def counting_hit(self: Any, ident: int, value: object) -> Any:
        nonlocal served
        entry = real_hit(self, ident, value)
        served += entry is not None
        return entry

    monkeypatch.setattr(codec.EncodeMemo, "_hit", counting_hit)
    for i in range(160):
        for k, eng in engines.items():
            if i < len(streams[k]):
                eng.on_event(streams[k][i])
            if i % 3:
                continue
            state = eng.snapshot()
            data = encode_state(state, memo=memos[k])
            assert data == reference_encode_state(state), f"{k} after event {i}"
            assert zlib.decompress(encode_state(state, compress=True, memo=memos[k])[1:]) == data
    assert served > 1000
    # the memos, not the shared cache, held the records
    assert len(codec._frag_new) + len(codec._frag_old) <= 3
    assert all(len(m) > 20 for m in memos.values())


def test_a_memo_keeps_exactly_the_records_of_its_last_encode() -> None:
    from streams.core import statecodec as codec

    memo = codec.EncodeMemo()
    leaf, other = Leaf("x", 1), Leaf("y", 2)
    inner = Leaf(leaf, (other,))  # deeply immutable composite: cached whole at once
    first = Node(1, inner)
    assert to_canonical(first, memo=memo) == reference_canonical(first)
    held = {id(e[0]) for e in memo._last.values()}
    assert {id(leaf), id(other), id(inner)} <= held
    # served whole: the records below it are not read, so no longer kept
    second = Node(2, inner)
    assert to_canonical(second, memo=memo) == reference_canonical(second)
    held = {id(e[0]) for e in memo._last.values()}
    assert id(inner) in held and id(leaf) not in held and id(other) not in held
    assert id(first) not in held  # the last encode's objects only
    # a planted text is served verbatim: the memo is what the encode reads
    memo._last[id(inner)] = (inner, '"FROM-MEMO"')
    assert (
        to_canonical(Node(3, inner), memo=memo)
        == b'{"!f":{"left":"FROM-MEMO","right":null,"z_last":3},"!t":"test.node/1"}'
    )
    # an entry for another object under the same id is ignored
    memo._last[id(leaf)] = (other, '"WRONG"')
    assert to_canonical(leaf, memo=memo) == reference_canonical(leaf)
    # nothing of it went to the shared cache
    assert not codec._frag_new and not codec._frag_old and not codec._probation


def test_a_memo_waits_for_a_second_sight_and_rewrites_changed_dicts() -> None:
    from streams.core import statecodec as codec

    memo = codec.EncodeMemo()
    params: dict[str, Any] = {"cmd": "ls"}
    rec = Leaf(params)
    outer = Node(1, rec, [Leaf(2)])  # a composite with a list below
    assert to_canonical(outer, memo=memo) == reference_canonical(outer)
    assert memo._last[id(outer)] == (outer, None)  # seen once
    assert to_canonical(outer, memo=memo) == reference_canonical(outer)
    assert type(memo._last[id(outer)][1]) is tuple  # cached around its fields
    params["cmd"] = "rm"
    outer.right.append(Leaf(3))
    for _ in range(2):
        data = to_canonical(outer, memo=memo)
        assert data == reference_canonical(outer) and b'"rm"' in data


def test_a_failed_encode_keeps_the_memo_of_the_last_good_one() -> None:
    from streams.core import statecodec as codec

    memo = codec.EncodeMemo()
    good = Node(1, Leaf("x"), (Leaf("y"),))
    to_canonical(good, memo=memo)
    before = dict(memo._last)
    with pytest.raises(UnserializableError) as info:
        to_canonical(Node(2, Leaf("x"), {"bad": {1, 2}}), memo=memo)
    assert info.value.field == "state.right.bad"
    assert memo._last == before and not memo._now
    assert to_canonical(good, memo=memo) == reference_canonical(good)


def _records_in(value: Any, out: list[Any], seen: set[int]) -> list[Any]:
    """Every dataclass instance reachable from ``value`` (each once)."""
    if id(value) in seen:
        return out
    seen.add(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out.append(value)
        for f in dataclasses.fields(value):
            _records_in(getattr(value, f.name), out, seen)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _records_in(v, out, seen)
    elif isinstance(value, dict):
        for v in value.values():
            _records_in(v, out, seen)
    return out


def _field_loop(record: Any, keys: Any, cx: Any) -> tuple[list[str], list[int]]:
    """The loop over a record's fields that ``_frag_record`` ran before its fields
    had a generated writer (``statecodec._field_writer``)."""
    from streams.core import statecodec as codec

    parts: list[str] = []
    fresh: list[int] = []
    for name, key in keys:
        before = cx.mutable
        parts.append(key)
        parts.append(codec._frag(getattr(record, name), cx))
        if cx.mutable != before:
            fresh.append(len(parts) - 1)
    return parts, fresh


def _engine_states() -> list[SessionState]:
    """States of real engines: simulated sessions of every kind, 40 events each."""
    from streams.core.engine import SessionEngine
    from streams.sim.events import fleet_events

    engines: dict[str, SessionEngine] = {}
    for event in fleet_events(600, 12, seed=3):
        engine = engines.get(event.session_id)
        if engine is None:
            engine = engines[event.session_id] = SessionEngine.create(event.session_id)
        engine.on_event(event)
    return [engine.snapshot() for engine in engines.values()]


def test_the_generated_field_writer_gives_what_the_field_loop_gave_on_engine_states() -> None:
    for state in _engine_states():
        _check_field_writers(state)


@settings(max_examples=60, deadline=None)
@given(states)
def test_the_generated_field_writer_gives_what_the_field_loop_gave(state: SessionState) -> None:
    _check_field_writers(state)


def _check_field_writers(state: SessionState) -> None:
    """``_field_writer``'s code per class against the loop it replaced: the same
    texts, the same fields marked as holding a dict or list, the same walk counters."""
    from streams.core import statecodec as codec

    for record in _records_in(state, [], set()):
        layout = codec._frag_class(type(record))
        assert layout is not None, type(record)
        keys, _closing, writer = layout
        fast_cx, loop_cx = codec._Walk(), codec._Walk()

        codec.clear_fragment_cache()  # both walks start from nothing cached
        fast = _outcome(writer, record, fast_cx)
        codec.clear_fragment_cache()
        # a value, or the same exception
        assert fast == _outcome(_field_loop, record, keys, loop_cx), type(record)
        assert (fast_cx.mutable, fast_cx.records) == (loop_cx.mutable, loop_cx.records)
