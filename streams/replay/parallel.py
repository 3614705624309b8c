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
from streams.replay.replay import ReplayResult, SessionReplay, _young_collections_batched
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
    #: records per ``consume`` (``TopicReader.batch_size``): outputs ship after each
    batch_size: int = 10_000


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


class Outbox:
    """What a worker has not sent yet of the sessions it is replaying.

    Why: a worker used to pickle all its outputs when it was done, and the parent
    unpickled every worker's results one after another at the end, while the
    cores that ran the workers sat idle (~0.1 s of a 2 s replay of 100,000 events).
    Shipping the new outputs after every consumed batch moves that work into the
    run.  Invariant: the chunks :meth:`take` returns, applied in order with
    :func:`merge_chunk`, plus :meth:`final`, rebuild ``sessions`` exactly
    (``tested``): each output is sent once, in its session's order.
    """

    def __init__(self, sessions: dict[str, SessionReplay]) -> None:
        self._sessions = sessions
        #: per session: (records, patterns, assessments) already sent
        self._sent: dict[str, tuple[int, int, int]] = {}

    def take(self) -> list[tuple[Any, ...]]:
        """Packed outputs added since the last call: ``(session id, records,
        pattern tuples, assessment tuples)`` per session that has any."""
        chunk: list[tuple[Any, ...]] = []
        sent = self._sent
        for sid, sr in self._sessions.items():
            r0, p0, a0 = sent.get(sid, (0, 0, 0))
            r1, p1, a1 = len(sr.records), len(sr.patterns), len(sr.assessments)
            if r1 == r0 and p1 == p0 and a1 == a0:
                continue
            chunk.append(
                (
                    sid,
                    sr.records[r0:r1],
                    [_pattern_values(p) for p in sr.patterns[p0:p1]],
                    [_assessment_values(a) for a in sr.assessments[a0:a1]],
                )
            )
            sent[sid] = (r1, p1, a1)
        return chunk

    def final(self) -> tuple[list[tuple[Any, ...]], list[tuple[str, int, int, str | None]]]:
        """The last chunk and every session's ``(id, events, tool calls, final
        severity)``, once the replay is done (sessions without outputs too)."""
        summary = [
            (sid, sr.events, sr.tool_calls, sr.final_severity) for sid, sr in self._sessions.items()
        ]
        return self.take(), summary


def merge_chunk(
    merged: dict[str, SessionReplay],
    owners: dict[str, int],
    worker: int,
    chunk: list[tuple[Any, ...]],
) -> None:
    """Append a worker's chunk (:meth:`Outbox.take`) to the merged sessions.

    ``owners`` maps each session to the worker that sent it: a session sent by two
    workers (possible only if the events topic is keyed by something else than
    the session id) is a :class:`UsageError`, never silently merged.
    """
    for sid, records, patterns, assessments in chunk:
        sr = _owned(merged, owners, worker, sid)
        sr.records.extend(records)
        sr.patterns.extend(PatternRecord(*v) for v in patterns)
        sr.assessments.extend(AssessmentWire(*v) for v in assessments)


def merge_summary(
    merged: dict[str, SessionReplay],
    owners: dict[str, int],
    worker: int,
    summary: list[tuple[str, int, int, str | None]],
) -> None:
    """Set the per-session totals of a finished worker (:meth:`Outbox.final`)."""
    for sid, events, tool_calls, final_severity in summary:
        sr = _owned(merged, owners, worker, sid)
        sr.events, sr.tool_calls, sr.final_severity = events, tool_calls, final_severity


def _owned(
    merged: dict[str, SessionReplay], owners: dict[str, int], worker: int, sid: str
) -> SessionReplay:
    owner = owners.setdefault(sid, worker)
    if owner != worker:
        raise UsageError(
            f"session {sid!r} was read by two replay workers (is it keyed by "
            "another id on the events topic?)"
        )
    sr = merged.get(sid)
    if sr is None:
        sr = merged[sid] = SessionReplay(sid)
    return sr


def _load_config(path: str | None) -> EngineConfig:
    from streams.core.config import load_config

    return load_config(path) if path else EngineConfig()


def _work(
    job: _Job, worker: int, counter: Any, results: Any, config: EngineConfig | None = None
) -> None:
    """One worker's share.  ``config``: the parent's, when forked (then the
    detector modules it imports are already loaded too); None when spawned.

    Puts ``("chunk", worker, outputs)`` after each consumed batch that made
    outputs (:class:`Outbox`), then one ``("ok", worker, (last chunk, summary,
    rejected, tables), stats)`` or ``("error", worker, (kind, text), None)``.
    """
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
            batch_size=job.batch_size,
        )
        result = ReplayResult(None)
        outbox = Outbox(result.sessions)

        def batch_done(records: int) -> None:
            # per consumed batch, not per event: progress, and the outputs so far
            with counter.get_lock():
                counter.value += records
            chunk = outbox.take()
            if chunk:
                results.put(("chunk", worker, chunk, None))

        reader.on_batch = batch_done
        state = StateReplay(config) if job.compare_state else None
        # the reader's ingest check already ran the engine's event check on each event
        prechecked = reader.prechecked
        replay_events(
            reader,
            config,
            state=state,
            keep_records=job.keep_records,
            into=result,
            prechecked=prechecked,
        )
        tables = None if state is None else (state.tables(), state.rejected, state.events)
        last, summary = outbox.final()
        results.put(("ok", worker, (last, summary, result.rejected, tables), reader.stats))
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
        results.put(("error", worker, (kind, f"{type(exc).__name__}: {exc}"), None))


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
        batch_size: int = 10_000,
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
                batch_size,
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
            for worker, job in enumerate(self._jobs):
                # a forked child inherits its arguments (nothing is pickled), so the
                # config object goes along; a spawned one loads it from the path
                config = self._config if forking else None
                args = (job, worker, self._counter, self._results, config)
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
        owners: dict[str, int] = {}
        pending = len(procs)
        # merging allocates the outputs (and keeps them): batch the collector's
        # young collections as a replay does (~0.1 us per event less here)
        with _young_collections_batched():
            try:
                while pending:
                    try:
                        status, worker, payload, part_stats = results.get(timeout=0.2)
                    except queue.Empty:
                        if on_progress is not None:
                            on_progress(int(counter.value))
                        dead = [p for p in procs if p.exitcode not in (None, 0)]
                        if dead and results.empty():
                            raise InternalError(
                                f"replay worker exited with code {dead[0].exitcode} "
                                "before reporting"
                            ) from None
                        continue
                    if status == "chunk":
                        merge_chunk(merged.sessions, owners, worker, payload)
                        continue
                    pending -= 1
                    if status != "ok":
                        errors.append(payload)
                        continue
                    last, summary, rejected, tables = payload
                    merge_chunk(merged.sessions, owners, worker, last)
                    merge_summary(merged.sessions, owners, worker, summary)
                    merged.rejected.extend(rejected)
                    if state is not None and tables is not None:
                        state.absorb(*tables)
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
    "Outbox",
    "ParallelReplay",
    "merge_chunk",
    "merge_summary",
    "pack_sessions",
    "replay_parallel",
    "single_threaded",
    "split_plan",
    "start_method",
    "unpack_sessions",
]
