"""``ms_to_iso`` caches each second's text (speed): it must write what datetime writes."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from streams.core import jsonl
from streams.core.jsonl import iso_to_ms, ms_to_iso


def reference(ms: int) -> str:
    """The formula ``ms_to_iso`` had before the cache."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{ms % 1000:03d}Z"
    )


def test_ms_to_iso_writes_what_datetime_writes() -> None:
    rng = random.Random(7)
    edges = [0, 1, 999, 1000, 1001, -1, -999, -1000, -1001, 1_767_225_600_999, 253402300799999]
    values = edges + [rng.randint(-(10**12), 253402300799999) for _ in range(20_000)]
    # twice: the second pass reads the cached seconds; more seconds than the cache
    # holds, so it is also cleared on the way
    assert len({v // 1000 for v in values}) > jsonl._ISO_SECONDS_MAX
    for _ in range(2):
        for ms in values:
            assert ms_to_iso(ms) == reference(ms), ms
            assert iso_to_ms(ms_to_iso(ms)) == ms
    assert len(jsonl._ISO_SECONDS) <= jsonl._ISO_SECONDS_MAX


def test_ms_to_iso_out_of_range_raises_like_datetime() -> None:
    with pytest.raises(ValueError, match="out of range"):
        ms_to_iso(253402300800000)
