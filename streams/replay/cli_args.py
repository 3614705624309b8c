"""Arguments and progress display shared by ``replay``, ``export`` and ``report``.

Kept out of :mod:`streams.commands` so the three commands agree on flag names
and semantics; heavy imports (rich, confluent-kafka) stay inside functions.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

#: Progress is refreshed every this many items: cheap at 100k+ events/s.
PROGRESS_EVERY = 4096


def add_read_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--session``/``--sessions``, ``--source``, ``--from``/``--to``, broker flags."""
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--session", metavar="ID", help="one session id")
    which.add_argument(
        "--sessions",
        metavar="GLOB",
        help="session ids matching this glob (fnmatch, e.g. 'run-*'), from the topic list",
    )
    parser.add_argument(
        "--source",
        choices=("sessions", "events"),
        default="sessions",
        help="read <prefix>.session.<id> topics (default) or the routed <prefix>.events",
    )
    parser.add_argument(
        "--from",
        dest="from_",
        metavar="TIME|OFFSET",
        help="start at this offset, or at this record time (ISO-8601, Kafka record timestamp)",
    )
    parser.add_argument(
        "--to",
        metavar="TIME|OFFSET",
        help="stop after this offset / record time (inclusive); default: the high watermark "
        "when the read starts",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail on the first undecodable record instead of counting and reporting it",
    )
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP)")
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds without data before a read fails (default 30)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )


def reader_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~streams.replay.reader.TopicReader` of TraceEvents the flags describe."""
    from streams.replay.reader import open_event_reader, parse_bound
    from streams.settings import Settings

    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    return open_event_reader(
        settings.bootstrap,
        settings.prefix,
        session=args.session,
        sessions=args.sessions,
        source=args.source,
        start=parse_bound(args.from_, "--from"),
        end=parse_bound(args.to, "--to"),
        strict=args.strict,
        timeout_s=args.timeout,
    )


@contextmanager
def progress_bar(label: str, total: int | None, *, force: bool = False) -> Iterator[Any]:
    """A rich progress bar on stderr (None when stderr is no terminal and not forced)."""
    if not (force or sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True, force_terminal=True if force else None),
    )
    with progress:
        task = progress.add_task(label, total=total, rate="")
        yield _Bar(progress, task)


class _Bar:
    def __init__(self, progress: Any, task: Any) -> None:
        self.progress = progress
        self.task = task
        self.began = time.monotonic()

    def update(self, done: int) -> None:
        dt = time.monotonic() - self.began
        rate = f"{done / dt:,.0f} ev/s" if dt > 0 else ""
        self.progress.update(self.task, completed=done, rate=rate)

    def finish(self, done: int) -> None:
        self.progress.update(self.task, completed=done, total=done)
        self.update(done)


def counted(items: Iterable[T], bar: Any) -> Iterator[T]:
    """Yield ``items``, moving ``bar`` every :data:`PROGRESS_EVERY` items."""
    if bar is None:
        yield from items
        return
    n = 0
    for item in items:
        yield item
        n += 1
        if n % PROGRESS_EVERY == 0:
            bar.update(n)
    bar.finish(n)


def report_failures(reader: Any, command: str, limit: int = 20) -> None:
    """Print the records not replayed (topic/partition/offset and why) on stderr:
    undecodable ones, and ones refused as live ingest refuses them (the router's
    and the worker's checks, which dead-letter them live)."""
    failures = reader.stats.failures
    if not failures:
        return
    print(
        f"trajectory {command}: {len(failures)} record(s) not processed, undecodable or "
        "refused as live ingest refuses them (--strict to fail instead):",
        file=sys.stderr,
    )
    for f in failures[:limit]:
        print(f"  {f.describe()}", file=sys.stderr)
    if len(failures) > limit:
        print(f"  ... and {len(failures) - limit} more", file=sys.stderr)


def throughput_line(verb: str, events: int, elapsed_s: float, extra: str = "") -> str:
    rate = events / elapsed_s if elapsed_s > 0 else float("inf")
    return f"{verb} {events} events in {elapsed_s:.2f} s ({rate:,.0f} events/s){extra}"


__all__ = [
    "PROGRESS_EVERY",
    "add_read_arguments",
    "counted",
    "progress_bar",
    "reader_from_args",
    "report_failures",
    "throughput_line",
]
