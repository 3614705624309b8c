"""Simulated agent sessions as pure, seeded scripts of actions (no Kafka, no clock).

Why: the worker, the detectors and the demo need realistic traffic whose shape
is known in advance -- healthy coding sessions, and the three pathologies the
observer exists to catch.  A script is an iterator of :class:`SimAction`; the
driver (``streams.sim.driver``) turns actions into publisher SDK calls.

Kinds:

* ``healthy`` -- reads a few files, edits, runs tests (sometimes failing once,
  then fixing), runs them again green, submits.  Finite.
* ``looping`` -- after a short exploration, repeats the *same* failing call with
  the same error over and over (a doom loop).  Unbounded.
* ``stalled`` -- keeps trying different searches and commands that never
  succeed and never return anything new (no progress).  Unbounded.
* ``budget_burner`` -- sets a token budget, then makes model steps with huge
  token counts until far past it.  Unbounded.

Invariants: the same ``(kind, seed)`` always gives the same actions; a
``tool_result`` / failed result always refers to the call made just before it
(``call`` = the index of that call within the session, 0-based).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from streams.core.events import JsonValue
from streams.errors import ConfigError

SessionKind: TypeAlias = Literal["healthy", "looping", "stalled", "budget_burner"]
PATHOLOGICAL_KINDS: Final[tuple[SessionKind, ...]] = ("looping", "stalled", "budget_burner")
SESSION_KINDS: Final[tuple[SessionKind, ...]] = ("healthy", *PATHOLOGICAL_KINDS)

ActionKind: TypeAlias = Literal["tool_call", "tool_result", "model_step", "budget"]


@dataclass(frozen=True, slots=True)
class SimAction:
    """One thing a simulated agent does; ``call`` links a result to its call."""

    kind: ActionKind
    tool_name: str | None = None
    input: JsonValue = None
    output: JsonValue = None
    is_error: bool = False
    error: str | None = None
    call: int | None = None
    text: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    max_tokens: int | None = None
    latency_ms: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)


FILES: Final = (
    "src/app/models.py",
    "src/app/views.py",
    "src/app/utils.py",
    "src/app/config.py",
    "src/app/db.py",
    "tests/test_models.py",
    "tests/test_views.py",
    "README.md",
)
TASKS: Final[dict[SessionKind, str]] = {
    "healthy": "Fix the failing date parsing in utils.parse_date and add a test",
    "looping": "Make tests/test_views.py pass",
    "stalled": "Find where the cache TTL is configured and raise it to 10 minutes",
    "budget_burner": "Refactor the db layer to use connection pooling",
}


class _Script:
    """Builds actions and numbers calls so results can point at them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.calls = 0

    def think(self, text: str, lo: int = 300, hi: int = 2500) -> SimAction:
        return SimAction(
            "model_step",
            text=text,
            input_tokens=self.rng.randint(lo, hi),
            output_tokens=self.rng.randint(20, 400),
            latency_ms=self.rng.randint(400, 4000),
        )

    def call(
        self,
        tool: str,
        args: JsonValue,
        output: JsonValue = None,
        *,
        error: str | None = None,
    ) -> Iterator[SimAction]:
        index = self.calls
        self.calls += 1
        yield SimAction("tool_call", tool_name=tool, input=args, call=index)
        yield SimAction(
            "tool_result",
            tool_name=tool,
            output=output,
            is_error=error is not None,
            error=error,
            call=index,
            latency_ms=self.rng.randint(5, 3000),
        )


def _healthy(rng: random.Random) -> Iterator[SimAction]:
    s = _Script(rng)
    yield s.think("Let me look at the code around the failing behaviour.")
    files = rng.sample(FILES[:5], k=rng.randint(2, 4))
    for path in files:
        yield from s.call(
            "read_file", {"path": path}, f"# {path}\n" + "def f():\n    pass\n" * rng.randint(3, 30)
        )
    yield from s.call("search_code", {"query": "parse_date"}, ["src/app/utils.py:42"])
    yield s.think("The bug is in parse_date; editing it.")
    yield from s.call(
        "edit_file",
        {"path": "src/app/utils.py", "old": "fmt = '%d/%m'", "new": "fmt = '%Y-%m-%d'"},
        "ok",
    )
    if rng.random() < 0.5:
        yield from s.call(
            "run_tests",
            {"cmd": "pytest -q tests/test_models.py"},
            "1 failed, 11 passed",
            error="AssertionError: expected 2025-01-15, got 2025-15-01",
        )
        yield s.think("One assertion still fails; the month/day order is swapped.")
        yield from s.call(
            "edit_file",
            {"path": "src/app/utils.py", "old": "'%Y-%d-%m'", "new": "'%Y-%m-%d'"},
            "ok",
        )
    yield from s.call("run_tests", {"cmd": "pytest -q"}, f"{rng.randint(20, 90)} passed")
    yield s.think("All tests pass; submitting.")
    yield from s.call("submit", {"summary": "fix parse_date format"}, "submitted")


def _looping(rng: random.Random) -> Iterator[SimAction]:
    s = _Script(rng)
    yield s.think("Running the view tests first.")
    yield from s.call("read_file", {"path": "tests/test_views.py"}, "def test_index(): ...")
    error = "AssertionError: assert 404 == 200 (GET /index)"
    while True:
        yield from s.call("run_tests", {"cmd": "pytest -q tests/test_views.py"}, None, error=error)
        yield s.think("The test still fails with 404; let me run it again.", 800, 3000)


def _stalled(rng: random.Random) -> Iterator[SimAction]:
    s = _Script(rng)
    yield s.think("Searching for the cache TTL setting.")
    n = 0
    while True:
        n += 1
        query = rng.choice(("cache_ttl", "CACHE_TTL", "ttl", "expire", "timeout", "cache"))
        yield from s.call(
            "search_code", {"query": f"{query}", "page": n}, None, error="no matches found"
        )
        if n % 3 == 0:
            yield from s.call(
                "run_command", {"cmd": f"grep -rn {query} conf/"}, None, error="exit status 1"
            )
        yield s.think("Nothing yet; trying another query.", 400, 1200)


def _budget_burner(rng: random.Random) -> Iterator[SimAction]:
    s = _Script(rng)
    max_tokens = rng.choice((40_000, 60_000, 80_000))
    yield SimAction("budget", max_tokens=max_tokens)
    yield s.think("Reading the whole db layer into context.")
    while True:
        path = rng.choice(FILES[:5])
        yield from s.call("read_file", {"path": path}, "x" * rng.randint(2000, 8000))
        yield s.think("Re-reading everything with the full history in context.", 8_000, 15_000)


_BUILDERS = {
    "healthy": _healthy,
    "looping": _looping,
    "stalled": _stalled,
    "budget_burner": _budget_burner,
}


def session_script(kind: SessionKind, seed: int | str) -> Iterator[SimAction]:
    """The actions of one simulated session of ``kind`` (deterministic per seed)."""
    if kind not in _BUILDERS:
        raise ConfigError("kind", f"{kind!r}: use one of {', '.join(SESSION_KINDS)}")
    return _BUILDERS[kind](random.Random(f"{kind}:{seed}"))


def task_for(kind: SessionKind) -> str:
    return TASKS[kind]


__all__ = [
    "PATHOLOGICAL_KINDS",
    "SESSION_KINDS",
    "ActionKind",
    "SessionKind",
    "SimAction",
    "session_script",
    "task_for",
]
