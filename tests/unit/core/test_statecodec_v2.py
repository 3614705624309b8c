"""State format version 2: a repeated record is written once, then ``{"!r": n}``.

Checks the rule (by value, canonical, deterministic), that version 2 holds the
very value version 1 holds, and that malformed references fail naming the path.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import statecodec as codec
from streams.core.config import EngineConfig
from streams.core.engine import SessionEngine, SessionState
from streams.core.errors import StateDecodeError
from streams.core.events import Budget
from streams.core.statecodec import STATE_VERSION, decode_state, encode_state, to_canonical
from streams.sim.events import session_events

KINDS = ["healthy", "looping", "stalled", "budget_burner"]


def _events(kind: str, seed: int, n: int) -> list[Any]:
    return list(itertools.islice(session_events(kind, seed, f"s-{kind}-{seed}"), n))  # type: ignore[arg-type]


def _reference_v2(state: SessionState) -> bytes:
    """Version 2 bytes from the version 1 plain value, written from the rule
    alone: records numbered as their texts close; a record whose version 1
    text (64 to 8192 chars) equals that of one numbered before is a reference."""
    plain = json.loads(encode_state(state, version=1))["state"]
    seen: dict[str, int] = {}
    count = 0

    def walk(node: Any) -> Any:
        nonlocal count
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "!t" in node:
            text = json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            keyed = 64 <= len(text) <= 8192
            if keyed and text in seen:
                return {"!r": seen[text]}
            out = {"!t": node["!t"], "!f": {k: walk(node["!f"][k]) for k in sorted(node["!f"])}}
            if keyed:
                seen[text] = count
            count += 1
            return out
        return {k: walk(node[k]) for k in sorted(node)}

    envelope = {"format": codec.STATE_FORMAT, "state": walk(plain), "version": 2}
    return json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def _check(state: SessionState) -> bytes:
    data = encode_state(state)
    assert data == _reference_v2(state)
    back = decode_state(data)
    assert back == decode_state(encode_state(state, version=1)) == state
    assert encode_state(back) == data
    assert decode_state(encode_state(state, compress=True)) == state
    return data


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(1, 160), min_size=1, max_size=4),
)
def test_v2_round_trip_over_simulated_sessions(kind: str, seed: int, cuts: list[int]) -> None:
    """Through SessionEngine: the v2 bytes follow the rule, decode to the v1
    decode of the same value, re-encode identically, at every cut; and a session
    resumed from them goes on exactly like the one that never stopped."""
    events = _events(kind, seed, max(cuts) + 20)
    engine = SessionEngine.create(events[0].session_id)
    for i, ev in enumerate(events[: max(cuts)], 1):
        engine.on_event(ev)
        if i in cuts:
            data = _check(engine.snapshot())
            resumed = SessionEngine.build(EngineConfig(), decode_state(data))
            assert encode_state(resumed.snapshot()) == data
    resumed = SessionEngine.build(EngineConfig(), decode_state(encode_state(engine.snapshot())))
    for ev in events[max(cuts) :]:
        engine.on_event(ev)
        resumed.on_event(ev)
    assert encode_state(resumed.snapshot()) == encode_state(engine.snapshot())


def _looping_state(n: int = 80) -> SessionState:
    engine = SessionEngine.create("s-looping-7")
    for ev in _events("looping", 7, n):
        engine.on_event(ev)
    return engine.snapshot()


def test_repeated_records_are_written_once_and_shrink_the_state() -> None:
    state = _looping_state()
    v1 = encode_state(state, version=1)
    v2 = _check(state)
    assert json.loads(v2)["version"] == STATE_VERSION == 2
    assert v2.count(b'{"!r":') >= 10
    assert len(v2) < 0.8 * len(v1)
    # no record text of 64+ chars is written twice in full
    plain = json.loads(v2)["state"]
    texts: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                collect(v)
        elif isinstance(node, dict):
            if "!t" in node:
                texts.append(json.dumps(node, sort_keys=True, separators=(",", ":")))
            for v in node.values():
                collect(v)

    collect(plain)
    long_texts = [t for t in texts if len(t) >= 64 and '"!r"' not in t]
    assert len(long_texts) == len(set(long_texts))


def test_same_bytes_whatever_the_object_sharing() -> None:
    """A v1 decode builds one object per place a record is written; a v2 decode
    shares one object between all places of equal records; a hand-made state
    shares the window's record objects with a detector.  The same value gives
    the same bytes in each case, and in any order of encodes (the fragment
    caches hold whatever was met before)."""
    live = _looping_state()
    unshared = decode_state(encode_state(live, version=1))
    shared = decode_state(encode_state(live))
    assert unshared == shared == live
    assert _shares(shared) and not _shares(unshared)
    # a detector history made of the window's own record objects (and the same
    # value from distinct copies)
    copies = decode_state(encode_state(live, version=1))
    window = copies.analysis.window
    assert window
    extra = (("shared_window", window),)
    mixed = [
        dataclasses.replace(
            s, analysis=dataclasses.replace(s.analysis, active=s.analysis.active + extra)
        )
        for s in (copies, unshared)
    ]
    assert mixed[0] == mixed[1] and _shares(mixed[0]) and not _shares(mixed[1])
    for group in ([live, unshared, shared], mixed):
        want = _reference_v2(group[0])
        for order in itertools.permutations(group):
            codec.clear_fragment_cache()
            assert [encode_state(s) for s in order] == [want] * len(group)


def _shares(state: SessionState) -> bool:
    """Does a ToolCallRecord object sit at two places of ``state``?"""
    recs = _records(state)
    return len({id(r) for r in recs}) < len(recs)


def _records(node: Any) -> list[Any]:
    if type(node).__name__ == "ToolCallRecord":
        return [node]
    out: list[Any] = []
    if isinstance(node, tuple):
        for v in node:
            out += _records(v)
    elif hasattr(node, "__dataclass_fields__"):
        for name in node.__dataclass_fields__:
            out += _records(getattr(node, name))
    return out


def test_tiny_records_are_not_referenced() -> None:
    state = _looping_state()
    plain = json.loads(encode_state(state))["state"]
    refs: list[int] = []

    def collect(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                collect(v)
        elif isinstance(node, dict):
            if "!r" in node:
                refs.append(node["!r"])
            for v in node.values():
                collect(v)

    collect(plain)
    assert refs
    numbered = _numbered_texts(plain)
    assert all(len(numbered[n]) >= 64 for n in refs)


def _numbered_texts(plain: Any) -> list[str]:
    """Version 1 text of each record written in full, by number (post-order)."""
    out: list[str] = []

    def expand(node: Any) -> Any:
        if isinstance(node, list):
            return [expand(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "!r" in node:
            return json.loads(out[node["!r"]])
        if "!t" in node:
            full = {"!t": node["!t"], "!f": {k: expand(v) for k, v in node["!f"].items()}}
            out.append(json.dumps(full, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
            return full
        return {k: expand(v) for k, v in node.items()}

    expand(plain)
    return out


BUDGET = to_canonical(Budget(10**6, 10**6, 10**6, 10**6)).decode()  # 64+ chars
OBS_PATH = r"state\.observer_states\[0\]\[1\]"


def _state_json(budget: str, obs: str) -> str:
    """A v2 SessionState (a short looping session) with ``budget`` and the one
    observer state replaced by the given JSON texts."""
    good = json.loads(encode_state(_looping_state(5)))["state"]
    good["!f"]["budget"] = "BUDGET"
    good["!f"]["observer_states"] = [["x", "OBS"]]
    body = json.dumps(good, sort_keys=True, separators=(",", ":"))
    return body.replace('"BUDGET"', budget).replace('"OBS"', obs)


def _with_state(state_json: str, version: int = 2) -> bytes:
    return (
        '{"format":"trajectory-session-state","state":' + state_json + f',"version":{version}}}'
    ).encode()


def _number_of(state_json: str, text: str) -> list[int]:
    return [n for n, t in enumerate(_numbered_texts(json.loads(state_json))) if t == text]


@pytest.mark.parametrize(
    ("ref", "match"),
    [
        ('{"!r":"0"}', "malformed reference"),
        ('{"!r":-1}', "malformed reference"),
        ('{"!r":true}', "malformed reference"),
        ('{"!r":0.0}', "malformed reference"),
        ('{"!r":0,"x":1}', "malformed reference"),
        ('{"!r":999999}', "reference to record 999999 is out of range: the state holds"),
    ],
)
def test_bad_references_name_the_path(ref: str, match: str) -> None:
    data = _with_state(_state_json(BUDGET, ref))
    with pytest.raises(StateDecodeError, match=f"^{OBS_PATH}: {match}"):
        decode_state(data)


def test_good_reference_decodes_and_version_1_rejects_references() -> None:
    body = _state_json(BUDGET, "null")
    [n] = _number_of(body, BUDGET)
    data = _with_state(_state_json(BUDGET, f'{{"!r":{n}}}'))
    state = decode_state(data)
    assert state.budget == state.observer_states[0][1]
    assert state.budget is state.observer_states[0][1]  # shared, like the live engine
    v1 = _with_state(_state_json(BUDGET, f'{{"!r":{n}}}'), version=1)
    with pytest.raises(
        StateDecodeError, match=r"^state\..*: unknown record marker in keys \['!r'\]"
    ):
        decode_state(v1)


def test_forward_reference_names_the_path() -> None:
    """``budget`` comes before ``observer_states`` (keys in text order), so a
    reference from it to the record in ``observer_states`` is a forward one."""
    [later] = _number_of(_state_json("null", BUDGET), BUDGET)
    data = _with_state(_state_json(f'{{"!r":{later}}}', BUDGET))
    with pytest.raises(StateDecodeError, match=r"^state\.budget: forward reference to record"):
        decode_state(data)


def test_reference_to_an_enclosing_record_is_a_forward_reference() -> None:
    body = json.loads(encode_state(_looping_state(5)))["state"]
    last = len(_numbered_texts(body)) - 1  # the SessionState itself, numbered last
    body["!f"]["profile"] = {"!r": last}  # in place of a string: no number moves
    data = _with_state(json.dumps(body, sort_keys=True, separators=(",", ":")))
    with pytest.raises(
        StateDecodeError, match=rf"^state\.profile: forward reference to record {last}"
    ):
        decode_state(data)
