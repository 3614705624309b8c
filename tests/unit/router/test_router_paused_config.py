"""``RouterConfig.paused_check_s``: seconds between looks at paused ended sessions."""

from __future__ import annotations

import pytest

from streams.errors import ConfigError
from streams.router import RouterConfig


def test_default_pauses_ended_sessions_and_zero_turns_it_off() -> None:
    assert RouterConfig().paused_check_s == 2.0
    assert RouterConfig(paused_check_s=0).paused_check_s == 0


@pytest.mark.parametrize("bad", [-1.0, 3601, True, "2"])
def test_a_bad_interval_names_the_setting(bad: object) -> None:
    with pytest.raises(ConfigError, match="paused_check_s"):
        RouterConfig(paused_check_s=bad)  # type: ignore[arg-type]
