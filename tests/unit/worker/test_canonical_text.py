"""``canonical_text`` calls the C JSON encoder directly (no ``JSONEncoder`` per call).

It must stay ``json.dumps`` with the canonical settings, byte for byte and error for
error: table values, the changelog and the DLQ reasons of unstorable events depend
on it (``storable_json`` turns its ``ValueError`` / ``TypeError`` / ``RecursionError``
into a dead letter).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from json_strategies import json_values

from streams.worker.state import canonical_bytes, canonical_text


def dumps(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def outcome(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return ("ok", fn(value))
    except Exception as exc:  # the comparison is the point: type and message
        return (type(exc).__name__, str(exc))


# NaN and infinities included: both must refuse them alike; lone surrogates too: JSON
# text allows them, UTF-8 does not
json_like = json_values(non_finite=True, tuples=True, key_size=6, max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(json_like)
def test_same_text_and_errors_as_json_dumps(value: Any) -> None:
    assert outcome(canonical_text, value) == outcome(dumps, value)


@pytest.mark.parametrize(
    "value",
    [
        {"x": math.nan},
        [math.inf],
        {"b": -math.inf},
        {1: "int key", "a": 2},  # sort_keys with mixed key types: TypeError
        {"s": {1, 2}},  # not JSON: TypeError naming the type
        b"bytes",
        "plain string at the top",
        {"\ud800": "lone surrogate key"},
        {"é": "\u2028", "a": [1.5, -0.0, 1e300, True, None]},
    ],
)
def test_edge_values_match_json_dumps(value: Any) -> None:
    assert outcome(canonical_text, value) == outcome(dumps, value)


def test_circular_and_deep_values_fail_alike() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert (
        outcome(canonical_text, loop)
        == outcome(dumps, loop)
        == (
            "ValueError",
            "Circular reference detected",
        )
    )
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    assert outcome(canonical_text, deep)[0] == outcome(dumps, deep)[0] == "RecursionError"
    # the same object encodes again after a failure (no circular-check state left over)
    shared = {"k": [1, 2]}
    assert outcome(canonical_text, [shared, {"n": math.nan}])[0] == "ValueError"
    assert canonical_text([shared, shared]) == dumps([shared, shared])


def test_canonical_bytes_is_the_utf8_of_the_text() -> None:
    value = {"z": 1, "a": ["é", 2.5]}
    assert canonical_bytes(value) == dumps(value).encode("utf-8") == b'{"a":["\xc3\xa9",2.5],"z":1}'
