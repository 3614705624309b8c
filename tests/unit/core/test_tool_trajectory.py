"""AgentV's tool_trajectory evaluator: modes, AgentV's messages, verdicts, config errors."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.errors import ConfigError
from streams.core.events import JsonValue, TraceEvent
from streams.core.tool_trajectory import (
    ToolCall,
    deep_equal,
    evaluate,
    evaluate_session,
    parse_config,
    parse_evaluator,
    score_to_verdict,
    tool_calls,
)


def calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(n) for n in names)


def one(raw: dict[str, Any]) -> Any:
    (cfg,) = parse_config(raw)
    return cfg


@pytest.mark.parametrize(
    ("score", "verdict"),
    [(1.0, "pass"), (0.8, "pass"), (0.79, "borderline"), (0.6, "borderline"), (0.59, "fail")],
)
def test_verdict_thresholds(score: float, verdict: str) -> None:
    assert score_to_verdict(score) == verdict


def test_any_order_minimums_messages_and_score() -> None:
    cfg = one(
        {"type": "tool_trajectory", "mode": "any_order", "minimums": {"analyze": 1, "search": 3}}
    )
    r = evaluate(cfg, calls("init", "search", "analyze", "report"))
    assert r.score == 0.5
    assert r.verdict == "fail"
    assert r.hits == ("analyze: called 1 times (required >=1)",)
    assert r.misses == ("search: called 1 times (required >=3)",)
    assert r.expected_aspect_count == 2
    ok = evaluate(cfg, calls("search", "search", "analyze", "search"))
    assert (ok.score, ok.verdict, ok.misses) == (1.0, "pass", ())


def test_any_order_without_minimums_passes() -> None:
    cfg = one({"type": "tool_trajectory", "mode": "any_order"})
    r = evaluate(cfg, calls())
    assert (r.score, r.hits, r.expected_aspect_count) == (
        1.0,
        ("No tool requirements specified",),
        0,
    )


def test_mode_defaults_to_any_order_with_minimums() -> None:
    assert one({"type": "tool_trajectory", "minimums": {"x": 1}}).mode == "any_order"


def test_in_order_allows_gaps_and_reports_positions() -> None:
    cfg = one(
        {
            "type": "tool_trajectory",
            "mode": "in_order",
            "expected": [{"tool": "init"}, {"tool": "search"}, {"tool": "analyze"}],
        }
    )
    r = evaluate(cfg, calls("init", "log", "search", "log", "analyze"))
    assert r.score == 1.0 and r.verdict == "pass"
    assert r.hits == (
        "Found init at position 0",
        "Found search at position 2",
        "Found analyze at position 4",
    )
    wrong = evaluate(cfg, calls("analyze", "search", "init"))
    # analyze at 0 is skipped looking for init (found at 2); nothing is left after it
    assert wrong.hits == ("Found init at position 2",)
    assert wrong.misses == (
        "Expected search at position 1, not found in remaining trace",
        "Expected analyze at position 2, not found in remaining trace",
    )
    assert wrong.score == pytest.approx(1 / 3) and wrong.verdict == "fail"


def test_in_order_args_mismatch_consumes_the_call() -> None:
    cfg = one(
        {
            "type": "tool_trajectory",
            "mode": "in_order",
            "expected": [{"tool": "fetch", "args": {"id": 1}}, {"tool": "fetch", "args": "any"}],
        }
    )
    r = evaluate(cfg, (ToolCall("fetch", {"id": 2}), ToolCall("fetch", {"id": 1, "x": 0})))
    assert r.misses == ("Expected fetch at position 0: tool found at 0 but args mismatch",)
    assert r.hits == ("Found fetch at position 1",)
    assert r.score == 0.5


def test_exact_positions_length_and_nothing() -> None:
    cfg = one(
        {
            "type": "tool_trajectory",
            "mode": "exact",
            "expected": [{"tool": "a"}, {"tool": "b"}, {"tool": "c"}],
        }
    )
    assert evaluate(cfg, calls("a", "b", "c")).score == 1.0
    r = evaluate(cfg, calls("a", "x"))
    assert r.misses == (
        "Expected 3 tool calls, got 2",
        "Position 1: expected b, got x",
        "Position 2: expected c, got nothing",
    )
    assert r.hits == ("Position 0: a",)
    assert r.score == pytest.approx(1 / 3)
    extra = evaluate(cfg, calls("a", "b", "c", "d"))
    assert extra.score == 1.0 and extra.misses == ("Expected 3 tool calls, got 4",)


def test_exact_args_mismatch() -> None:
    cfg = one(
        {
            "type": "tool_trajectory",
            "mode": "exact",
            "expected": [{"tool": "a", "args": {"k": [1, True]}}],
        }
    )
    assert evaluate(cfg, (ToolCall("a", {"k": [1, True], "z": 1}),)).score == 1.0
    r = evaluate(cfg, (ToolCall("a", {"k": [1, 1]}),))  # true is not 1 (JSON semantics)
    assert r.misses == ("Position 0: a args mismatch",)


def test_empty_expected_passes() -> None:
    cfg = one({"type": "tool_trajectory", "mode": "exact", "expected": []})
    assert evaluate(cfg, calls("a")).hits == ("No tool sequence specified",)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"x": [1, {"y": None}]}, {"x": [1, {"y": None}]}, True),
        ({"x": 1}, {"x": 1, "y": 2}, False),
        (1, 1.0, True),
        (True, 1, False),
        ([1], (1,), False),
        ("a", "a", True),
    ],
)
def test_deep_equal(a: JsonValue, b: Any, equal: bool) -> None:
    assert deep_equal(a, b) is equal


def test_several_evaluators_weighted() -> None:
    configs = parse_config(
        {
            "evaluators": [
                {
                    "name": "must-search",
                    "type": "tool_trajectory",
                    "minimums": {"search": 2},
                    "weight": 3,
                },
                {
                    "name": "flow",
                    "type": "tool_trajectory",
                    "mode": "exact",
                    "expected": [{"tool": "x"}],
                },
            ]
        }
    )
    events = [
        TraceEvent(
            type="tool_call", session_id="s", seq=i, timestamp_ms=i, tool_name=n, input={"q": i}
        )
        for i, n in enumerate(["search", "search"])
    ]
    assert [c.name for c in tool_calls(events)] == ["search", "search"]
    result = evaluate_session("s", events, configs)
    # must-search 1.0 (weight 3), flow 0.0 (weight 1)
    assert result.score == pytest.approx(0.75)
    assert result.verdict == "borderline"
    assert [e.name for e in result.evaluators] == ["must-search", "flow"]
    assert result.to_json()["evaluators"][1]["misses"] == [
        "Expected 1 tool calls, got 2",
        "Position 0: expected x, got search",
    ]


def test_execution_nesting_is_accepted() -> None:
    configs = parse_config(
        {
            "execution": {
                "evaluators": [{"type": "tool_trajectory", "mode": "in_order", "expected": []}]
            }
        }
    )
    assert configs[0].mode == "in_order"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (
            {"type": "tool_trajectory", "mode": "any_order", "minimum": {"a": 1}},
            "evaluator.minimum",
        ),
        ({"type": "llm_judge", "mode": "any_order"}, "evaluator.type"),
        ({"type": "tool_trajectory", "mode": "sideways", "expected": []}, "evaluator.mode"),
        ({"type": "tool_trajectory", "expected": [{"tool": "a"}]}, "evaluator.mode"),
        ({"type": "tool_trajectory", "minimums": {"a": -1}}, "evaluator.minimums.a"),
        ({"type": "tool_trajectory", "minimums": {"a": True}}, "evaluator.minimums.a"),
        ({"type": "tool_trajectory", "mode": "exact", "minimums": {"a": 1}}, "evaluator.minimums"),
        ({"type": "tool_trajectory", "mode": "any_order", "expected": []}, "evaluator.expected"),
        ({"type": "tool_trajectory", "mode": "exact", "expected": "a,b"}, "evaluator.expected"),
        ({"type": "tool_trajectory", "mode": "exact", "expected": ["a"]}, "evaluator.expected[0]"),
        (
            {"type": "tool_trajectory", "mode": "exact", "expected": [{"name": "a"}]},
            "evaluator.expected[0].name",
        ),
        (
            {"type": "tool_trajectory", "mode": "exact", "expected": [{"tool": ""}]},
            "evaluator.expected[0].tool",
        ),
        (
            {"type": "tool_trajectory", "mode": "exact", "expected": [{"tool": "a", "args": 3}]},
            "evaluator.expected[0].args",
        ),
        (
            {
                "type": "tool_trajectory",
                "mode": "exact",
                "expected": [{"tool": "a", "maxDurationMs": 5}],
            },
            "evaluator.expected[0].maxDurationMs",
        ),
        ({"type": "tool_trajectory", "minimums": {"a": 1}, "weight": "high"}, "evaluator.weight"),
        ({"evaluators": []}, "evaluators"),
        ({"evaluators": [{"type": "tool_trajectory", "modes": "exact"}]}, "evaluators[0].modes"),
        ({"evaluators": [{"type": "tool_trajectory", "minimums": {}}], "extra": 1}, "extra"),
        (
            {
                "evaluators": [
                    {"name": "x", "type": "tool_trajectory", "minimums": {}},
                    {"name": "x", "type": "tool_trajectory", "minimums": {}},
                ]
            },
            "evaluators",
        ),
    ],
)
def test_bad_configs_name_the_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_config(["type", "tool_trajectory"])
    with pytest.raises(ConfigError, match="evaluator"):
        parse_evaluator("tool_trajectory")
