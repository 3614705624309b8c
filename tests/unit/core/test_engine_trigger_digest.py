"""The engine's outputs under every trigger kind, against digests taken before
the trigger check was inlined (issue #12).

Why: ``SessionEngine.on_event`` evaluates each observer's trigger inline (not via
``should_trigger``) and skips an observer that declares ``silent_without_limits``
while the budget sets no limit.  ``test_engine_digest`` pins the default
configuration only (``every_n_calls`` + ``after_consecutive_errors`` for
resources, ``on_every_call`` for patterns); these configurations put every
trigger condition (``every_n_calls``, ``after_consecutive_errors``,
``every_n_seconds``, ``on_every_call``) on both observer kinds, with and without
``require_budget``, over generated sessions that set, change and drop budgets.

The digests in ``tests/fixtures/core_trigger_digests.json`` were computed with
the engine before the change (b9280c5), with
``python tests/unit/core/test_engine_trigger_digest.py --write``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from engine_sessions import mixed_events

from streams.core.config import EngineConfig, ObserverSpec
from streams.core.engine import SessionEngine
from streams.core.observers import ObserverTrigger

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "core_trigger_digests.json"
SEEDS = (0, 1, 2)
TIMER_EVERY = 30

CONFIGS: dict[str, EngineConfig] = {
    "calls-errors-seconds": EngineConfig(
        observers=(
            ObserverSpec(
                "resource",
                ObserverTrigger(every_n_calls=3, after_consecutive_errors=2),
                (("require_budget", True),),
            ),
            ObserverSpec("pattern", ObserverTrigger(every_n_seconds=20)),
        )
    ),
    "seconds-no-require": EngineConfig(
        observers=(
            ObserverSpec("resource", ObserverTrigger(every_n_seconds=45)),
            ObserverSpec("pattern", ObserverTrigger(every_n_calls=4, after_consecutive_errors=3)),
        )
    ),
    "every-call-errors": EngineConfig(
        observers=(
            ObserverSpec(
                "resource",
                ObserverTrigger(on_every_call=True, every_n_seconds=0.5),
                (("require_budget", True), ("pace_min_elapsed_ms", 0)),
            ),
            ObserverSpec("pattern", ObserverTrigger(after_consecutive_errors=1)),
        )
    ),
}


def digest(name: str, seed: int) -> str:
    """sha256 over every output, rendered assessment, timer result and the final state."""
    events = mixed_events(seed, 2_500)
    engine = SessionEngine.create(events[0].session_id, CONFIGS[name])
    h = hashlib.sha256()
    for i, ev in enumerate(events):
        out = engine.on_event(ev)
        h.update(repr(out).encode())
        if out.assessment is not None:
            h.update(out.assessment.render().encode())
        if i % TIMER_EVERY == TIMER_EVERY - 1:
            h.update(repr(engine.on_timer(ev.timestamp_ms + 50_000)).encode())
    h.update(repr(engine.snapshot()).encode())
    return h.hexdigest()


def _cases() -> list[tuple[str, int]]:
    return [(name, seed) for name in CONFIGS for seed in SEEDS]


@pytest.mark.parametrize(("name", "seed"), _cases())
def test_outputs_under_every_trigger_kind_are_unchanged(name: str, seed: int) -> None:
    want: dict[str, str] = json.loads(FIXTURE.read_text())
    assert digest(name, seed) == want[f"{name}/{seed}"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: test_engine_trigger_digest.py --write")
    FIXTURE.write_text(
        json.dumps({f"{n}/{s}": digest(n, s) for n, s in _cases()}, indent=1, sort_keys=True) + "\n"
    )
    print(f"wrote {FIXTURE}")
