"""Publish recorded trajectory files as live sessions, through the publisher SDK.

Every session in every file (any format `trajectory analyze` reads: JSONL, AgentV,
SWE-agent, mini-swe-agent, OpenHands, tau-bench/OpenAI chat, OTLP) becomes a live
session on <prefix>.session.<id>, announced on <prefix>.control, exactly as an
agent using the SDK would publish it.  All sessions start together and are
interleaved on one timeline: each event is sent when its offset from its
session's first event, divided by --speed, has elapsed (--speed 0: as fast as
possible, still in that interleaved order).

Event time (--time): "live" (default) stamps events with the time they are sent,
so the worker's timers and budget deadlines behave as for a live agent (budget
deadlines are moved by the same offset, scaled by --speed); "original" keeps the
file's timestamps.  The file's session_start/session_end are folded into the
SDK's own (their metadata -- task, observer_profile, outcome -- is kept); seq is
renumbered from 0 by the SDK.

Examples:
  trajectory publish run.jsonl                          # real time
  trajectory publish ../shared/trajdata/swe-agent/gpt-4o/trajs/*.traj.gz --speed 0
  trajectory publish tau.json.gz --speed 20 --session-prefix demo-
  trajectory publish run.jsonl --time original --prefix test
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from streams.errors import InvalidEventError

if TYPE_CHECKING:
    from streams.core.events import TraceEvent
    from streams.sdk.publisher import Session


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trajectory files (gzip is fine)")
    parser.add_argument(
        "--format",
        default="auto",
        help="input format (default auto: detected from the content); one of the importers' "
        "formats, e.g. jsonl, swe-agent, mini-swe-agent, openhands, openai-chat, otlp, agentv",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="time scale: 1 = recorded pace, 10 = ten times faster, 0 = as fast as possible "
        "(default 1)",
    )
    parser.add_argument(
        "--session-prefix",
        default="",
        help="prepended to every session id (e.g. 'demo-'); the result must stay within "
        "[A-Za-z0-9._-]{1,200}",
    )
    parser.add_argument(
        "--time",
        choices=("live", "original"),
        default="live",
        help="event time of the published events: send time (live, default) or the file's",
    )
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")
    parser.add_argument(
        "--privacy",
        choices=("full", "summary"),
        help="summary: send only abbreviated params summaries, no tool input/output "
        "(default: $TRAJECTORY_PRIVACY or full)",
    )
    parser.add_argument(
        "--max-payload-bytes",
        type=int,
        help="cap for each tool input/output JSON; larger ones are truncated to a summary "
        "(default: $TRAJECTORY_MAX_PAYLOAD_BYTES or 64 KiB)",
    )
    parser.add_argument(
        "--schema-registry-url",
        help="use the Confluent wire format with this schema registry "
        "(default: $TRAJECTORY_SCHEMA_REGISTRY_URL; none = Avro single-object encoding)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the final summary line")


@dataclass
class _Run:
    """One file session being replayed: its events and their timeline offsets."""

    source: str
    session_id: str
    events: list[TraceEvent] = field(default_factory=list)

    @property
    def first_ms(self) -> int:
        return self.events[0].timestamp_ms


def _read(path: str, fmt: str) -> Iterator[TraceEvent]:
    try:
        from streams.importers import read_events
    except ImportError:  # importers lane absent: our own JSONL still works
        from streams.core.jsonl import read_jsonl

        with open(path, encoding="utf-8") as handle:
            yield from read_jsonl(handle, source=path)
        return
    yield from read_events(path, fmt)


def load_runs(paths: Iterable[str], fmt: str, session_prefix: str) -> list[_Run]:
    """Group every file's events by session (file order kept; ids must be unique)."""
    from streams.settings import check_session_id

    runs: dict[str, _Run] = {}
    for path in paths:
        for ev in _read(path, fmt):
            sid = check_session_id(session_prefix + ev.session_id)
            run = runs.get(sid)
            if run is None:
                run = runs[sid] = _Run(path, sid)
            elif run.source != path:
                raise InvalidEventError(
                    "session_id",
                    f"session {sid!r} appears in both {run.source} and {path}; use "
                    "--session-prefix per file set, or publish them separately",
                )
            run.events.append(ev)
    return [r for r in runs.values() if r.events]


