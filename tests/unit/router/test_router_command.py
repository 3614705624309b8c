"""The ``trajectory router`` command's arguments (no Kafka: run() is not called)."""

from __future__ import annotations

import argparse

import pytest

from streams.commands import router as cmd


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_leave_settings_to_env() -> None:
    args = parse()
    assert args.bootstrap is None and args.prefix is None and args.partitions is None
    assert args.transactional_id is None
    assert (args.batch_size, args.batch_ms, args.refresh_ms) == (20000, 100, 1000)
    assert args.no_announcements is False


def test_flags() -> None:
    args = parse(
        "--bootstrap", "h:1", "--prefix", "p", "--partitions", "12",
        "--transactional-id", "p.router.3", "--batch-size", "50", "--no-announcements",
    )  # fmt: skip
    assert (args.bootstrap, args.prefix, args.partitions) == ("h:1", "p", 12)
    assert (args.transactional_id, args.batch_size, args.no_announcements) == (
        "p.router.3",
        50,
        True,
    )


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cmd.main(["--help"])
    out = capsys.readouterr().out
    for needle in (
        "<prefix>.events",
        "<prefix>.dlq",
        "dlq.reason",
        "SIGTERM",
        "--transactional-id",
        "Examples:",
    ):
        assert needle in out
