"""``trajectory router``'s flags reach the :class:`RouterConfig` it runs with."""

from __future__ import annotations

import argparse

from streams.commands.router import add_arguments, router_config
from streams.router import RouterConfig


def _config(*argv: str) -> RouterConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return router_config(parser.parse_args(list(argv)))


def test_defaults_are_the_config_defaults() -> None:
    got, want = _config(), RouterConfig()
    for name in (
        "batch_max_messages",
        "batch_max_ms",
        "batch_idle_ms",
        "commit_in_background",
        "paused_check_s",
    ):
        assert getattr(got, name) == getattr(want, name), name
    assert got.commit_in_background is False


def test_commit_in_background_and_batch_flags_reach_the_config() -> None:
    got = _config("--commit-in-background", "--batch-size", "500", "--batch-ms", "50")
    assert got.commit_in_background is True
    assert (got.batch_max_messages, got.batch_max_ms) == (500, 50)


def test_batch_idle_flag_reaches_the_config() -> None:
    assert _config("--batch-idle-ms", "0").batch_idle_ms == 0
    assert _config("--batch-idle-ms", "25").batch_idle_ms == 25


def test_sigusr1_prints_every_threads_stack_and_leaves_the_router_running() -> None:
    """A router that routes nothing can be asked where it waits: SIGUSR1 dumps every
    Python thread's stack on stderr, the process runs on (no broker needed: it waits
    for one at 127.0.0.1:1)."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.commands.router", "--bootstrap", "127.0.0.1:1"],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")))  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("127.0.0.1:1" in ln for ln in lines):
            time.sleep(0.1)  # librdkafka's first connection failure: run() has begun
        assert proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGUSR1)
        while time.monotonic() < deadline and not any(
            "most recent call first" in ln for ln in lines
        ):
            time.sleep(0.1)
        dump = "".join(lines)
        assert "most recent call first" in dump, dump[-2000:]
        assert "streams/router" in dump or "streams/commands/router.py" in dump, dump[-2000:]
        time.sleep(0.5)
        assert proc.poll() is None, "SIGUSR1 stopped the router:\n" + dump[-2000:]
    finally:
        proc.kill()
        proc.wait(30)
        reader.join(10)
