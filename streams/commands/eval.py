"""Run AgentV's tool_trajectory evaluator over every session of a trajectory file.

The config (YAML or JSON) is one evaluator or ``evaluators: [...]``, as AgentV
writes them:

  type: tool_trajectory
  mode: any_order            # any_order | in_order | exact
  minimums: {search: 3}      # any_order
  # expected: [{tool: fetch}, {tool: save, args: {id: 1}}]   # in_order / exact

Prints each session's score, hits, misses and verdict (pass >= 0.8,
borderline >= 0.6, else fail).  An empty JSON Lines file is an empty trace and
is scored (no calls: 0, fail, the missing tools named), as AgentV scores it.
Exit code: 0 when every session passes or is borderline, 1 when any fails, 2
for a bad config or input.

Examples:
  trajectory eval run.traj.gz --config evals/must-search.yaml
  trajectory eval tau.json.gz --config checks.json --json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.importers import FORMATS

    parser.add_argument("path", metavar="PATH", help="trajectory file (gzip ok)")
    parser.add_argument(
        "--config", required=True, metavar="FILE", help="tool_trajectory config (YAML/JSON)"
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="input format (default: detect from content)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON result per session")


def load_eval_config(path: str | Path) -> Any:
    """The evaluator config file parsed (YAML is a superset of JSON) and validated."""
    import yaml  # type: ignore[import-untyped,unused-ignore]

    from streams.core.tool_trajectory import parse_config
    from streams.errors import ConfigError

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {p}: {exc.strerror or exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("--config", f"{p} is not valid YAML/JSON: {exc}") from exc
    return parse_config(raw)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from streams.commands.summary import is_empty_jsonl
    from streams.core.events import TraceEvent
    from streams.core.tool_trajectory import evaluate_session
    from streams.importers import read_events

    configs = load_eval_config(args.config)
    sessions: dict[str, list[TraceEvent]] = {}
    if is_empty_jsonl(args.path, args.format):
        sessions[""] = []  # an empty trace is scored, as AgentV's evaluator does
    for event in () if "" in sessions else read_events(args.path, args.format):
        sessions.setdefault(event.session_id, []).append(event)
    out = sys.stdout
    failed = 0
    for sid, events in sessions.items():
        result = evaluate_session(sid, events, configs)
        failed += result.verdict == "fail"
        if args.json:
            out.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
            continue
        label = sid or "(empty trace)"
        out.write(f"{label}: score {result.score:.2f}  verdict {result.verdict.upper()}\n")
        for ev in result.evaluators:
            out.write(f"  [{ev.name}] mode {ev.mode}  score {ev.score:.2f}  {ev.verdict}\n")
            for hit in ev.hits:
                out.write(f"    hit   {hit}\n")
            for miss in ev.misses:
                out.write(f"    miss  {miss}\n")
    if not args.json and len(sessions) > 1:
        out.write(f"{len(sessions) - failed}/{len(sessions)} sessions pass or borderline\n")
    return 1 if failed else 0
