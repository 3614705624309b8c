"""The publisher's payload policies (pure): summaries, size caps, metadata checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.errors import InvalidEventError, OversizedMessageError, UnserializableError
from streams.sdk._validate import (
    SUMMARY_MAX_CHARS,
    as_str_metadata,
    cap_payload,
    check_on_oversize,
    summarize_params,
)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("ls -la", "ls -la"),
        ({"command": "pytest -x", "timeout": 5}, "pytest -x"),
        ({"file_path": "/src/a.py", "content": "..."}, "/src/a.py"),
        ({"cmd": ["git", "status"]}, "git status"),
        ({"x": 1, "y": [1, 2]}, '{"x":1,"y":[1,2]}'),
        ({"command": "echo   a\n\tb"}, "echo a b"),
    ],
)
def test_summarize_params(value: Any, expected: str | None) -> None:
    assert summarize_params(value) == expected


def test_summary_is_abbreviated_to_80_chars() -> None:
    out = summarize_params({"command": "x" * 500})
    assert out is not None and len(out) == SUMMARY_MAX_CHARS and out.endswith("…")


def test_small_payload_is_kept_and_validated() -> None:
    value = {"a": [1, "ü"]}
    assert cap_payload(value, "input", 1000, "truncate") == (value, False)
    assert cap_payload(None, "input", 10, "raise") == (None, False)
    with pytest.raises(UnserializableError) as info:
        cap_payload({"a": [1, 2, {3}]}, "input", 1000, "truncate")
    assert info.value.field == "input.a[2]"


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(min_size=1, max_size=3000),
    cap=st.integers(min_value=256, max_value=2000),
)
def test_truncation_summary_is_valid_json_under_the_cap(text: str, cap: int) -> None:
    value = {"stdout": text, "n": list(range(50))}
    out, truncated = cap_payload(value, "output", cap, "truncate")
    if _size(value) <= cap:
        assert (out, truncated) == (value, False)
        return
    assert truncated and isinstance(out, dict)
    assert _size(out) <= cap
    assert out["_truncated"] is True and out["original_bytes"] == _size(value)
    full = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert full.startswith(str(out["preview"]))


def test_oversize_raise_names_the_field_and_tiny_cap_is_an_error() -> None:
    with pytest.raises(OversizedMessageError, match="output: 10003 bytes"):
        cap_payload("x" * 10001, "output", 1000, "raise")
    with pytest.raises(OversizedMessageError, match="too small"):
        cap_payload("x" * 1000, "input", 40, "truncate")
    with pytest.raises(InvalidEventError, match="on_oversize"):
        check_on_oversize("drop")


def test_metadata_must_be_str_to_str() -> None:
    assert as_str_metadata({"a": "b"}) == {"a": "b"}
    assert as_str_metadata(None) == {}
    with pytest.raises(InvalidEventError) as info:
        as_str_metadata({"n": 1})
    assert info.value.field == "metadata['n']"
    with pytest.raises(InvalidEventError):
        as_str_metadata({1: "x"})  # type: ignore[dict-item]
