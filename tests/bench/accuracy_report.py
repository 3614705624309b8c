"""Accuracy of the default engine on real trajectories, scored at the agent's level.

Prints one table per data set under ``../shared/trajdata`` (or ``$TRAJDATA_DIR``);
no assertions.  Every run goes through :class:`~streams.core.engine.SessionEngine`
with the default :class:`~streams.core.config.EngineConfig`, exactly as the worker
runs it, and is scored by what the agent would *see*: the session's current
assessment (``context_for`` with the default ``max_age_calls=20``) after each of
its tool calls.  Severity ``caution`` or ``warning`` counts as a flag, because
``context_for`` injects those too.

* **false alarms** — runs that succeeded cleanly (mini-swe-agent and SWE-agent:
  resolved per ``results.json`` and not stopped at the cost limit; tau-bench:
  reward 1.0) with *any* caution-or-warning assessment (aim: <= 1 %);
* **loops** — the first run of ``LOOP_LENGTH`` (5) or more identical
  consecutive actions (tool and arguments, exactly); recall = the agent's
  context holds a flag at or after the loop's first call, delay = calls after
  the loop's first call until it does (aim: all within 3, median <= 2);
* **in-loop coverage** — over every such loop, from its 3rd repeat to its last
  call: the share of calls after which the context holds a *fresh*
  caution-or-warning assessment (aim: 100 % on every looping run);
* **budget exhausted** — SWE-agent ``exit_cost`` and ``submitted (exit_cost)``,
  OpenHands' maximum-iteration stop: the share flagged at all, and how much of
  the run (tool calls) was still ahead at the first flag (aim: >= 90 % flagged
  with >= 70 % of the run still ahead).

Usage::

    python tests/bench/accuracy_report.py [--trajdata DIR] [--json] [--list]

Defaults are the shipped ones: no threshold here is tuned per file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streams.core.assessment import severity_rank  # noqa: E402
from streams.core.config import EngineConfig  # noqa: E402
from streams.core.engine import SessionEngine  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.importers import read_events  # noqa: E402

LOOP_LENGTH = 5
MAX_AGE_CALLS = 20  # context_for's default
FLAG_RANK = severity_rank("caution")


def _action(ev: TraceEvent) -> tuple[str | None, str]:
    return (ev.tool_name, json.dumps(ev.input, sort_keys=True))


def find_loops(events: Iterable[TraceEvent], length: int = LOOP_LENGTH) -> list[tuple[int, int]]:
    """(first, last) 1-based call indexes of every run of ``length``+ identical calls."""
    loops: list[tuple[int, int]] = []
    prev: tuple[str | None, str] | None = None
    start = index = 0
    for ev in events:
        if ev.type != "tool_call":
            continue
        index += 1
        action = _action(ev)
        if action != prev:
            if prev is not None and index - start >= length:
                loops.append((start, index - 1))
            prev, start = action, index
    if prev is not None and index - start + 1 >= length:
        loops.append((start, index))
    return loops


def find_loop_start(events: Iterable[TraceEvent], length: int = LOOP_LENGTH) -> int | None:
    """1-based call index of the first call of the first run of ``length`` identical calls."""
    loops = find_loops(events, length)
    return loops[0][0] if loops else None


def agent_view(events: Sequence[TraceEvent], config: EngineConfig) -> list[bool]:
    """``view[i-1]``: after tool call ``i`` (all its events applied, before the next
    call), does the agent's context hold a fresh caution-or-warning assessment?"""
    engine = SessionEngine.create(events[0].session_id, config)
    view: list[bool] = []
    calls = 0

    def look() -> bool:
        cur = engine.current
        return (
            cur is not None
            and severity_rank(cur.severity) >= FLAG_RANK
            and not cur.is_stale(calls, MAX_AGE_CALLS)
        )

    for ev in events:
        if ev.type == "tool_call" and calls > 0:
            view.append(look())
        engine.on_event(ev)
        calls += ev.type == "tool_call"
    if calls > 0:
        view.append(look())
    return view[:calls]


