"""Generated sessions for the engine's determinism tests (a helper module, not a
test module: test modules import it, never each other)."""

from __future__ import annotations

import random

from streams.core.events import Budget, TraceEvent


def mixed_events(seed: int, n: int = 3_000) -> list[TraceEvent]:
    """One generated session over every event type the engine knows: loops and
    error bursts, repeated assistant messages, agent-level context errors,
    condensations, budgets with deadlines and tool-call limits, snapshots and
    restores, duplicate and out-of-order deliveries (seeded, deterministic)."""
    rng = random.Random(seed)
    sid = f"mixed-{seed}"
    out: list[TraceEvent] = []
    ts = 1_700_000_000_000
    snaps: list[str] = []

    def add(etype: str, **kw: object) -> None:
        nonlocal ts
        ts += rng.randint(0, 4_000)
        when = ts - rng.randint(0, 3_000) if rng.random() < 0.05 else ts  # a late one
        out.append(TraceEvent(etype, sid, len(out), when, **kw))  # type: ignore[arg-type]

    add("session_start", metadata={"task": "fix src/app/core.py and tests/test_core.py"})
    cmds = ["cat src/app/core.py", "pytest tests/test_core.py", "sed -i 's/a/b/' src/app/core.py"]
    tools = ["bash", "read_file", "edit", "search", "run_tests"]
    call = 0
    while len(out) < n:
        r = rng.random()
        if r < 0.55:
            call += 1
            tool = rng.choice(tools)
            cmd = rng.choice(cmds) if rng.random() < 0.6 else f"ls dir{rng.randint(0, 30)}"
            params: dict[str, object] = {"command": cmd} if tool == "bash" else {"path": cmd}
            if rng.random() < 0.2:
                params["args"] = [rng.randint(0, 3)]
            cid = f"c{call}" if rng.random() < 0.95 else None
            add("tool_call", call_id=cid, tool_name=tool, input=params)
            fail = rng.random() < 0.35
            msg = rng.choice(
                ["AssertionError at line 3", "returncode 1", "context window exceeded", None]
            )
            if rng.random() < 0.9:
                add(
                    "error" if fail and rng.random() < 0.2 else "tool_result",
                    call_id=cid,
                    tool_name=tool,
                    is_error=fail,
                    error_message=msg if fail else None,
                    output=rng.choice(["ok", {"rc": int(fail), "stdout": "x" * rng.randint(0, 9)}]),
                    latency_ms=rng.randint(1, 500),
                )
        elif r < 0.7:
            add("model_step", input_tokens=rng.randint(10, 5_000), output_tokens=50, text="plan")
        elif r < 0.78:
            add("message", text=rng.choice(["I will now run the tests.", "Done?", "Thinking 42"]))
        elif r < 0.81:
            meta = {"condensation": "true"} if rng.random() < 0.5 else {}
            add("error", error_message="maximum context length exceeded", metadata=meta)
        elif r < 0.85:
            add(
                "budget",
                budget=Budget(
                    deadline_ms=ts + rng.randint(-10_000, 600_000) if rng.random() < 0.7 else None,
                    max_tokens=rng.choice([None, 100_000, 2_000_000]),
                    tokens_used=rng.choice([None, rng.randint(0, 90_000)]),
                    max_tool_calls=rng.choice([None, call + rng.randint(1, 40)]),
                ),
            )
        elif r < 0.88:
            snaps.append(f"p{len(snaps) % 5}")
            add("snapshot", metadata={"snapshot_id": snaps[-1]})
        elif r < 0.9 and snaps:
            add("restore", metadata={"snapshot_id": rng.choice(snaps)})
        elif r < 0.92 and out:
            out.append(out[rng.randrange(len(out))])  # a duplicate delivery
        else:
            add("tool_result", tool_name="bash", output="lone result")
    return out
