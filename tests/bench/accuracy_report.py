"""Accuracy of the default detectors on real trajectories (prints a table; no assertions).

What it measures, over ``../shared/trajdata`` (or ``$TRAJDATA_DIR``), with the
default :class:`~streams.core.config.EngineConfig` run offline exactly as the
worker runs it (:func:`streams.importers.offline.analyze_events`):

* SWE-agent runs that **loop**: the same action (tool and arguments, exactly) five
  or more times in a row.  The loop starts at the first of those calls.  A run is
  *flagged* by the first pattern detection of caution or warning severity at or
  after the loop start, and *warned* by the first warning assessment; the table
  gives how many runs are flagged/warned and the delay in tool calls after the
  loop's start (aim: every looping run flagged within 3 steps).
* SWE-agent runs that ended in ``exit_cost`` (the harness stopped them at their
  cost budget; ``submitted (exit_cost)`` counted apart): how many got a warning.
* Resolved mini-swe-agent runs (``results.json``): how many got a warning
  assessment at all -- a false alarm on a run that went well (aim: <= 5 %).

Usage::

    python tests/bench/accuracy_report.py [--trajdata DIR] [--json]

Defaults are the shipped ones: no threshold here is tuned per file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from streams.core.config import EngineConfig  # noqa: E402
from streams.core.events import TraceEvent  # noqa: E402
from streams.importers import read_events  # noqa: E402
from streams.importers.offline import analyze_events  # noqa: E402

LOOP_LENGTH = 5
FLAG_SEVERITIES = ("caution", "warning")


def find_loop_start(events: Iterable[TraceEvent], length: int = LOOP_LENGTH) -> int | None:
    """1-based call index of the first call of the first run of ``length`` identical calls."""
    prev: tuple[str | None, str] | None = None
    run_start = 0
    run = 0
    index = 0
    for ev in events:
        if ev.type != "tool_call":
            continue
        index += 1
        action = (ev.tool_name, json.dumps(ev.input, sort_keys=True))
        if action == prev:
            run += 1
        else:
            prev, run, run_start = action, 1, index
        if run >= length:
            return run_start
    return None


@dataclass
class RunResult:
    path: str
    session_id: str
    exit_status: str | None
    loop_start: int | None
    first_flag: int | None  # call index of the first caution/warning pattern at/after loop start
    first_warning: int | None  # call index of the first warning assessment (anywhere)
    warning_after_loop: int | None  # ... at/after the loop start
    patterns: dict[str, int] = field(default_factory=dict)


def analyze_run(path: Path, config: EngineConfig) -> list[RunResult]:
    events = list(read_events(path))
    by_session: dict[str, list[TraceEvent]] = {}
    for ev in events:
        by_session.setdefault(ev.session_id, []).append(ev)
    results = []
    for sid, evs in by_session.items():
        loop_start = find_loop_start(evs)
        exit_status = None
        for ev in evs:
            if ev.type == "session_end":
                exit_status = ev.metadata.get("exit_status")
        first_flag = first_warning = warning_after = None
        patterns: dict[str, int] = {}
        for rec in analyze_events(evs, config):
            ci = rec["call_index"]
            if rec["kind"] == "pattern":
                patterns[rec["pattern_type"]] = patterns.get(rec["pattern_type"], 0) + 1
                if (
                    rec["severity"] in FLAG_SEVERITIES
                    and loop_start is not None
                    and ci >= loop_start
                    and first_flag is None
                ):
                    first_flag = ci
            elif rec["severity"] == "warning":
                if first_warning is None:
                    first_warning = ci
                if loop_start is not None and ci >= loop_start and warning_after is None:
                    warning_after = ci
        results.append(
            RunResult(
                str(path),
                sid,
                exit_status,
                loop_start,
                first_flag,
                first_warning,
                warning_after,
                patterns,
            )
        )
    return results


def _delays(results: list[RunResult], attr: str) -> list[int]:
    out = []
    for r in results:
        v = getattr(r, attr)
        if v is not None and r.loop_start is not None:
            out.append(v - r.loop_start)
    return out


def _fmt_delays(d: list[int]) -> str:
    if not d:
        return "-"
    return f"median {statistics.median(d):g}, max {max(d)}, <=3: {sum(x <= 3 for x in d)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--trajdata",
        default=os.environ.get("TRAJDATA_DIR", str(ROOT.parent / "shared" / "trajdata")),
        help="folder with swe-agent/ and mini-swe-agent/ (default ../shared/trajdata)",
    )
    ap.add_argument("--json", action="store_true", help="also print per-run rows as JSON lines")
    args = ap.parse_args(argv)
    data = Path(args.trajdata)
    if not (data / "swe-agent").is_dir() or not (data / "mini-swe-agent").is_dir():
        print(f"accuracy_report: no trajectories at {data} (set --trajdata or TRAJDATA_DIR)")
        return 0
    config = EngineConfig()

    swe: list[RunResult] = []
    for path in sorted(data.glob("swe-agent/*/trajs/*.traj*")):
        swe.extend(analyze_run(path, config))
    resolved_ids = {
        row["instance_id"]
        for row in json.loads((data / "mini-swe-agent" / "results.json").read_text())["instances"]
        if row.get("resolved")
    }
    mini_resolved: list[RunResult] = []
    mini_other: list[RunResult] = []
    for path in sorted(data.glob("mini-swe-agent/trajs/*.traj*")):
        for r in analyze_run(path, config):
            (mini_resolved if r.session_id in resolved_ids else mini_other).append(r)

    looping = [r for r in swe if r.loop_start is not None]
    exit_cost = [r for r in swe if r.exit_status == "exit_cost"]
    sub_cost = [r for r in swe if r.exit_status == "submitted (exit_cost)"]
    submitted = [r for r in swe if r.exit_status == "submitted"]

    def frac(n: int, d: int) -> str:
        return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"

    rows = [
        (
            f"SWE-agent runs looping ({LOOP_LENGTH}+ identical calls in a row)",
            frac(sum(r.first_flag is not None for r in looping), len(looping)),
            _fmt_delays(_delays(looping, "first_flag")),
            frac(sum(r.warning_after_loop is not None for r in looping), len(looping)),
            _fmt_delays(_delays(looping, "warning_after_loop")),
        ),
        (
            "SWE-agent runs ending in exit_cost",
            "",
            "",
            frac(sum(r.first_warning is not None for r in exit_cost), len(exit_cost)),
            "",
        ),
        (
            "SWE-agent runs ending in submitted (exit_cost)",
            "",
            "",
            frac(sum(r.first_warning is not None for r in sub_cost), len(sub_cost)),
            "",
        ),
        (
            "SWE-agent runs submitted (no cost stop)",
            "",
            "",
            frac(sum(r.first_warning is not None for r in submitted), len(submitted)),
            "",
        ),
        (
            "mini-swe-agent runs resolved (false alarms)",
            "",
            "",
            frac(sum(r.first_warning is not None for r in mini_resolved), len(mini_resolved)),
            "",
        ),
        (
            "mini-swe-agent runs not resolved",
            "",
            "",
            frac(sum(r.first_warning is not None for r in mini_other), len(mini_other)),
            "",
        ),
    ]
    headers = (
        "runs",
        "flagged (pattern >= caution)",
        "delay after loop start (calls)",
        "warning assessment",
        "warning delay (calls)",
    )
    widths = [max(len(str(row[i])) for row in (*rows, headers)) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    late = [r for r in looping if r.first_flag is None or r.first_flag - (r.loop_start or 0) > 3]
    print()
    print(f"looping runs not flagged within 3 calls: {len(late)}")
    for r in late:
        print(f"  {r.session_id}: loop starts at call #{r.loop_start}, flagged at {r.first_flag}")
    fa = [r for r in mini_resolved if r.first_warning is not None]
    print(f"resolved mini-swe-agent runs with a warning: {len(fa)}")
    for r in fa:
        print(f"  {r.session_id}: first warning at call #{r.first_warning}; patterns {r.patterns}")
    if args.json:
        for r in (*swe, *mini_resolved, *mini_other):
            print(json.dumps(r.__dict__, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__: list[str] = ["analyze_run", "find_loop_start", "main"]