@dataclass
class RunResult:
    dataset: str
    session_id: str
    outcome: str  # clean | budget | other
    calls: int
    first_flag: int | None  # first call after which the context held a flag
    loops: list[tuple[int, int]] = field(default_factory=list)
    loop_flag: int | None = None  # first flagged call at/after the first loop's start
    loop_covered: int = 0  # calls from each loop's 3rd repeat to its end with a fresh flag
    loop_span: int = 0  # calls from each loop's 3rd repeat to its end


def score(
    dataset: str, sid: str, outcome: str, events: list[TraceEvent], config: EngineConfig
) -> RunResult:
    view = agent_view(events, config)
    flags = [i + 1 for i, f in enumerate(view) if f]
    loops = find_loops(events)
    r = RunResult(dataset, sid, outcome, len(view), flags[0] if flags else None, loops)
    if loops:
        start = loops[0][0]
        r.loop_flag = next((c for c in flags if c >= start), None)
    for first, last in loops:
        span = range(first + 2, last + 1)
        r.loop_span += len(span)
        r.loop_covered += sum(view[c - 1] for c in span if c <= len(view))
    return r


# ------------------------------------------------------------------ data sets


def _sessions(path: Path) -> dict[str, list[TraceEvent]]:
    by_session: dict[str, list[TraceEvent]] = {}
    for ev in read_events(path):
        by_session.setdefault(ev.session_id, []).append(ev)
    return by_session


def _end_meta(events: list[TraceEvent]) -> dict[str, str]:
    for ev in reversed(events):
        if ev.type == "session_end":
            return dict(ev.metadata)
    return {}


def swe_agent(data: Path, config: EngineConfig) -> list[RunResult]:
    out: list[RunResult] = []
    for model in sorted(p for p in (data / "swe-agent").iterdir() if p.is_dir()):
        results = json.loads((model / "results.json").read_text())
        resolved = set(results.get("resolved", ()))
        for path in sorted(model.glob("trajs/*.traj*")):
            iid = path.name.split(".traj")[0]
            for sid, evs in _sessions(path).items():
                status = _end_meta(evs).get("exit_status")
                if status in ("exit_cost", "submitted (exit_cost)"):
                    outcome = "budget"
                elif iid in resolved and status == "submitted":
                    outcome = "clean"
                else:
                    outcome = "other"
                out.append(score(f"swe-agent/{model.name}", sid, outcome, evs, config))
    return out


def mini_swe_agent(data: Path, config: EngineConfig) -> list[RunResult]:
    root = data / "mini-swe-agent"
    resolved = {
        row["instance_id"]
        for row in json.loads((root / "results.json").read_text())["instances"]
        if row.get("resolved")
    }
    out: list[RunResult] = []
    for path in sorted(root.glob("trajs/*.traj*")):
        for sid, evs in _sessions(path).items():
            outcome = "clean" if sid in resolved else "other"
            out.append(score("mini-swe-agent", sid, outcome, evs, config))
    return out


def openhands(data: Path, config: EngineConfig) -> list[RunResult]:
    out: list[RunResult] = []
    for path in sorted((data / "openhands").glob("*.jsonl*")):
        for sid, evs in _sessions(path).items():
            err = _end_meta(evs).get("error") or ""
            outcome = "budget" if "maximum iteration" in err else "other"
            out.append(score("openhands", sid, outcome, evs, config))
    return out


def tau_bench(data: Path, config: EngineConfig) -> list[RunResult]:
    out: list[RunResult] = []
    for path in sorted((data / "tau-bench").glob("*.json*")):
        for sid, evs in _sessions(path).items():
            outcome = "clean" if _end_meta(evs).get("resolved") == "true" else "other"
            out.append(score("tau-bench", sid, outcome, evs, config))
    return out


# ------------------------------------------------------------------- printing


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.1f}%)" if d else "-"


