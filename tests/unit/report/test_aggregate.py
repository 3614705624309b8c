"""Report aggregation against hand-computed expectations (see aggregate's docstring)."""

from __future__ import annotations

import json

import pytest

from streams.core.events import Budget, TraceEvent
from streams.core.similarity import normalize_error
from streams.report.aggregate import TIME_BUCKETS, aggregate, p95

M1 = "File /x/y/foo.py line 12: boom"
M2 = "File /z/foo.py line 99: boom"
M3 = "File /q/foo.py line 3: boom"


def ev(type_: str, sid: str, seq: int, t: int, **kw: object) -> TraceEvent:
    return TraceEvent(type_, sid, seq, t, **kw)  # type: ignore[arg-type]


def events() -> list[TraceEvent]:
    a = [
        ev("tool_call", "a", 0, 1000, tool_name="bash", call_id="c1"),
        ev("tool_result", "a", 1, 1500, call_id="c1"),
        ev("tool_call", "a", 2, 2000, tool_name="bash", call_id="c2"),
        ev(
            "tool_result",
            "a",
            3,
            2300,
            call_id="c2",
            is_error=True,
            error_message=M1,
            latency_ms=250,
        ),
        ev("tool_call", "a", 4, 3000, tool_name="read", call_id="c3"),
        ev("tool_result", "a", 5, 3100),  # no call_id: completes the open call c3
        ev("model_step", "a", 6, 4000, input_tokens=100, output_tokens=20),
        ev("tool_call", "a", 7, 5000, tool_name="bash", call_id="c4"),  # never answered
        ev("error", "a", 8, 6000, error_message=M2),  # agent-level
    ]
    b = [
        ev("tool_call", "b", 0, 1200, tool_name="bash", call_id="d1"),
        ev("error", "b", 1, 1400, call_id="d1", error_message=M3),
        ev("tool_call", "b", 2, 1600, tool_name="read", call_id="d2"),
        ev("tool_result", "b", 3, 2600, call_id="d2", latency_ms=900),
        ev("budget", "b", 4, 2700, budget=Budget(tokens_used=500, max_tokens=1000)),
    ]
    # interleaved, as on the events topic
    return [a[0], b[0], b[1], a[1], b[2], a[2], a[3], b[3], b[4], *a[4:]]


DETECTIONS = [
    {
        "session_id": "a",
        "timestamp_ms": 2300,
        "call_index": 2,
        "kind": "pattern",
        "pattern_type": "repeated_error",
        "severity": "caution",
        "confidence": 0.6,
    },
    {"session_id": "a", "timestamp_ms": 2300, "kind": "assessment", "severity": "info"},
    {"session_id": "a", "timestamp_ms": 2300, "kind": "assessment", "severity": "caution"},
    {"session_id": "a", "timestamp_ms": 6000, "kind": "assessment", "severity": "warning"},
]


@pytest.fixture(scope="module")
def data() -> dict:
    return aggregate(events(), DETECTIONS)


def test_summary(data: dict) -> None:
    assert data["summary"] == {
        "sessions": 2,
        "events": 14,
        "tool_calls": 6,
        "failed_tool_calls": 2,
        "pattern_detections": 1,
        "start_ms": 1000,
        "end_ms": 6000,
    }


def test_tool_frequency(data: dict) -> None:
    assert data["tool_frequency"] == [
        {"tool": "bash", "calls": 4, "errors": 2, "error_rate": 0.5},
        {"tool": "read", "calls": 2, "errors": 0, "error_rate": 0.0},
    ]


def test_error_signatures_group_normalized_messages(data: dict) -> None:
    sig = normalize_error(M1)
    assert sig == normalize_error(M2) == normalize_error(M3)  # precondition of this case
    assert data["error_signatures"] == [
        {"signature": sig, "count": 3, "tools": ["(agent)", "bash"], "example": M1}
    ]


def test_latency(data: dict) -> None:
    bash, read = data["latency"]
    assert bash["tool"] == "bash" and bash["count"] == 3  # c1 500 (times), c2 250, d1 200
    assert bash["mean_ms"] == pytest.approx((500 + 250 + 200) / 3)
    assert (bash["min_ms"], bash["max_ms"], bash["p95_ms"]) == (200, 500, 500)
    assert read == {
        "tool": "read",
        "count": 2,
        "mean_ms": 500.0,
        "min_ms": 100,
        "max_ms": 900,
        "p95_ms": 900,
    }


def test_ngrams(data: dict) -> None:
    grams = data["ngrams"]
    assert grams["2"] == [
        {"sequence": ["bash", "read"], "count": 2},
        {"sequence": ["bash", "bash"], "count": 1},
        {"sequence": ["read", "bash"], "count": 1},
    ]
    assert grams["3"] == [
        {"sequence": ["bash", "bash", "read"], "count": 1},
        {"sequence": ["bash", "read", "bash"], "count": 1},
    ]
    assert grams["4"] == [{"sequence": ["bash", "bash", "read", "bash"], "count": 1}]


def test_sessions_timeline_and_severity(data: dict) -> None:
    a, b = data["sessions"]
    assert [c["success"] for c in a["tool_calls"]] == [True, False, True, True]
    assert [c["latency_ms"] for c in a["tool_calls"]] == [500, 250, 100, None]
    assert a["severity_over_time"] == [
        {"timestamp_ms": 2300, "severity": "caution"},
        {"timestamp_ms": 6000, "severity": "warning"},
    ]
    assert a["max_severity"] == "warning" and b["max_severity"] == "none"
    assert [d["pattern_type"] for d in a["detections"]] == ["repeated_error"]
    assert b["detections"] == []


def test_budget_burn(data: dict) -> None:
    a, b = data["sessions"]
    assert a["budget_burn"] == [[4000, 120]] and a["tokens"] == 120
    assert b["budget_burn"] == [[2700, 500]] and b["max_tokens"] == 1000


def test_patterns_over_time(data: dict) -> None:
    pot = data["patterns_over_time"]
    width = -(-5000 // TIME_BUCKETS)
    assert pot["bucket_ms"] == width
    counts = [bk["counts"]["repeated_error"] for bk in pot["buckets"]]
    assert sum(counts) == 1 and counts[(2300 - 1000) // width] == 1


def test_is_json_and_deterministic(data: dict) -> None:
    again = aggregate(events(), DETECTIONS)
    assert json.dumps(data, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_empty_input() -> None:
    d = aggregate([], [])
    assert d["summary"]["sessions"] == 0 and d["sessions"] == [] and d["latency"] == []


@pytest.mark.parametrize(
    ("values", "expected"),
    [([7], 7), (list(range(1, 21)), 19), (list(range(1, 101)), 95), ([5, 1, 3], 5)],
)
def test_p95_nearest_rank(values: list[int], expected: int) -> None:
    assert p95(values) == expected
