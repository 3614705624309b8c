"""`trajectory worker` argument checks that must fail before any Kafka or Faust work."""

from __future__ import annotations

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
    from streams.worker.faust_app import create_app

    settings = Settings().with_(bootstrap="127.0.0.1:1", prefix="t")
    create_app(settings, data_dir=tmp_path / "new", worker_id="X", web_enabled=False)
    assert (tmp_path / "new" / "X").is_dir()


def test_create_app_names_a_session_timeout_out_of_range(tmp_path: Path) -> None:
    from streams.errors import ConfigError
    from streams.settings import Settings
    from streams.worker.faust_app import create_app

    settings = Settings().with_(bootstrap="127.0.0.1:1", prefix="t")
    with pytest.raises(ConfigError, match="session_timeout"):
        create_app(settings, data_dir=tmp_path, session_timeout_s=1.0, web_enabled=False)
