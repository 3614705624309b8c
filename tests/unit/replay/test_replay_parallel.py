"""``--jobs``: start method (fork only when no other thread runs), what travels between
the processes, the replay loop's collector setting (pure parts)."""

from __future__ import annotations

import gc
import pickle
import threading
from typing import Any

import pytest
from replay_sessions import T0, failing_session

from streams.core.config import EngineConfig
from streams.errors import ConfigError, UsageError
from streams.replay import parallel
from streams.replay.parallel import (
    Outbox,
    ParallelReplay,
    merge_chunk,
    merge_summary,
    pack_sessions,
    single_threaded,
    start_method,
    unpack_sessions,
)
from streams.replay.reader import PartitionRange
from streams.replay.replay import REPLAY_GC_THRESHOLD0, ReplayResult, SessionReplay, replay_events


def test_a_running_thread_means_spawn_and_fork_is_refused() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert not single_threaded()
        assert start_method() == "spawn"
        with pytest.raises(ConfigError, match="start_method: fork refused"):
            start_method("fork")
        assert start_method("spawn") == "spawn"
    finally:
        stop.set()
        t.join()


def test_an_unknown_start_method_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="start_method: 'forkserver'"):
        start_method("forkserver")


def test_an_empty_plan_starts_nothing_and_merges_nothing() -> None:
    run = ParallelReplay("127.0.0.1:1", [], jobs=2, start_method="spawn")
    result, stats, state = run.wait()
    assert (result.sessions, stats.records, state, run.processes) == ({}, 0, None, 0)


def test_packed_sessions_unpack_to_equal_sessions() -> None:
    """What a worker puts on the result queue (tuples) is the parent's sessions."""
    evs = failing_session("s2", T0) + failing_session("s1", T0 + 50)
    result = replay_events(evs)
    assert all(s.patterns and s.assessments and s.records for s in result.sessions.values())
    packed = pickle.loads(pickle.dumps(pack_sessions(result.sessions)))
    assert unpack_sessions(packed) == result.sessions


def test_a_replay_batches_young_collections_and_restores_the_threshold() -> None:
    seen: list[tuple[int, ...]] = []
    before = gc.get_threshold()

    def hook() -> None:
        seen.append(gc.get_threshold())

    replay_events(failing_session("s", T0, n=2), on_event=hook)
    assert seen and seen[0][0] >= REPLAY_GC_THRESHOLD0 and gc.isenabled()
    assert gc.get_threshold() == before

    def boom() -> None:
        raise RuntimeError("progress hook failed")

    with pytest.raises(RuntimeError, match="progress hook failed"):
        replay_events(failing_session("s", T0, n=2), on_event=boom)
    assert gc.get_threshold() == before


def test_forked_workers_get_the_parent_config_and_spawned_ones_load_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forked: the config is loaded once, here, and handed to every worker (no
    pickling); spawned: each worker loads it from the path (the config object
    need not be picklable)."""
    started: list[tuple[Any, ...]] = []

    class FakeProcess:
        def __init__(self, target: Any, args: tuple[Any, ...], daemon: bool) -> None:
            started.append(args)

        def start(self) -> None:
            pass

    class FakeContext:
        def Value(self, *_: Any) -> Any:
            return None

        def Queue(self) -> Any:
            return None

        Process = FakeProcess

    monkeypatch.setattr(parallel.mp, "get_context", lambda method: FakeContext())
    plan = [PartitionRange("t", p, 0, 10) for p in range(2)]
    for method, config_given in (("fork", True), ("spawn", False)):
        started.clear()
        run = ParallelReplay("127.0.0.1:1", plan, jobs=2)
        monkeypatch.setattr(parallel, "start_method", lambda requested, m=method: m)
        run.start()
        assert len(started) == 2
        configs = [args[-1] for args in started]
        if config_given:
            assert isinstance(configs[0], EngineConfig) and configs[0] is configs[1]
        else:
            assert configs == [None, None]


@pytest.mark.parametrize("keep_records", [True, False])
@pytest.mark.parametrize("every", [1, 3, 1000])
def test_outputs_shipped_in_chunks_while_replaying_merge_to_the_same_sessions(
    keep_records: bool, every: int
) -> None:
    """A worker ships its new outputs after each batch (here: every ``every``
    events) and its totals at the end; the parent's merge of the chunks is the
    replay's result, each output once and in order, whatever the chunk size."""
    a, b = failing_session("s2", T0), failing_session("s1", T0 + 50)
    evs = [ev for pair in zip(a, b, strict=True) for ev in pair]  # sessions interleave
    expected = replay_events(evs, keep_records=keep_records)
    assert all(s.patterns and s.assessments for s in expected.sessions.values())
    live = ReplayResult(None)
    outbox = Outbox(live.sessions)
    chunks: list[list[tuple[Any, ...]]] = []
    seen = 0

    def hook() -> None:
        nonlocal seen
        seen += 1
        if seen % every == 0:
            chunks.append(pickle.loads(pickle.dumps(outbox.take())))

    replay_events(evs, on_event=hook, keep_records=keep_records, into=live)
    last, summary = pickle.loads(pickle.dumps(outbox.final()))
    assert outbox.take() == []  # everything was sent exactly once
    merged: dict[str, SessionReplay] = {}
    owners: dict[str, int] = {}
    for chunk in chunks:
        merge_chunk(merged, owners, 0, chunk)
    merge_chunk(merged, owners, 0, last)
    merge_summary(merged, owners, 0, summary)
    assert merged == expected.sessions
    if every == 1:
        assert len([c for c in chunks if c]) > 2  # the outputs did travel in pieces


def test_a_session_from_two_workers_is_an_error_not_a_merge() -> None:
    result = replay_events(failing_session("s1", T0))
    chunk, summary = Outbox(result.sessions).final()
    merged: dict[str, SessionReplay] = {}
    owners: dict[str, int] = {}
    merge_chunk(merged, owners, 0, chunk)
    with pytest.raises(UsageError, match="'s1' was read by two replay workers"):
        merge_summary(merged, owners, 1, summary)


def test_replay_into_a_used_result_is_refused() -> None:
    used = replay_events(failing_session("s1", T0, n=2))
    with pytest.raises(ConfigError, match="into: the result to fill must be empty"):
        replay_events(failing_session("s1", T0, n=2), into=used)
