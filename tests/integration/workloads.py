"""Event workloads for the integration tests and the table values they must produce.

``make_session`` (budget, tool call/result pairs with some failures, model steps)
and ``expected_of`` compute, independently of ``streams.worker.state``, what the
worker's tables must hold; ``check_tables`` compares them with a worker's HTTP view.
``session_events`` is a session that keeps failing the same way (patterns and
assessments fire).  Test modules import these from here, never from one another.
"""

from __future__ import annotations

import random
import time
import urllib.error
from collections import Counter
from typing import Any

from procs import WorkerProc

from streams.core.events import Budget, TraceEvent

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def make_session(sid: str, n: int, start_seq: int = 0, seed: int = 0) -> list[TraceEvent]:
    """``n`` events: budget, then tool call/result pairs (some failing) and model steps."""
    rng = random.Random(f"{sid}:{seed}")
    out: list[TraceEvent] = []
    for seq in range(start_seq, start_seq + n):
        ts = T0 + seq * 7_000  # ~8.5 events per event-time minute
        kind = seq % 4
        if seq == 0:
            ev = TraceEvent(
                "budget", sid, seq, ts, budget=Budget(max_tokens=100_000, tokens_used=100)
            )
        elif kind == 1:
            ev = TraceEvent(
                "tool_call",
                sid,
                seq,
                ts,
                call_id=f"c{seq}",
                tool_name="read_file",
                input={"path": f"src/m{seq % 5}.py"},
            )
        elif kind == 2:
            failed = rng.random() < 0.3
            ev = TraceEvent(
                "tool_result",
                sid,
                seq,
                ts,
                call_id=f"c{seq - 1}",
                tool_name="read_file",
                output="x" * 10,
                is_error=failed,
                error_message="ENOENT" if failed else None,
            )
        else:
            ev = TraceEvent(
                "model_step",
                sid,
                seq,
                ts,
                text="thinking",
                input_tokens=rng.randint(10, 500),
                output_tokens=rng.randint(1, 90),
            )
        out.append(ev)
    return out


def expected_of(events: list[TraceEvent]) -> dict[str, dict[str, Any]]:
    """Counts per session computed from unique (session, seq) events."""
    unique = {(e.session_id, e.seq): e for e in events}
    exp: dict[str, dict[str, Any]] = {}
    for (sid, _), e in sorted(unique.items()):
        d = exp.setdefault(
            sid,
            {
                "events": 0,
                "tool_calls": 0,
                "errors": 0,
                "tokens": 0,
                "last_seq": -1,
                "budget_tokens": 0,
                "minutes": Counter(),
                "minute_errors": Counter(),
            },
        )
        d["events"] += 1
        d["last_seq"] = max(d["last_seq"], e.seq)
        minute = e.timestamp_ms - e.timestamp_ms % 60_000
        if e.type == "tool_call":
            d["tool_calls"] += 1
            d["minutes"][minute] += 1
        if e.is_error:
            d["errors"] += 1
            d["minute_errors"][minute] += 1
        d["tokens"] += e.total_tokens
        if e.type == "budget" and e.budget is not None:
            d["budget_tokens"] = e.budget.tokens_used or 0
        elif e.type == "model_step":
            d["budget_tokens"] += e.total_tokens
    return exp


def check_tables(worker: WorkerProc, exp: dict[str, dict[str, Any]]) -> None:
    for sid, d in exp.items():
        status, body = worker.get(f"/sessions/{sid}/state")
        assert status == 200, body
        st = body["state"]
        diag = {k: st[k] for k in ("events", "last_seq", "seq_gaps", "tool_calls")}
        diag["recent_seqs"] = [r.get("seq") for r in st["recent"]]
        assert st["events"] == d["events"], (sid, diag, d, worker.log_path)
        assert st["tool_calls"] == d["tool_calls"], sid
        assert st["errors"] == d["errors"], sid
        assert st["input_tokens"] + st["output_tokens"] == d["tokens"], sid
        assert st["last_seq"] == d["last_seq"], sid
        assert st["seq_gaps"] == 0, sid
        assert body["budget"]["max_tokens"] == 100_000
        assert body["budget"]["tokens_used"] == d["budget_tokens"], (sid, body["budget"])
        status, mbody = worker.get(f"/sessions/{sid}/minutes")
        assert status == 200, mbody
        got_calls = {
            r["minute_start_ms"]: r["tool_calls"] for r in mbody["minutes"] if r["tool_calls"]
        }
        got_errors = {r["minute_start_ms"]: r["errors"] for r in mbody["minutes"]}
        assert got_calls == {m: c for m, c in d["minutes"].items() if c}, sid
        assert {m: e for m, e in got_errors.items() if e} == dict(d["minute_errors"]), sid


def state_any(workers: list[WorkerProc], sid: str) -> dict[str, Any] | None:
    """The state of ``sid`` from whichever worker owns its partition."""
    for w in workers:
        try:
            status, body = w.get(f"/sessions/{sid}/state")
        except (urllib.error.URLError, ConnectionError, OSError):
            continue
        if status == 200:
            return body  # type: ignore[no-any-return]
    return None


def wait_all(workers: list[WorkerProc], exp: dict[str, dict[str, Any]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(exp)
    while pending and time.monotonic() < deadline:
        for sid in list(pending):
            body = state_any(workers, sid)
            if body is not None and body["state"]["last_seq"] >= exp[sid]["last_seq"]:
                pending.discard(sid)
        time.sleep(0.3)
    assert not pending, f"not caught up: {sorted(pending)}\n" + "\n".join(
        w.diagnose() for w in workers
    )


def session_events(sid: str, start: int, calls: int = 8, fail_every: int = 1) -> list[TraceEvent]:
    """A session that fails the same way over and over (patterns and assessments fire)."""
    out = [
        TraceEvent("session_start", sid, 0, start, agent_id="ag", metadata={"task": "fix foo.py"}),
        TraceEvent("budget", sid, 1, start, budget=Budget(max_tokens=5000)),
    ]
    t = start
    for i in range(calls):
        t += 1000
        fail = i % fail_every == 0
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                len(out),
                t,
                agent_id="ag",
                tool_name="bash",
                call_id=f"c{i}",
                input={"command": "pytest -x tests/test_foo.py"},
            )
        )
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                len(out),
                t + 200,
                agent_id="ag",
                call_id=f"c{i}",
                is_error=fail,
                error_message="1 failed: test_foo" if fail else None,
                output={"rc": 1 if fail else 0},
            )
        )
        out.append(
            TraceEvent(
                "model_step",
                sid,
                len(out),
                t + 400,
                agent_id="ag",
                input_tokens=300,
                output_tokens=20,
                text="try again",
            )
        )
    out.append(TraceEvent("session_end", sid, len(out), t + 500, agent_id="ag"))
    return out


def by_session(evs: list[TraceEvent]) -> list[TraceEvent]:
    return sorted(evs, key=lambda e: e.session_id)  # stable: event order within a session
