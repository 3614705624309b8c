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