def summarize(runs: list[RunResult]) -> list[tuple[str, str]]:
    """(figure, value) rows for one data set."""
    clean = [r for r in runs if r.outcome == "clean"]
    looping = [r for r in runs if r.loops]
    budget = [r for r in runs if r.outcome == "budget"]
    rows = [("runs", str(len(runs)))]
    fa = sum(r.first_flag is not None for r in clean)
    rows.append(
        ("false alarms: clean runs with any caution/warning (aim <= 1%)", _pct(fa, len(clean)))
    )
    delays = [r.loop_flag - r.loops[0][0] for r in looping if r.loop_flag is not None]
    within = sum(d <= 3 for d in delays)
    rows.append(
        (f"loop recall within 3 calls ({LOOP_LENGTH}+ identical calls)", _pct(within, len(looping)))
    )
    if delays:
        rows.append(
            (
                "loop delay after the loop's first call",
                f"median {statistics.median(delays):g}, max {max(delays)}",
            )
        )
    span = sum(r.loop_span for r in looping)
    covered = sum(r.loop_covered for r in looping)
    full = sum(r.loop_covered == r.loop_span for r in looping)
    rows.append(("in-loop coverage, calls (3rd repeat .. loop end)", _pct(covered, span)))
    rows.append(("looping runs with 100% in-loop coverage", _pct(full, len(looping))))
    flagged = [r for r in budget if r.first_flag is not None]
    ahead = [1 - r.first_flag / r.calls for r in flagged if r.first_flag is not None and r.calls]
    early = sum(a >= 0.7 for a in ahead)
    rows.append(("budget-exhausted runs flagged", _pct(len(flagged), len(budget))))
    rows.append(
        ("budget-exhausted runs flagged with >= 70% of the run ahead", _pct(early, len(budget)))
    )
    if ahead:
        rows.append(
            (
                "share of the run still ahead at the first flag",
                f"median {statistics.median(ahead):.0%}",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--trajdata",
        default=os.environ.get("TRAJDATA_DIR", str(ROOT.parent / "shared" / "trajdata")),
        help="folder with swe-agent/, mini-swe-agent/, openhands/, tau-bench/",
    )
    ap.add_argument("--json", action="store_true", help="also print per-run rows as JSON lines")
    ap.add_argument(
        "--list", action="store_true", help="list false alarms, late loops and uncovered loops"
    )
    args = ap.parse_args(argv)
    data = Path(args.trajdata)
    if not data.is_dir():
        print(f"accuracy_report: no trajectories at {data} (set --trajdata or TRAJDATA_DIR)")
        return 0
    config = EngineConfig()
    readers = {
        "swe-agent": swe_agent,
        "mini-swe-agent": mini_swe_agent,
        "openhands": openhands,
        "tau-bench": tau_bench,
    }
    every: list[RunResult] = []
    for name, reader in readers.items():
        if not (data / name).is_dir():
            print(f"{name}: absent, skipped\n")
            continue
        runs = reader(data, config)
        every.extend(runs)
        groups = [name] if name != "swe-agent" else sorted({r.dataset for r in runs})
        for group in (*groups, *(["swe-agent (all models)"] if len(groups) > 1 else [])):
            sel = [r for r in runs if r.dataset == group or group.startswith(f"{name} (all")]
            print(f"== {group}")
            for label, value in summarize(sel):
                print(f"  {label:<62} {value}")
            print()
    if args.list:
        for r in every:
            if r.outcome == "clean" and r.first_flag is not None:
                print(
                    f"false alarm  {r.dataset} {r.session_id}: "
                    f"first flag after call #{r.first_flag}"
                )
            if r.loops and (r.loop_flag is None or r.loop_flag - r.loops[0][0] > 3):
                print(
                    f"late loop    {r.dataset} {r.session_id}: loops {r.loops}, flag {r.loop_flag}"
                )
            if r.loop_covered < r.loop_span:
                print(
                    f"uncovered    {r.dataset} {r.session_id}: loops {r.loops}, "
                    f"{r.loop_covered}/{r.loop_span} in-loop calls covered"
                )
    if args.json:
        for r in every:
            print(json.dumps(asdict(r), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__: list[str] = ["agent_view", "find_loop_start", "find_loops", "main", "score", "summarize"]
