"""`trajectory worker` argument checks that must fail before any Kafka or Faust work."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streams import cli


@pytest.mark.parametrize(
    "argv",
    [["worker", "--commit-interval", "0"], ["worker", "--timer-interval", "-1"]],
)
def test_worker_rejects_bad_intervals_before_touching_kafka(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # an unreachable bootstrap: the check must come first, or this would hang on Kafka
    code = cli.main([*argv, "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err
    assert argv[1] in err and "positive number of seconds" in err


def test_worker_help_teaches_the_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["worker", "--help"])
    out = capsys.readouterr().out
    assert "--commit-interval" in out and "--timer-interval" in out


@pytest.mark.parametrize("value", ["5", "2000"])
def test_worker_rejects_a_session_timeout_the_broker_refuses(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["worker", "--session-timeout", value, "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--session-timeout" in err and "6-1800" in err


def test_create_app_creates_a_new_data_dir_under_the_worker_id(tmp_path: Path) -> None:
    """Issue #15: ``--worker-id X --data-dir NEW`` failed with FileNotFoundError."""
    from streams.settings import Settings
    from streams.worker.config import WorkerConfig
    from streams.worker.faust_app import create_app

    settings = Settings().with_(bootstrap="127.0.0.1:1", prefix="t")
    create_app(settings, WorkerConfig(data_dir=tmp_path / "new", worker_id="X", web_enabled=False))
    assert (tmp_path / "new" / "X").is_dir()


def test_the_worker_flags_become_its_config() -> None:
    from streams.commands.worker import add_arguments, worker_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = "--store memory --worker-id w1 --session-timeout 30 --no-web --timer-interval 0"
    args = parser.parse_args([*argv.split(), "--commit-interval", "2.5"])
    config = worker_config(args)
    assert (config.store, config.worker_id, config.group_instance_id) == ("memory://", "w1", "w1")
    assert (config.session_timeout_s, config.commit_interval_s) == (30.0, 2.5)
    assert (config.timer_interval_s, config.max_sessions_in_memory) == (None, 10_000)
    assert (config.web_enabled, config.with_engine) == (False, True)


def test_worker_rejects_an_empty_worker_id(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["worker", "--worker-id", " ", "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    assert "--worker-id" in capsys.readouterr().err


def test_worker_help_names_the_exit_code_a_stop_timeout_really_ends_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the help said 70 while the watchdog exits with EXIT_STOP_TIMEOUT (3)
    from streams.errors import EXIT_STOP_TIMEOUT
    from streams.worker.shutdown import STOP_TIMEOUT_EXIT_CODE

    assert STOP_TIMEOUT_EXIT_CODE == EXIT_STOP_TIMEOUT
    with pytest.raises(SystemExit):
        cli.main(["worker", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"exit code {EXIT_STOP_TIMEOUT} " in out
    assert f"exit code {EXIT_STOP_TIMEOUT}." in out  # the description's paragraph
    assert "exit code 70" not in out


@pytest.mark.parametrize("value", ["0", "90", "120"])
def test_worker_rejects_a_seek_timeout_faust_would_outlast(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["worker", "--seek-timeout", value, "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--seek-timeout" in err and "below 90" in err


def test_worker_help_names_the_exit_code_a_seek_timeout_ends_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from streams.commands.worker import add_arguments, worker_config
    from streams.errors import EXIT_IO

    with pytest.raises(SystemExit):
        cli.main(["worker", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"stops the worker with exit code {EXIT_IO} " in out
    assert f"non-zero: {EXIT_IO} when Kafka failed it" in out
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert worker_config(parser.parse_args(["--seek-timeout", "30"])).seek_timeout_s == 30.0
    assert worker_config(parser.parse_args([])).seek_timeout_s == 60.0
