"""Watch sessions' live assessments (and fired patterns) as the worker publishes them.

Reads <prefix>.assessments (and <prefix>.patterns with --patterns) through the
AssessmentSubscriber: a live table of the sessions followed (latest severity,
tool call index, trend, patterns seen) and the newest rendered assessment of the
selected session (--select, default: the most recently assessed one).  --plain
prints one line per record instead, for pipes and logs.

Examples:
  trajectory watch                                   # every session, from now on
  trajectory watch --from-beginning                  # each session's latest first
  trajectory watch --session 'ci-*' --min-severity caution
  trajectory watch --tree run-42 --patterns          # run-42 and its sub-agents
  trajectory watch --plain --patterns | grep warning

Counters (delivered, below severity, duplicates suppressed, rate limited ...) are
shown under the table, and on stderr when the watch ends.  Ctrl-C (or SIGTERM)
exits cleanly with status 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass, fields
from typing import Any

SEVERITY_STYLE = {"info": "green", "caution": "yellow", "warning": "bold red"}
TRENDS = ("escalating", "steady", "de-escalating")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")
    parser.add_argument(
        "--session",
        action="append",
        metavar="GLOB",
        help="follow sessions whose id matches this glob (repeatable; a plain id is a glob)",
    )
    parser.add_argument(
        "--tree",
        action="append",
        metavar="PARENT",
        help="follow this session and every sub-agent session it spawned, transitively "
        "(repeatable; parent links come from the records and the SDK's announcements on "
        "<prefix>.control)",
    )
    parser.add_argument(
        "--min-severity",
        choices=("info", "caution", "warning"),
        default="info",
        help="hide records below this severity (default info: everything)",
    )
    parser.add_argument(
        "--patterns", action="store_true", help="also show fired patterns (<prefix>.patterns)"
    )
    parser.add_argument(
        "--pattern-type",
        action="append",
        metavar="TYPE",
        help="only these pattern types, e.g. doom_loop (repeatable; implies --patterns)",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the topics' beginning (default: only records published from now on)",
    )
    parser.add_argument("--plain", action="store_true", help="one line per record, no live view")
    parser.add_argument(
        "--select", metavar="SESSION", help="session whose rendered assessment is shown"
    )
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=1.0,
        help="deterministic fraction of (session, seq) records shown (default 1)",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        help="at most this many records/s are shown; the rest are counted as rate_limited",
    )
    parser.add_argument(
        "--limit", type=int, help="exit after this many records were shown (default: never)"
    )
    parser.add_argument(
        "--duration", type=float, help="exit after this many seconds (default: never)"
    )
    parser.add_argument(
        "--rows", type=int, default=25, help="sessions shown in the live table (default 25)"
    )


# --------------------------------------------------------------------------
# what is shown (pure: unit-testable without Kafka or a terminal)


@dataclass
class SessionRow:
    session_id: str
    severity: str | None = None
    call_index: int = 0
    seq: int = -1
    trigger: str = ""
    trend: str = "steady"
    patterns: int = 0
    last_pattern: str = ""
    parent_session_id: str | None = None
    agent_id: str | None = None
    rendered: str = ""
    updated: int = 0  # arrival order


def wire_trend(assessments: Any) -> str | None:
    """The worker's own trend, when its assessments JSON carries one."""
    if isinstance(assessments, dict):
        trend = assessments.get("trend")
        if trend in TRENDS:
            return str(trend)
    return None


class WatchState:
    """Latest per-session view built from delivered records (arrival order)."""

    def __init__(self) -> None:
        self.rows: dict[str, SessionRow] = {}
        self.counter = 0
        self.most_recent: str | None = None

    def apply(self, record: Any) -> SessionRow:
        from streams.core.assessment import SEVERITIES, severity_trend
        from streams.serde.avro import AssessmentWire

        self.counter += 1
        row = self.rows.get(record.session_id)
        if row is None:
            row = self.rows[record.session_id] = SessionRow(record.session_id)
        row.updated = self.counter
        row.parent_session_id = record.parent_session_id or row.parent_session_id
        row.agent_id = record.agent_id or row.agent_id
        if isinstance(record, AssessmentWire):
            current = record.max_severity or "info"
            trend = wire_trend(record.assessments)
            if trend is None:
                previous = row.severity if row.seq >= 0 else None  # None: first seen
                if current in SEVERITIES and (previous is None or previous in SEVERITIES):
                    trend = severity_trend(previous, current)
                else:
                    trend = "steady"
            row.trend = trend
            row.severity = current
            row.call_index = record.call_index
            row.seq = record.seq
            row.trigger = record.trigger
            row.rendered = record.rendered
            self.most_recent = record.session_id
        else:
            row.patterns += 1
            row.last_pattern = record.pattern_type
            row.call_index = max(row.call_index, record.call_index)
        return row


