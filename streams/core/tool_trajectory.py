"""AgentV's ``tool_trajectory`` evaluator over one session's events.

Configured as AgentV configures it (YAML or JSON, parsed by the caller)::

    type: tool_trajectory
    mode: any_order          # any_order | in_order | exact
    minimums: {search: 3}    # any_order: per-tool minimum call counts
    expected:                # in_order / exact: the tool sequence
      - tool: fetch
        args: {id: 1}        # optional: "any", or a partial deep-equal match

A config is one evaluator or ``evaluators: [...]`` (AgentV's ``execution:
{evaluators: [...]}`` nesting is accepted too).  Keys other than ``name``,
``type``, ``mode``, ``minimums``, ``expected``, ``weight`` are rejected with a
:class:`~streams.core.errors.ConfigError` naming the key path.  ``mode`` may be
left out only when ``minimums`` is given (then it is ``any_order``, as in the
spec's "belt and suspenders" example).

Scoring follows AgentV's ``ToolTrajectoryEvaluator``
(``packages/core/src/evaluation/evaluators/tool-trajectory.ts``) and
``scoreToVerdict`` (``scoring.ts``):

* ``any_order``: score = (tools meeting their minimum) / (tools with a minimum);
  hit/miss text ``"<tool>: called <n> times (required >=<m>)"``; no minimums →
  score 1, hit ``"No tool requirements specified"``.
* ``in_order``: walk the actual calls once; each expected item takes the next call
  with its name: a hit ``"Found <tool> at position <actual index>"`` if the args
  match, else a miss ``"Expected <tool> at position <i>: tool found at <j> but
  args mismatch"`` (the call is consumed); no such call left → miss ``"Expected
  <tool> at position <i>, not found in remaining trace"``.  Score = hits /
  expected.
* ``exact``: a length difference adds the miss ``"Expected <n> tool calls, got
  <m>"``; position *i* is a hit ``"Position <i>: <tool>"`` or a miss
  (``"Position <i>: expected <tool>, got <actual>"``, ``"... args mismatch"``,
  ``"... got nothing"``).  Score = hits / expected.
* Empty ``expected`` → score 1, hit ``"No tool sequence specified"``.
* Verdict: ``pass`` if score >= 0.8, ``borderline`` if >= 0.6, else ``fail``.
* Args: ``"any"`` or absent always match; an object matches when every key it
  names is present in the call's input with a deep-equal value (JSON semantics:
  ``true`` is not ``1``).
* Several evaluators: the overall score is the ``weight``-weighted mean (weight
  defaults to 1.0), as AgentV aggregates its top-level evaluators.

Not implemented (later AgentV additions): ``superset``/``subset`` modes,
``argsMatch`` modes and per-item ``maxDurationMs`` latency assertions; using them
is a ``ConfigError``, not a silent pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, cast

from streams.core.errors import ConfigError
from streams.core.events import JsonValue, TraceEvent

Mode: TypeAlias = Literal["any_order", "in_order", "exact"]
Verdict: TypeAlias = Literal["pass", "borderline", "fail"]

MODES: Final[tuple[str, ...]] = ("any_order", "in_order", "exact")
PASS_THRESHOLD: Final = 0.8
BORDERLINE_THRESHOLD: Final = 0.6

_EVALUATOR_KEYS: Final = frozenset({"name", "type", "mode", "minimums", "expected", "weight"})
_ITEM_KEYS: Final = frozenset({"tool", "args"})


def score_to_verdict(score: float) -> Verdict:
    """AgentV's ``scoreToVerdict``: pass >= 0.8, borderline >= 0.6, else fail."""
    if score >= PASS_THRESHOLD:
        return "pass"
    if score >= BORDERLINE_THRESHOLD:
        return "borderline"
    return "fail"


@dataclass(frozen=True, slots=True)
class ExpectedTool:
    """One expected call; ``args`` is ``None`` (no constraint), ``"any"`` or a partial match."""

    tool: str
    args: Mapping[str, JsonValue] | Literal["any"] | None = None


