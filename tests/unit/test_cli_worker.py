"""`trajectory worker` argument checks that must fail before any Kafka or Faust work."""

from __future__ import annotations

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
