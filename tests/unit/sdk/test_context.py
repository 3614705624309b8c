"""Pure parts of prompt context: murmur2 partitioning and the staleness rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.assessment import Assessment, CurrentAssessment, Observation, build_context
from streams.errors import ConfigError
from streams.sdk.context import murmur2, partition_for_key, render_if_fresh
from streams.serde.avro import AssessmentWire

# Kafka's own murmur2 test vectors (clients/.../UtilsTest.testMurmur2), as signed int32.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}


@pytest.mark.parametrize(("data", "expected"), list(JAVA_VECTORS.items()))
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected & 0xFFFFFFFF


@given(st.binary(max_size=64))
def test_murmur2_matches_aiokafka_the_workers_partitioner(data: bytes) -> None:
    aiokafka_partitioner = pytest.importorskip("aiokafka.partitioner")
    assert murmur2(data) == aiokafka_partitioner.murmur2(data) & 0xFFFFFFFF


@given(st.binary(min_size=1, max_size=64), st.integers(1, 64))
def test_partition_for_key_is_aiokafkas_default_partitioner(key: bytes, n: int) -> None:
    aiokafka_partitioner = pytest.importorskip("aiokafka.partitioner")
    parts = list(range(n))
    assert partition_for_key(key, n) == aiokafka_partitioner.DefaultPartitioner()(key, parts, parts)


def test_partition_for_key_validates() -> None:
    with pytest.raises(ConfigError, match="num_partitions"):
        partition_for_key(b"x", 0)


def current(call_index: int) -> CurrentAssessment:
    a = Assessment(
        "pattern_observer",
        "Repeating the same failing command.",
        observations=(Observation("loop", "bash x3", "pytest -x"),),
        suggestions=("Read the error before retrying",),
        severity="warning",
    )
    return CurrentAssessment(assessments=(a,), call_index=call_index, session_id="s", seq=9)


@pytest.mark.parametrize("now", [None, 0, 5, 25, 26, 27, 100])
@pytest.mark.parametrize("max_age", [0, 20, 21])
def test_render_if_fresh_agrees_with_the_core_build_context(now: int | None, max_age: int) -> None:
    cur = current(5)
    wire = AssessmentWire("s", 9, 1, "event", call_index=5, rendered=cur.render())
    expected = build_context(cur, cur.call_index if now is None else now, max_age_calls=max_age)
    assert render_if_fresh(wire, now, max_age) == expected
    assert render_if_fresh(None, now, max_age) == ""