@dataclass(frozen=True, slots=True)
class ToolTrajectoryConfig:
    """A validated ``tool_trajectory`` evaluator configuration."""

    name: str
    mode: Mode
    minimums: Mapping[str, int] = field(default_factory=dict)
    expected: tuple[ExpectedTool, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call as the evaluator sees it: the tool's name and its input."""

    name: str
    args: JsonValue = None


@dataclass(frozen=True, slots=True)
class EvaluationScore:
    """One evaluator's result.  Invariant: ``verdict == score_to_verdict(score)``."""

    name: str
    mode: Mode
    score: float
    verdict: Verdict
    hits: tuple[str, ...]
    misses: tuple[str, ...]
    expected_aspect_count: int
    weight: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": "tool_trajectory",
            "mode": self.mode,
            "score": self.score,
            "verdict": self.verdict,
            "hits": list(self.hits),
            "misses": list(self.misses),
            "expectedAspectCount": self.expected_aspect_count,
            "weight": self.weight,
        }


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    """All evaluators' results for one session and their weighted overall score."""

    session_id: str
    score: float
    verdict: Verdict
    evaluators: tuple[EvaluationScore, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "score": self.score,
            "verdict": self.verdict,
            "evaluators": [e.to_json() for e in self.evaluators],
        }


# ---------------------------------------------------------------- configuration


def _parse_item(raw: object, path: str) -> ExpectedTool:
    if isinstance(raw, str):
        raise ConfigError(path, f"expected an object like {{tool: {raw}}}, got a bare string")
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected an object with a 'tool' key, got {type(raw).__name__}")
    for key in raw:
        if key not in _ITEM_KEYS:
            raise ConfigError(
                f"{path}.{key}",
                "unknown key (allowed: tool, args; maxDurationMs is not supported)",
            )
    tool = raw.get("tool")
    if not isinstance(tool, str) or not tool:
        raise ConfigError(f"{path}.tool", "required: the tool's name as a non-empty string")
    args = raw.get("args")
    if args is None or args == "any":
        return ExpectedTool(tool, args)
    if not isinstance(args, Mapping):
        raise ConfigError(f"{path}.args", f'expected "any" or an object, got {args!r}')
    return ExpectedTool(tool, {str(k): v for k, v in args.items()})


