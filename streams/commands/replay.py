"""Replay recorded sessions from Kafka through the detector core, or re-publish them.

Reads <prefix>.session.<id> topics (--session ID, or --sessions GLOB over the
cluster's topic list) or the routed <prefix>.events (--source events), between
--from and --to (an offset, or an ISO time = Kafka record timestamp), up to the
high watermark captured at start, and re-runs the same engine the live worker
runs.  Output (--output): a terminal summary, JSONL (the records of
`trajectory analyze --json`, sessions in sorted order), or an Avro container
file of PatternDetection/AssessmentRecord values (--out PATH).

--compare-live compares the replay with the live pipeline: the outputs
(<prefix>.patterns, <prefix>.assessment-history or .assessments; timer-made
assessments are ignored: they depend on wall time) and the worker's table state
(counters, budgets, minutes and engine state, read from the changelog topics
<prefix>-observer-<table>-changelog, latest value per session) against the same
events applied by the worker's own table code.  A live output that repeats one
already seen for its key with identical content is an allowed repeat (after a
crash, docs/guarantees.md), counted and not a difference.  Differences name the
session, table and field ("sim-3 sessions.last_seq: live 54, replay 503").  The
last line is a parseable summary ("compare-live: sessions=.. state=compared
state_differences=.. output_differences=.. allowed_repeats=..
timer_assessments_ignored=.. dead_lettered=.. undecodable=.. verdict=clean|differences");
exit 0 when clean, 1 on any difference.  The replay applies the router's checks to
session-topic records (the worker's to <prefix>.events); records it cannot use
count as "dead_lettered" when <prefix>.dlq holds them too (live refused them as
well), else as "undecodable", a difference.  With --from/--to, or when no worker changelog
exists for the prefix, the state is not compared ("state=skipped"; a failure with
--require-state).  Run it once the worker has caught up and committed.

--speed X re-publishes the events in event-time order at X times real time
(0 = as fast as possible) into --to-prefix through the publisher SDK, for a
sandbox pipeline with other detector settings.

Undecodable records are reported with topic/partition/offset (--strict: fail).
A progress bar and the final throughput go to stderr.

Examples:
  trajectory replay --session run-42
  trajectory replay --sessions 'swe-*' --output jsonl --out detections.jsonl
  trajectory replay --sessions '*' --source events --from 2026-11-21T00:00:00Z --compare-live
  trajectory replay --sessions 'run-*' --speed 10 --to-prefix sandbox
  trajectory replay --sessions '*' --jobs 4 --output avro --out all.avro
  trajectory replay --sessions 'sim-*' --source events --compare-live --compare-json verdict.json

From Python: streams.replay.compare.compare_live(bootstrap, prefix, sessions=GLOB)
returns a CompareReport (.ok, .summary(), .to_json()).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.replay.cli_args import add_read_arguments

    add_read_arguments(parser)
    parser.add_argument("--config", metavar="FILE", help="engine config, YAML or JSON")
    parser.add_argument(
        "--output",
        choices=("terminal", "jsonl", "avro"),
        default="terminal",
        help="terminal summary (default), JSONL records, or an Avro container file",
    )
    parser.add_argument(
        "--out", metavar="PATH", help="output file (default: stdout; avro needs it)"
    )
    parser.add_argument(
        "--compare-live",
        action="store_true",
        help="compare outputs and the worker's table state (changelogs) with the replay; "
        "exit 1 on a difference (allowed repeats and timer assessments are not)",
    )
    parser.add_argument(
        "--require-state",
        action="store_true",
        help="with --compare-live: a table state that cannot be compared (no worker "
        "changelog for the prefix, --from/--to) is a failure, not a skip",
    )
    parser.add_argument(
        "--compare-json",
        metavar="PATH",
        help="with --compare-live: also write the report as JSON to PATH ('-' = stdout)",
    )
    parser.add_argument(
        "--speed",
        type=float,
        help="instead of analysing, re-publish at this multiple of real time (0 = max)",
    )
    parser.add_argument("--to-prefix", help="topic prefix to re-publish into (with --speed)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="replay in this many processes, partitions split between them (default 1)",
    )


def run(args: argparse.Namespace) -> int:
    from streams.core.config import EngineConfig, load_config
    from streams.errors import ConfigError
    from streams.replay.cli_args import (
        counted,
        progress_bar,
        reader_from_args,
        report_failures,
        throughput_line,
    )
    from streams.settings import Settings

    if args.speed is not None:
        return _republish(args)
    if args.to_prefix:
        raise ConfigError("--to-prefix", "only meaningful with --speed")
    if args.output == "avro" and not args.out:
        raise ConfigError("--out", "--output avro writes a file: give --out PATH")
    config = load_config(args.config) if args.config else EngineConfig()
    reader = reader_from_args(args)
    from streams.replay.replay import replay_events, write_avro, write_jsonl

    if args.jobs < 1:
        raise ConfigError("--jobs", f"{args.jobs}: use 1 or more processes")
    for flag, value in (
        ("--compare-json", args.compare_json),
        ("--require-state", args.require_state),
    ):
        if value and not args.compare_live:
            raise ConfigError(flag, "only meaningful with --compare-live")
    state = None
    state_note = None
    if args.compare_live:
        from streams.replay.state import StateReplay

        if args.from_ is not None or args.to is not None:
            state_note = "--from/--to replay a slice; the tables cover the whole history"
        else:
            state = StateReplay(config)
    began = time.monotonic()
    pool = None
    if args.jobs > 1:
        from streams.replay.parallel import ParallelReplay

        events_source = args.source == "events"
        pool = ParallelReplay(
            reader.bootstrap,
            reader.plan(),
            jobs=args.jobs,
            strict=args.strict,
            key_ids=[args.session] if events_source and args.session else None,
            key_glob=args.sessions if events_source else None,
            config_path=args.config,
            timeout_s=args.timeout,
            check=reader.check,
            compare_state=state is not None,
            keep_records=args.output == "jsonl",
        )
        # before the progress bar starts its thread: the workers can then be forked
        pool.start()
    with progress_bar("replay", reader.total, force=args.progress) as bar:
        if pool is not None:
            # each worker also builds its sessions' tables (one engine run per event)
            result, reader.stats, merged = pool.wait(bar.update if bar is not None else None)
            if state is not None:
                state = merged
            if bar is not None:
                bar.finish(result.events)
        else:
            result = replay_events(
                counted(reader, bar),
                config,
                state=state,
                keep_records=args.output == "jsonl",
                prechecked=reader.prechecked,
            )
    elapsed = time.monotonic() - began
    report_failures(reader, "replay")
    if result.rejected:
        print(
            f"trajectory replay: {len(result.rejected)} event(s) rejected by the engine and "
            "skipped (the worker dead-letters them):",
            file=sys.stderr,
        )
        for sid, seq, reason in result.rejected[:20]:
            print(f"  {sid} seq {seq}: {reason}", file=sys.stderr)
    if args.output == "jsonl":
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                write_jsonl(result, handle)
        else:
            write_jsonl(result, sys.stdout)
    elif args.output == "avro":
        n = write_avro(result, args.out)
        print(f"wrote {n} pattern/assessment records to {args.out}", file=sys.stderr)
    else:
        _terminal(result, args.out)
    print(
        throughput_line(
            "replayed",
            result.events,
            elapsed,
            f" from {len(result.sessions)} session(s)"
            + (
                f", {len(reader.stats.failures)} undecodable or refused"
                if reader.stats.failures
                else ""
            )
            + (f" in {pool.processes} processes ({pool.method})" if pool is not None else ""),
        ),
        file=sys.stderr,
    )
    status = 0
    if args.compare_live:
        from streams.replay.compare import compare_replay

        settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
        report = compare_replay(
            settings.prefix,
            result,
            state,
            bootstrap=settings.bootstrap,
            timeout_s=args.timeout,
            state_note=state_note,
            require_state=args.require_state,
        )
        if reader.stats.failures:
            from streams.replay.compare import read_dead_letters

            report.note_unreplayed(
                reader.stats.failures,
                read_dead_letters(settings.bootstrap, settings.prefix, timeout_s=args.timeout),
            )
        print(report.render())
        if args.compare_json == "-":
            print(report.dumps())
        elif args.compare_json:
            with open(args.compare_json, "w", encoding="utf-8") as handle:
                handle.write(report.dumps() + "\n")
        status = 0 if report.ok else 1
    if reader.stats.failures and status == 0 and not args.compare_live:
        # (with --compare-live the verdict decides: records dead-lettered live too
        # are consistent, the others already made it "differences")
        status = 1
    return status


def _terminal(result: Any, out_path: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    handle = open(out_path, "w", encoding="utf-8") if out_path else None  # noqa: SIM115
    try:
        console = Console(file=handle) if handle else Console()
        table = Table(title="replay")
        for col in ("session", "events", "tool calls", "patterns", "assessments", "final severity"):
            table.add_column(col)
        for s in result.ordered():
            table.add_row(
                s.session_id,
                str(s.events),
                str(s.tool_calls),
                str(len(s.patterns)),
                str(len(s.assessments)),
                s.final_severity or "-",
            )
        console.print(table)
        for s in result.ordered():
            for p in s.patterns:
                console.print(
                    f"  {s.session_id} #{p.call_index} [{p.severity}] {p.pattern_type} "
                    f"(confidence {p.confidence:.0%})",
                    markup=False,
                )
    finally:
        if handle:
            handle.close()


def _republish(args: argparse.Namespace) -> int:
    from streams.errors import ConfigError
    from streams.replay.cli_args import (
        counted,
        progress_bar,
        reader_from_args,
        report_failures,
        throughput_line,
    )
    from streams.replay.republish import republish
    from streams.settings import Settings

    if not args.to_prefix:
        raise ConfigError("--to-prefix", "--speed re-publishes into another prefix: give it")
    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    target = Settings(bootstrap=settings.bootstrap, prefix=args.to_prefix)  # validates it
    if target.prefix == settings.prefix:
        raise ConfigError("--to-prefix", "must differ from --prefix (it would duplicate sessions)")
    reader = reader_from_args(args)
    with progress_bar("read", reader.total, force=args.progress) as bar:
        events = list(counted(reader, bar))
    report_failures(reader, "replay")
    with progress_bar("publish", len(events), force=args.progress) as bar:
        n = [0]

        def tick() -> None:
            n[0] += 1
            if bar is not None and n[0] % 256 == 0:
                bar.update(n[0])

        stats = republish(
            events,
            bootstrap=settings.bootstrap,
            to_prefix=target.prefix,
            speed=args.speed,
            on_event=tick,
        )
        if bar is not None:
            bar.finish(n[0])
    print(
        throughput_line(
            "re-published",
            stats.events,
            stats.elapsed_s,
            f" of {stats.sessions} session(s) to prefix {target.prefix}",
        ),
        file=sys.stderr,
    )
    return 1 if reader.stats.failures else 0
