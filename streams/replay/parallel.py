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
* workers are started with ``spawn`` (no fork of a process holding librdkafka
  threads); the engine config travels as its file path and is loaded in each
  worker, so the config object never needs to be picklable.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streams.errors import (
    InternalError,
    KafkaIOError,
    ReplayReadError,
    UsageError,
)
from streams.replay.reader import DecodeFailure, PartitionRange, ReadStats
from streams.replay.replay import ReplayResult, SessionReplay
from streams.security import SecurityConfig, current

#: How often (events) a worker publishes its progress count.
_TICK = 4096


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


def split_plan(ranges: Sequence[PartitionRange], jobs: int) -> list[list[PartitionRange]]:
    """Greedy balance by size: largest range to the currently lightest share."""
    shares: list[list[PartitionRange]] = [[] for _ in range(max(1, jobs))]
    loads = [0] * len(shares)
    for r in sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r.topic)):
        i = loads.index(min(loads))
        shares[i].append(r)
        loads[i] += r.size
    return [s for s in shares if s]


def _work(job: _Job, counter: Any, results: Any) -> None:
    try:
        from streams.core.config import EngineConfig, load_config
        from streams.replay.reader import TopicReader, session_key_filter
        from streams.replay.replay import replay_events
        from streams.serde import EventSerde

        config = load_config(job.config_path) if job.config_path else EngineConfig()
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
        n = 0

        def tick() -> None:
            nonlocal n
            n += 1
            if n % _TICK == 0:
                with counter.get_lock():
                    counter.value += _TICK

        result = replay_events(reader, config, on_event=tick)
        with counter.get_lock():
            counter.value += n % _TICK
        results.put(("ok", (result.sessions, result.rejected), reader.stats))
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
) -> tuple[ReplayResult, ReadStats]:
    """Replay ``ranges`` in up to ``jobs`` processes; merged result and read stats.

    ``security``: the workers' credential; None: this process's
    (:func:`streams.security.current`), resolved here and handed to each worker.
    """
    sec = security if security is not None else current()
    shares = split_plan(ranges, jobs)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    results = ctx.Queue()
    procs = []
    began = time.monotonic()
    for share in shares:
        job = _Job(
            bootstrap,
            tuple(share),
            strict,
            tuple(key_ids) if key_ids is not None else None,
            key_glob,
            config_path,
            timeout_s,
            sec,
            check,
        )
        p = ctx.Process(target=_work, args=(job, counter, results), daemon=True)
        p.start()
        procs.append(p)
    merged = ReplayResult(None)
    stats = ReadStats()
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
            sessions: dict[str, SessionReplay] = payload[0]
            merged.rejected.extend(payload[1])
            for sid, sr in sessions.items():
                if sid in merged.sessions:
                    raise UsageError(
                        f"session {sid!r} was read by two replay workers (is it keyed by "
                        "another id on the events topic?)"
                    )
                merged.sessions[sid] = sr
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
    stats.elapsed_s = time.monotonic() - began
    if on_progress is not None:
        on_progress(int(counter.value))
    return merged, stats


__all__ = ["DecodeFailure", "replay_parallel", "split_plan"]