def parse_evaluator(raw: object, path: str = "evaluator", index: int = 0) -> ToolTrajectoryConfig:
    """Validate one evaluator mapping; errors name the key path (e.g. ``evaluators[1].mode``)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(path, f"expected a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in _EVALUATOR_KEYS:
            raise ConfigError(
                f"{path}.{key}",
                f"unknown key (allowed: {', '.join(sorted(_EVALUATOR_KEYS))})",
            )
    etype = raw.get("type")
    if etype != "tool_trajectory":
        raise ConfigError(f"{path}.type", f"must be 'tool_trajectory', got {etype!r}")
    name = raw.get("name", f"tool_trajectory_{index}" if index else "tool_trajectory")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}.name", "expected a non-empty string")
    minimums_raw = raw.get("minimums")
    expected_raw = raw.get("expected")
    mode = raw.get("mode")
    if mode is None:
        if minimums_raw is None:
            raise ConfigError(f"{path}.mode", f"required: one of {', '.join(MODES)}")
        mode = "any_order"
    if mode not in MODES:
        raise ConfigError(f"{path}.mode", f"{mode!r} is not one of {', '.join(MODES)}")
    minimums: dict[str, int] = {}
    if minimums_raw is not None:
        if mode != "any_order":
            raise ConfigError(f"{path}.minimums", f"only used by mode any_order, not {mode}")
        if not isinstance(minimums_raw, Mapping):
            raise ConfigError(f"{path}.minimums", "expected a mapping of tool name to count")
        for tool, count in minimums_raw.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(
                    f"{path}.minimums.{tool}", f"expected a non-negative integer, got {count!r}"
                )
            minimums[str(tool)] = count
    expected: list[ExpectedTool] = []
    if expected_raw is not None:
        if mode == "any_order":
            raise ConfigError(
                f"{path}.expected",
                "only used by modes in_order and exact (any_order uses minimums)",
            )
        if not isinstance(expected_raw, list):
            raise ConfigError(f"{path}.expected", "expected a list of {tool: NAME} items")
        expected = [
            _parse_item(item, f"{path}.expected[{i}]") for i, item in enumerate(expected_raw)
        ]
    weight = raw.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
        raise ConfigError(f"{path}.weight", f"expected a non-negative number, got {weight!r}")
    return ToolTrajectoryConfig(
        name=name,
        mode=cast(Mode, mode),
        minimums=minimums,
        expected=tuple(expected),
        weight=float(weight),
    )


def parse_config(raw: object) -> tuple[ToolTrajectoryConfig, ...]:
    """A single evaluator, ``{evaluators: [...]}`` or ``{execution: {evaluators: [...]}}``."""
    if not isinstance(raw, Mapping):
        raise ConfigError("<config>", f"expected a mapping, got {type(raw).__name__}")
    if "execution" in raw:
        extra = [k for k in raw if k != "execution"]
        if extra:
            raise ConfigError(str(extra[0]), "unknown key next to 'execution'")
        raw = raw["execution"]
        if not isinstance(raw, Mapping):
            raise ConfigError("execution", "expected a mapping with 'evaluators'")
        prefix = "execution."
    else:
        prefix = ""
    if "evaluators" in raw:
        extra = [k for k in raw if k != "evaluators"]
        if extra:
            raise ConfigError(f"{prefix}{extra[0]}", "unknown key next to 'evaluators'")
        items = raw["evaluators"]
        if not isinstance(items, list) or not items:
            raise ConfigError(f"{prefix}evaluators", "expected a non-empty list of evaluators")
        configs = tuple(
            parse_evaluator(item, f"{prefix}evaluators[{i}]", i) for i, item in enumerate(items)
        )
        names = [c.name for c in configs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ConfigError(f"{prefix}evaluators", f"duplicate evaluator name {dup!r}")
        return configs
    return (parse_evaluator(raw, "evaluator" if not prefix else prefix.rstrip(".")),)


# ---------------------------------------------------------------- evaluation


def deep_equal(a: object, b: object) -> bool:
    """JSON deep equality as AgentV's ``deepEqual`` (bools are not numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (Mapping, list)) or isinstance(b, (Mapping, list)):
        return False
    return a == b


def args_match(
    expected: Mapping[str, JsonValue] | Literal["any"] | None, actual: JsonValue
) -> bool:
    if expected is None or expected == "any":
        return True
    if not isinstance(actual, Mapping):
        return False
    return all(key in actual and deep_equal(value, actual[key]) for key, value in expected.items())


def tool_calls(events: Sequence[TraceEvent]) -> tuple[ToolCall, ...]:
    """The session's tool calls in order (``tool_call`` events with a tool name)."""
    return tuple(
        ToolCall(e.tool_name, e.input) for e in events if e.type == "tool_call" and e.tool_name
    )


def _result(
    cfg: ToolTrajectoryConfig, score: float, hits: list[str], misses: list[str], aspects: int
) -> EvaluationScore:
    return EvaluationScore(
        name=cfg.name,
        mode=cfg.mode,
        score=score,
        verdict=score_to_verdict(score),
        hits=tuple(hits),
        misses=tuple(misses),
        expected_aspect_count=aspects,
        weight=cfg.weight,
    )


