"""compiled_encoder: the same text and the same errors as the encoder it compiles."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from json_strategies import json_values

from streams.core.jsontext import compiled_encoder

SETTINGS: list[dict[str, Any]] = [
    {"sort_keys": True, "default": str},
    {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False, "allow_nan": False},
    {},
    {"check_circular": False, "skipkeys": True},
]

any_json_values = json_values(non_finite=True, key_size=5, max_leaves=20)


def _outcome(fn: Any, value: object) -> tuple[str, str]:
    try:
        return ("ok", fn(value))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(sorted(s)) or "defaults")
@given(value=any_json_values)
def test_same_text_or_error_as_json_dumps(settings: dict[str, Any], value: object) -> None:
    fast = compiled_encoder(json.JSONEncoder(**settings))
    assert _outcome(fast, value) == _outcome(lambda v: json.dumps(v, **settings), value)


@pytest.mark.parametrize(
    "settings", SETTINGS[:3], ids=["sorted-default-str", "canonical", "defaults"]
)
@pytest.mark.parametrize(
    "value",
    [
        {"b": object, "a": (1, "é")},  # default= or TypeError
        [math.nan],  # ValueError without allow_nan
        {1: "int key", "1": "str key"},
        "\ud800",  # a lone surrogate is text, not an error, at this stage
        "plain",
    ],
    ids=["object", "nan", "int-key", "surrogate", "str"],
)
def test_edge_values(settings: dict[str, Any], value: object) -> None:
    fast = compiled_encoder(json.JSONEncoder(**settings))
    assert _outcome(fast, value) == _outcome(lambda v: json.dumps(v, **settings), value)


def test_a_circular_value_raises_as_json_dumps_does_and_the_next_call_still_works() -> None:
    fast = compiled_encoder(json.JSONEncoder(sort_keys=True))
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        fast(loop)
    assert fast([1, [2]]) == "[1, [2]]"  # a fresh circular-reference table per call


def test_an_indenting_or_overriding_encoder_is_refused_at_set_up() -> None:
    with pytest.raises(ValueError, match="indent"):
        compiled_encoder(json.JSONEncoder(indent=2))

    class Custom(json.JSONEncoder):
        def encode(self, o: Any) -> str:
            return "custom"

    with pytest.raises(ValueError, match="Custom overrides"):
        compiled_encoder(Custom())