def schedule(runs: list[_Run]) -> Iterator[tuple[int, _Run, int]]:
    """``(offset_ms, run, index)`` of every event, merged by offset from its run's start.

    Offsets are clamped to be non-decreasing within a run (some formats carry
    out-of-order or synthetic times); ties keep run order, then file order.
    """
    heap: list[tuple[int, int, int]] = []
    offsets: list[list[int]] = []
    for r_idx, run in enumerate(runs):
        out: list[int] = []
        last = 0
        for ev in run.events:
            last = max(last, ev.timestamp_ms - run.first_ms)
            out.append(last)
        offsets.append(out)
        heapq.heappush(heap, (out[0], r_idx, 0))
    while heap:
        off, r_idx, i = heapq.heappop(heap)
        yield off, runs[r_idx], i
        if i + 1 < len(runs[r_idx].events):
            heapq.heappush(heap, (offsets[r_idx][i + 1], r_idx, i + 1))


def run(args: argparse.Namespace) -> int:
    from streams.sdk.publisher import Publisher, now_ms
    from streams.settings import Settings

    if args.speed < 0:
        raise InvalidEventError("--speed", f"{args.speed}: use 0 (as fast as possible) or > 0")
    settings = Settings().with_(
        bootstrap=args.bootstrap,
        prefix=args.prefix,
        privacy=args.privacy,
        max_payload_bytes=args.max_payload_bytes,
        schema_registry_url=args.schema_registry_url,
    )
    runs = load_runs(args.paths, args.format, args.session_prefix)
    if not runs:
        print("trajectory publish: no events in the given files", file=sys.stderr)
        return 1
    live = args.time == "live"
    speed = float(args.speed)
    sessions: dict[str, Session] = {}
    remaining = {run_.session_id: len(run_.events) for run_ in runs}
    sent = 0
    started_wall = time.monotonic()
    start_ms = now_ms()  # both reset once the topics exist (below)

    def stamp(ev: TraceEvent, run_: _Run, offset: int) -> TraceEvent:
        """Move the event (and a budget deadline) onto the chosen timeline."""
        if not live:
            return ev
        scaled = start_ms + (int(offset / speed) if speed > 0 else 0)
        budget = ev.budget
        if budget is not None and budget.deadline_ms is not None:
            rel = budget.deadline_ms - run_.first_ms
            moved = start_ms + (int(rel / speed) if speed > 0 else rel)
            budget = replace(budget, deadline_ms=moved)
        return replace(ev, timestamp_ms=max(scaled, now_ms()), budget=budget)

    with Publisher(settings) as pub:
        pub.ensure_session_topics(run_.session_id for run_ in runs)  # one admin round trip
        started_wall = time.monotonic()
        start_ms = now_ms()
        try:
            for offset, run_, index in schedule(runs):
                if speed > 0:
                    delay = started_wall + offset / 1000.0 / speed - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                ev = stamp(run_.events[index], run_, offset)
                sid = run_.session_id
                session = sessions.get(sid)
                if session is None:
                    meta = dict(ev.metadata) if ev.type == "session_start" else {}
                    session = pub.session(
                        sid,
                        agent_id=ev.agent_id,
                        parent_session_id=_parent(ev, args.session_prefix),
                        metadata=meta,
                        timestamp_ms=ev.timestamp_ms,
                        flush_on_exit=False,
                    )
                    session.start()
                    sessions[sid] = session
                    sent += 1
                if ev.type == "session_end":
                    session.end(
                        metadata=dict(ev.metadata),
                        error_message=ev.error_message,
                        timestamp_ms=ev.timestamp_ms,
                    )
                    sent += 1
                elif ev.type != "session_start":
                    session.emit(ev)
                    sent += 1
                remaining[sid] -= 1
                if remaining[sid] == 0:
                    if ev.type != "session_end":
                        session.end(timestamp_ms=None if live else ev.timestamp_ms)
                        sent += 1
                    if not args.quiet:
                        print(
                            f"published {sid}: {session.next_seq} events -> {session.topic}",
                            flush=True,
                        )
        except BaseException:
            # End what was opened so consumers see a closed session, then re-raise.
            for session in sessions.values():
                try:
                    session.end(metadata={"outcome": "publish_interrupted"})
                except Exception as exc:  # the original error matters more
                    print(
                        f"trajectory publish: could not end {session.session_id}: {exc}",
                        file=sys.stderr,
                    )
            raise
    elapsed = time.monotonic() - started_wall
    rate = sent / elapsed if elapsed > 0 else float("inf")
    print(
        f"published {len(runs)} session(s), {sent} events in {elapsed:.2f}s "
        f"({rate:.0f} events/s) to {settings.bootstrap} prefix {settings.prefix}"
    )
    return 0


def _parent(ev: TraceEvent, prefix: str) -> str | None:
    return None if ev.parent_session_id is None else prefix + ev.parent_session_id