def _any_order(cfg: ToolTrajectoryConfig, calls: Sequence[ToolCall]) -> EvaluationScore:
    if not cfg.minimums:
        return _result(cfg, 1.0, ["No tool requirements specified"], [], 0)
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    hits: list[str] = []
    misses: list[str] = []
    for tool, required in cfg.minimums.items():
        actual = counts.get(tool, 0)
        text = f"{tool}: called {actual} times (required >={required})"
        (hits if actual >= required else misses).append(text)
    return _result(cfg, len(hits) / len(cfg.minimums), hits, misses, len(cfg.minimums))


def _in_order(cfg: ToolTrajectoryConfig, calls: Sequence[ToolCall]) -> EvaluationScore:
    if not cfg.expected:
        return _result(cfg, 1.0, ["No tool sequence specified"], [], 0)
    hits: list[str] = []
    misses: list[str] = []
    j = 0
    for i, item in enumerate(cfg.expected):
        found = mismatch = False
        while j < len(calls):
            call = calls[j]
            if call.name == item.tool:
                if args_match(item.args, call.args):
                    hits.append(f"Found {item.tool} at position {j}")
                    found = True
                else:
                    misses.append(
                        f"Expected {item.tool} at position {i}: tool found at {j} but args mismatch"
                    )
                    mismatch = True
                j += 1
                break
            j += 1
        if not found and not mismatch:
            misses.append(f"Expected {item.tool} at position {i}, not found in remaining trace")
    return _result(cfg, len(hits) / len(cfg.expected), hits, misses, len(cfg.expected))


def _exact(cfg: ToolTrajectoryConfig, calls: Sequence[ToolCall]) -> EvaluationScore:
    if not cfg.expected:
        return _result(cfg, 1.0, ["No tool sequence specified"], [], 0)
    hits: list[str] = []
    misses: list[str] = []
    if len(calls) != len(cfg.expected):
        misses.append(f"Expected {len(cfg.expected)} tool calls, got {len(calls)}")
    check = min(len(calls), len(cfg.expected))
    for i in range(check):
        item, call = cfg.expected[i], calls[i]
        if call.name == item.tool:
            if args_match(item.args, call.args):
                hits.append(f"Position {i}: {item.tool}")
            else:
                misses.append(f"Position {i}: {item.tool} args mismatch")
        else:
            misses.append(f"Position {i}: expected {item.tool}, got {call.name}")
    for i in range(check, len(cfg.expected)):
        misses.append(f"Position {i}: expected {cfg.expected[i].tool}, got nothing")
    return _result(cfg, len(hits) / len(cfg.expected), hits, misses, len(cfg.expected))


def evaluate(cfg: ToolTrajectoryConfig, calls: Sequence[ToolCall]) -> EvaluationScore:
    """One evaluator over a session's calls (see the module docstring for the rules)."""
    if cfg.mode == "any_order":
        return _any_order(cfg, calls)
    if cfg.mode == "in_order":
        return _in_order(cfg, calls)
    return _exact(cfg, calls)


def evaluate_session(
    session_id: str, events: Sequence[TraceEvent], configs: Sequence[ToolTrajectoryConfig]
) -> EvaluationResult:
    """Every evaluator over one session, with the weight-averaged overall score."""
    calls = tool_calls(events)
    scores = tuple(evaluate(cfg, calls) for cfg in configs)
    total_weight = sum(s.weight for s in scores)
    if total_weight > 0:
        overall = sum(s.score * s.weight for s in scores) / total_weight
    else:
        overall = sum(s.score for s in scores) / len(scores) if scores else 1.0
    return EvaluationResult(session_id, overall, score_to_verdict(overall), scores)


__all__ = [
    "BORDERLINE_THRESHOLD",
    "MODES",
    "PASS_THRESHOLD",
    "EvaluationResult",
    "EvaluationScore",
    "ExpectedTool",
    "Mode",
    "ToolCall",
    "ToolTrajectoryConfig",
    "Verdict",
    "args_match",
    "deep_equal",
    "evaluate",
    "evaluate_session",
    "parse_config",
    "parse_evaluator",
    "score_to_verdict",
    "tool_calls",
]