def plain_line(record: Any, row: SessionRow | None = None) -> str:
    """One line per record (stable, grep-able key=value form)."""
    from streams.serde.avro import AssessmentWire

    def opt(v: object) -> str:
        return "-" if v is None or v == "" else str(v)

    if isinstance(record, AssessmentWire):
        trend = row.trend if row is not None else opt(wire_trend(record.assessments))
        return (
            f"assessment session={record.session_id} seq={record.seq} "
            f"call={record.call_index} severity={opt(record.max_severity)} "
            f"trigger={record.trigger} trend={trend} parent={opt(record.parent_session_id)} "
            f"agent={opt(record.agent_id)}"
        )
    return (
        f"pattern session={record.session_id} seq={record.seq} call={record.call_index} "
        f"type={record.pattern_type} severity={opt(record.severity)} "
        f"confidence={record.confidence:.2f} occurrences={record.occurrences} "
        f"parent={opt(record.parent_session_id)} agent={opt(record.agent_id)}"
    )


def stats_line(stats: Any) -> str:
    return " ".join(f"{f.name}={getattr(stats, f.name)}" for f in fields(stats))


# --------------------------------------------------------------------------


def _render(state: WatchState, args: argparse.Namespace, sub: Any, topics: str) -> Any:
    from rich.console import Group
    from rich.markdown import Markdown
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"sessions on {topics}", expand=True)
    for col in ("session", "parent", "severity", "call", "seq", "trigger", "trend", "patterns"):
        table.add_column(col, no_wrap=col != "session")
    rows = sorted(state.rows.values(), key=lambda r: r.updated, reverse=True)[: args.rows]
    for r in rows:
        sev = r.severity or "-"
        table.add_row(
            r.session_id,
            r.parent_session_id or "",
            Text(sev, style=SEVERITY_STYLE.get(sev, "")),
            str(r.call_index),
            str(r.seq) if r.seq >= 0 else "",
            r.trigger,
            r.trend if r.seq >= 0 else "",
            f"{r.patterns} ({r.last_pattern})" if r.patterns else "",
        )
    selected = args.select or state.most_recent
    row = state.rows.get(selected) if selected else None
    if row is not None and row.rendered:
        body: Any = Markdown(row.rendered)
        title = f"latest assessment of {row.session_id} (call #{row.call_index})"
    elif selected:
        body, title = Text("no assessment yet"), f"{selected}"
    else:
        waiting = "" if sub.ready else " (waiting for the topics to exist)"
        body, title = Text(f"no records yet{waiting}"), "assessment"
    footer = Text(stats_line(sub.stats()), style="dim")
    return Group(table, Panel(body, title=title), footer)


def run(args: argparse.Namespace) -> int:
    from streams.errors import ConfigError
    from streams.sdk.subscriber import AssessmentSubscriber
    from streams.settings import Settings

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit", "must be >= 1")
    if args.rows < 1:
        raise ConfigError("--rows", "must be >= 1")
    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    patterns = bool(args.patterns or args.pattern_type)
    sub = AssessmentSubscriber(
        settings,
        globs=args.session,
        trees=args.tree,
        min_severity=args.min_severity,
        pattern_types=args.pattern_type,
        patterns=patterns,
        start="beginning" if args.from_beginning else "latest",
        sample_rate=args.sample_rate,
        rate_limit=args.rate_limit,
        on_decode_error="count",
    )
    topics = ", ".join(sub.topics)

    # Ctrl-C and SIGTERM set a flag the loop checks after each poll (<= 0.25 s),
    # rather than raising KeyboardInterrupt wherever the main thread happens to be:
    # once in a loaded CI run a Ctrl-C that arrived during the consumer's poll
    # never ended the watch (the loop went on polling for 30 s; not reproduced in
    # 184 tries since).  A flag cannot be lost on the way out.
    stopping: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = None if args.duration is None else time.monotonic() + args.duration
    state = WatchState()
    shown = 0

    def done() -> bool:
        if stopping:
            return True
        if args.limit is not None and shown >= args.limit:
            return True
        return deadline is not None and time.monotonic() >= deadline

    try:
        if args.plain:
            print(f"# watching {topics} on {settings.bootstrap}", file=sys.stderr, flush=True)
            while not done():
                for record in sub.poll(0.2):
                    row = state.apply(record)
                    print(plain_line(record, row), flush=True)
                    shown += 1
                    if done():
                        break
        else:
            from rich.console import Console
            from rich.live import Live

            console = Console()
            with Live(
                _render(state, args, sub, topics), console=console, refresh_per_second=4
            ) as live:
                while not done():
                    batch = sub.poll(0.25)
                    for record in batch:
                        state.apply(record)
                        shown += 1
                    live.update(_render(state, args, sub, topics))
    except KeyboardInterrupt:
        pass  # (a Ctrl-C before the handlers above were installed)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sub.close()
        print(f"# watch ended: {stats_line(sub.stats())}", file=sys.stderr, flush=True)
    return 0


__all__ = ["SessionRow", "WatchState", "add_arguments", "plain_line", "run", "stats_line"]
