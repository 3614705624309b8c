"""Replay in several processes: the planned partitions are split between workers.

Why: one Python process tops out at the decode + core rate (see docs/replay.md);
sessions are independent (a session lives in one partition of one topic), so
shares of the plan can run in parallel and their per-session results merge
without any ordering question: output is sorted by session id anyway.

Invariants:

* the plan (partition ranges, high watermarks) is resolved once, in the parent,
  so every worker stops at the same offsets a single-process replay would;
* each partition is read by exactly one worker; results are merged by session id
  (a session seen by two workers, which cannot happen for well-keyed topics, is
  an error, not silently merged);
* workers are **forked** when this process has exactly one thread (no librdkafka
  handle is alive then: every handle runs threads of its own, and a fork while
  another thread holds a lock is what makes forking unsafe), else **spawned**.
  A fork starts in milliseconds with every module already imported; a spawned
  interpreter spends ~0.5 s of CPU importing before it reads its first record,
  which at 50,000 events/s is a quarter of a 100,000-event replay.  The output
  does not depend on the start method (tested).  The engine config travels as
  its file path and is loaded in each worker, so the config object never needs
  to be picklable;
* with ``compare_state`` each worker also rebuilds the worker's tables for its
  sessions (:class:`~streams.replay.state.StateReplay`, the same engine run as
  the outputs) and hands back the flushed tables: the parent merges them (keys
  are per session, so two workers never write the same key) instead of reading
  and replaying every event a second time.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from streams.core.config import EngineConfig
from streams.errors import (
    ConfigError,
    InternalError,
    KafkaIOError,
    ReplayReadError,
    UsageError,
)
from streams.replay.reader import DecodeFailure, PartitionRange, ReadStats
from streams.replay.replay import ReplayResult, SessionReplay
from streams.replay.state import StateReplay
from streams.security import SecurityConfig, current
from streams.serde import AssessmentWire, PatternRecord


@dataclass(frozen=True, slots=True)
class _Job:
    bootstrap: str
    ranges: tuple[PartitionRange, ...]
    strict: bool
    key_ids: tuple[str, ...] | None
    key_glob: str | None
    config_path: str | None
    timeout_s: float
    #: carried to the child explicitly: a spawned process does not inherit the
    #: parent's ``streams.security.configure`` (CLI flags), only its environment
    security: SecurityConfig
    #: what live ingest refuses (``streams.replay.reader.IngestCheck``), or None
    check: Any = None
    #: also rebuild the worker's tables (``--compare-live``) and return them
    compare_state: bool = False
    #: build the ``analyze --json`` records (only ``--output jsonl`` needs them)
    keep_records: bool = True


def split_plan(ranges: Sequence[PartitionRange], jobs: int) -> list[list[PartitionRange]]:
    """Greedy balance by size: largest range to the currently lightest share."""
    shares: list[list[PartitionRange]] = [[] for _ in range(max(1, jobs))]
    loads = [0] * len(shares)
    for r in sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r.topic)):
        i = loads.index(min(loads))
        shares[i].append(r)
        loads[i] += r.size
    return [s for s in shares if s]


def single_threaded() -> bool:
    """True when this process runs exactly one thread (Python's and native ones).

    Linux: counted in ``/proc/self/task``; elsewhere False (then workers are
    spawned).  A live librdkafka client always runs threads, so True also means
    no Kafka client is open.
    """
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def start_method(requested: str | None = None) -> str:
    """``fork`` when it is safe (see :func:`single_threaded`), else ``spawn``.

    ``requested`` forces one; ``fork`` is refused while other threads run.
    """
    if requested not in (None, "fork", "spawn"):
        raise ConfigError("start_method", f"{requested!r}: use 'fork', 'spawn' or None")
    safe = "fork" in mp.get_all_start_methods() and single_threaded()
    if requested == "fork" and not safe:
        raise ConfigError(
            "start_method",
            "fork refused: this process runs other threads (a Kafka client, a progress "
            "bar); start the replay workers before them or use 'spawn'",
        )
    if requested is not None:
        return requested
    return "fork" if safe else "spawn"


#: Field order of the wire values as they travel from a worker to the parent.
_PATTERN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PatternRecord))
_ASSESSMENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(AssessmentWire))
_pattern_values = attrgetter(*_PATTERN_FIELDS)
_assessment_values = attrgetter(*_ASSESSMENT_FIELDS)


def pack_sessions(sessions: dict[str, SessionReplay]) -> list[tuple[Any, ...]]:
    """A worker's sessions as plain tuples, for the result queue.

    Why: pickling a slotted frozen dataclass goes through its ``__getstate__`` /
    ``__setstate__`` (one ``fields()`` walk and one ``object.__setattr__`` per
    field); tuples of the field values pickle in half the time on both sides, and
    the parent unpickles every worker's results one after another at the end.
    Invariant: ``unpack_sessions(pack_sessions(s)) == s``.
    """
    return [
        (
            sr.session_id,
            sr.events,
            sr.records,
            [_pattern_values(p) for p in sr.patterns],
            [_assessment_values(a) for a in sr.assessments],
            sr.tool_calls,
            sr.final_severity,
        )
        for sr in sessions.values()
    ]


def unpack_sessions(packed: list[tuple[Any, ...]]) -> dict[str, SessionReplay]:
    """The inverse of :func:`pack_sessions` (positional: same field order)."""
    out: dict[str, SessionReplay] = {}
    for sid, events, records, patterns, assessments, tool_calls, final in packed:
        out[sid] = SessionReplay(
            sid,
            events,
            records,
            [PatternRecord(*v) for v in patterns],
            [AssessmentWire(*v) for v in assessments],
            tool_calls,
            final,
        )
    return out


def _load_config(path: str | None) -> EngineConfig:
    from streams.core.config import load_config

    return load_config(path) if path else EngineConfig()


def _work(job: _Job, counter: Any, results: Any, config: EngineConfig | None = None) -> None:
    """One worker's share.  ``config``: the parent's, when forked (then the
    detector modules it imports are already loaded too); None when spawned."""
    try:
        from streams.replay.reader import TopicReader, session_key_filter
        from streams.replay.replay import replay_events
        from streams.serde import EventSerde

        if config is None:
            config = _load_config(job.config_path)
        key_filter = session_key_filter(job.key_ids, job.key_glob)
        reader = TopicReader(
            job.bootstrap,
            [],
            EventSerde().decode,
            strict=job.strict,
            key_filter=key_filter,
            timeout_s=job.timeout_s,
            ranges=job.ranges,
            security=job.security,
            check=job.check,
        )

        def tick(records: int) -> None:
            # per consumed batch, not per event: the parent's progress bar polls
            with counter.get_lock():
                counter.value += records

        reader.on_batch = tick
        state = StateReplay(config) if job.compare_state else None
        result = replay_events(reader, config, state=state, keep_records=job.keep_records)
        tables = None if state is None else (state.tables(), state.rejected, state.events)
        packed = pack_sessions(result.sessions)
        results.put(("ok", (packed, result.rejected, tables), reader.stats))
    except BaseException as exc:  # reported to the parent, which re-raises
        # the branch of the tree travels too, so the parent raises the same kind
        # (the CLI's exit code depends on it): exceptions are not sent pickled
        kind = (
            "usage"
            if isinstance(exc, UsageError)
            else "io"
            if isinstance(exc, KafkaIOError)
            else ""
        )
        results.put(("error", (kind, f"{type(exc).__name__}: {exc}"), None))


class ParallelReplay:
    """A replay of a resolved plan in up to ``jobs`` processes.

    :meth:`start` launches the workers, :meth:`wait` merges their results.  They
    are two steps so a caller starts the workers *before* anything that runs a
    thread (a progress bar): then they can be forked (see :func:`start_method`).
    """

    def __init__(
        self,
        bootstrap: str,
        ranges: Sequence[PartitionRange],
        *,
        jobs: int,
        strict: bool = False,
        key_ids: Sequence[str] | None = None,
        key_glob: str | None = None,
        config_path: str | None = None,
        timeout_s: float = 30.0,
        security: SecurityConfig | None = None,
        check: Any = None,
        compare_state: bool = False,
        start_method: str | None = None,
        keep_records: bool = True,
    ) -> None:
        self.shares = split_plan(ranges, jobs)
        sec = security if security is not None else current()
        self._jobs = [
            _Job(
                bootstrap,
                tuple(share),
                strict,
                tuple(key_ids) if key_ids is not None else None,
                key_glob,
                config_path,
                timeout_s,
                sec,
                check,
                compare_state,
                keep_records,
            )
            for share in self.shares
        ]
        self.compare_state = compare_state
        self.config_path = config_path
        self._requested = start_method
        #: the start method used (``fork`` or ``spawn``), known after :meth:`start`
        self.method: str | None = None
        self._procs: list[Any] = []
        self._began = 0.0
        #: the engine config, loaded in this process when the workers are forked
        self._config: EngineConfig | None = None

    @property
    def processes(self) -> int:
        return len(self._jobs)

    def start(self) -> None:
        self.method = start_method(self._requested)
        ctx: Any = mp.get_context(self.method)  # fork or spawn: both have Process
        self._counter = ctx.Value("q", 0)
        self._results = ctx.Queue()
        self._began = time.monotonic()
        forking = self.method == "fork"
        if forking and self._jobs:
            # loaded once here (importing the detector modules with it), inherited
            # by every forked worker instead of being loaded by each
            self._config = _load_config(self.config_path)
            # a forked worker's collector would walk (and, touching refcounts, copy)
            # every object it inherited: freeze them out of its collections
            gc.freeze()
        try:
            for job in self._jobs:
                # a forked child inherits its arguments (nothing is pickled), so the
                # config object goes along; a spawned one loads it from the path
                args = (job, self._counter, self._results, self._config if forking else None)
                p = ctx.Process(target=_work, args=args, daemon=True)
                p.start()
                self._procs.append(p)
        finally:
            if forking:
                gc.unfreeze()

    def wait(
        self, on_progress: Callable[[int], None] | None = None
    ) -> tuple[ReplayResult, ReadStats, StateReplay | None]:
        """Merged result, read stats and (with ``compare_state``) the merged tables."""
        if self.method is None:
            self.start()
        procs, results, counter = self._procs, self._results, self._counter
        merged = ReplayResult(None)
        stats = ReadStats()
        state: StateReplay | None = None
        if self.compare_state:
            state = StateReplay(self._config or _load_config(self.config_path))
        errors: list[tuple[str, str]] = []
        pending = len(procs)
        try:
            while pending:
                try:
                    status, payload, part_stats = results.get(timeout=0.2)
                except queue.Empty:
                    if on_progress is not None:
                        on_progress(int(counter.value))
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead and results.empty():
                        raise InternalError(
                            f"replay worker exited with code {dead[0].exitcode} before reporting"
                        ) from None
                    continue
                pending -= 1
                if status != "ok":
                    errors.append(payload)
                    continue
                sessions = unpack_sessions(payload[0])
                merged.rejected.extend(payload[1])
                for sid, sr in sessions.items():
                    if sid in merged.sessions:
                        raise UsageError(
                            f"session {sid!r} was read by two replay workers (is it keyed by "
                            "another id on the events topic?)"
                        )
                    merged.sessions[sid] = sr
                if state is not None and payload[2] is not None:
                    state.absorb(*payload[2])
                stats.records += part_stats.records
                stats.decoded += part_stats.decoded
                stats.bytes += part_stats.bytes
                stats.failures.extend(part_stats.failures)
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
        if errors:
            message = "parallel replay failed: " + "; ".join(text for _, text in errors)
            kinds = {kind for kind, _ in errors}
            if "io" in kinds:  # Kafka failed in some job: retrying may help
                raise ReplayReadError(message, retriable=True)
            if kinds == {"usage"}:
                raise UsageError(message)
            raise InternalError(message)
        stats.failures.sort(key=lambda f: (f.topic, f.partition, f.offset))
        merged.rejected.sort()
        if state is not None:
            state.rejected.sort()
        stats.elapsed_s = time.monotonic() - self._began
        if on_progress is not None:
            on_progress(int(counter.value))
        return merged, stats, state


def replay_parallel(
    bootstrap: str,
    ranges: Sequence[PartitionRange],
    *,
    jobs: int,
    strict: bool = False,
    key_ids: Sequence[str] | None = None,
    key_glob: str | None = None,
    config_path: str | None = None,
    timeout_s: float = 30.0,
    on_progress: Callable[[int], None] | None = None,
    security: SecurityConfig | None = None,
    check: Any = None,
    start_method: str | None = None,
) -> tuple[ReplayResult, ReadStats]:
    """Replay ``ranges`` in up to ``jobs`` processes; merged result and read stats.

    ``security``: the workers' credential; None: this process's
    (:func:`streams.security.current`), resolved here and handed to each worker.
    ``start_method``: see :func:`start_method` (None: fork when safe).
    """
    run = ParallelReplay(
        bootstrap,
        ranges,
        jobs=jobs,
        strict=strict,
        key_ids=key_ids,
        key_glob=key_glob,
        config_path=config_path,
        timeout_s=timeout_s,
        security=security,
        check=check,
        start_method=start_method,
    )
    run.start()
    result, stats, _ = run.wait(on_progress)
    return result, stats


__all__ = [
    "DecodeFailure",
    "ParallelReplay",
    "pack_sessions",
    "replay_parallel",
    "single_threaded",
    "split_plan",
    "start_method",
    "unpack_sessions",
]
