"""``--jobs`` start method: fork only when no other thread runs (pure parts)."""

from __future__ import annotations

import threading

import pytest

from streams.errors import ConfigError
from streams.replay.parallel import ParallelReplay, single_threaded, start_method


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
