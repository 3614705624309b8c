"""What budget signal do the SWE-agent runs of ``../shared/trajdata`` carry? (issue 11)

Prints figures, asserts nothing.  The accuracy report's aim for budget-exhausted
runs is a flag with >= 70 % of the run still ahead.  This script asks whether a
deterministic burn-rate (pacing) rule *could* give that flag without flagging
the runs that did not exhaust their budget, and prints the numbers behind the
answer:

* **what the data holds** — the importer turns ``info.model_stats`` into one
  ``budget`` event at the *end* of the run (``tokens_used`` only).  No run
  states its cost limit, and there is no per-step cost or token count; the
  limit shows only as the cost the ``exit_cost`` runs stopped at;
* **how fast the budget goes** — per-step prompt size is estimated from the
  ``history`` (the prompt of step *i* is every message before the *i*-th
  assistant turn; tokens ~ characters / 4), scaled so the run's estimated
  total equals its real ``tokens_sent``; spend at a step is its share of the
  run's real ``instance_cost``.  The share of the budget spent when 30 % of the
  run is done is the most a flag with 70 % still ahead can have seen;
* **the best any spend-based rule can do** — an *oracle* that knows each
  model's limit (the median stop cost of its ``exit_cost`` runs) and flags
  once the spend reaches a fraction *f* of it: for each *f*, the share of
  budget-exhausted runs it flags with >= 70 % still ahead, and the share of the
  runs that ended otherwise (submitted within budget, or crashed) it flags at
  all.  Per-call burn rate grows with the context, so a projection from the
  rate so far cannot beat this oracle by much: it sees less, not more.

Usage::

    python tests/bench/budget_signal.py [--trajdata DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUDGET_STATUSES = ("exit_cost", "submitted (exit_cost)")
FRACTIONS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7)


@dataclass(frozen=True)
class Run:
    model: str
    status: str | None
    cost: float
    spend: tuple[float, ...]  # cumulative estimated cost after each agent step

    @property
    def budget(self) -> bool:
        return self.status in BUDGET_STATUSES


def _load(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content)


def read_runs(data: Path) -> list[Run]:
    runs: list[Run] = []
    for model in sorted(p for p in (data / "swe-agent").iterdir() if p.is_dir()):
        for path in sorted(model.glob("trajs/*.traj*")):
            doc = _load(path)
            stats = doc.get("info", {}).get("model_stats") or {}
            cost = float(stats.get("instance_cost") or 0.0)
            sent = float(stats.get("tokens_sent") or 0.0)
            prompt_chars = 0
            per_step: list[float] = []
            for msg in doc.get("history", ()):
                if msg.get("role") == "assistant":
                    per_step.append(prompt_chars)
                prompt_chars += len(_text(msg.get("content")))
            total = sum(per_step)
            if not per_step or total <= 0 or sent <= 0:
                continue
            acc, spend = 0.0, []
            for chars in per_step:
                acc += chars / total * cost
                spend.append(acc)
            runs.append(Run(model.name, doc["info"].get("exit_status"), cost, tuple(spend)))
    return runs


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"


def report(runs: list[Run]) -> None:
    for model in sorted({r.model for r in runs}):
        sel = [r for r in runs if r.model == model]
        budget = [r for r in sel if r.budget]
        rest = [r for r in sel if not r.budget]
        print(f"== swe-agent/{model}")
        if not budget:
            print("  no budget-exhausted runs\n")
            continue
        limit = statistics.median(r.cost for r in budget)
        steps_b = [len(r.spend) for r in budget]
        steps_r = [len(r.spend) for r in rest]
        print(f"  runs: {len(sel)}; budget-exhausted {len(budget)}, ended otherwise {len(rest)}")
        print(f"  cost limit in the data: none; the exhausted runs stop at ${limit:.2f} (median)")
        print(
            f"  steps, budget-exhausted: median {statistics.median(steps_b):g} "
            f"(min {min(steps_b)}, max {max(steps_b)}); ended otherwise: "
            + (f"median {statistics.median(steps_r):g}" if steps_r else "-")
        )
        at30 = [r.spend[max(0, int(0.3 * len(r.spend)) - 1)] / r.cost for r in budget]
        print(
            "  budget spent when 30% of an exhausted run is done: "
            f"median {statistics.median(at30):.0%} (max {max(at30):.0%})"
        )
        k30 = [max(1, int(0.3 * len(r.spend))) for r in budget]
        reach = sum(len(r.spend) >= statistics.median(k30) for r in rest)
        print(
            f"  step by which a flag must come (70% ahead): median {statistics.median(k30):g}; "
            f"runs that ended otherwise reaching it: {_pct(reach, len(rest))}"
        )
        print("  oracle spend rule (flag at spend >= f x limit): early flags vs other runs flagged")
        for f in FRACTIONS:
            early = 0
            for r in budget:
                first = next((i + 1 for i, s in enumerate(r.spend) if s >= f * limit), None)
                early += first is not None and 1 - first / len(r.spend) >= 0.7
            other = sum(any(s >= f * limit for s in r.spend) for r in rest)
            print(
                f"    f={f:<4g} exhausted runs flagged with >= 70% ahead "
                f"{_pct(early, len(budget)):>14}   runs ended otherwise flagged "
                f"{_pct(other, len(rest)):>14}"
            )
        print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--trajdata",
        default=os.environ.get("TRAJDATA_DIR", str(ROOT.parent / "shared" / "trajdata")),
    )
    args = ap.parse_args(argv)
    data = Path(args.trajdata)
    if not (data / "swe-agent").is_dir():
        print(f"budget_signal: no SWE-agent runs at {data} (set --trajdata or TRAJDATA_DIR)")
        return 0
    report(read_runs(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
