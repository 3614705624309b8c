"""WorkerConfig: one frozen, validated value instead of create_app's keyword arguments."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from streams.errors import ConfigError
from streams.worker.config import DEFAULT_SESSION_TIMEOUT_S, WorkerConfig


def test_defaults_are_valid_and_normalized() -> None:
    config = WorkerConfig()
    assert config.store == "rocksdb://"
    assert config.session_timeout_s == DEFAULT_SESSION_TIMEOUT_S
    assert WorkerConfig(store="memory").store == "memory://"
    assert WorkerConfig(timer_interval_s=0).timer_interval_s is None


def test_it_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        WorkerConfig().web_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "flag", "hint"),
    [
        ({"store": "redis"}, "--store", "rocksdb or memory"),
        ({"commit_interval_s": 0}, "--commit-interval", "positive number of seconds"),
        ({"commit_interval_s": float("nan")}, "--commit-interval", "positive"),
        ({"engine_flush_interval_s": -1}, "--engine-flush-interval", "seconds >= 0"),
        ({"engine_flush_interval_s": float("nan")}, "--engine-flush-interval", "0: every commit"),
        ({"timer_interval_s": -1}, "--timer-interval", "positive number of seconds"),
        ({"session_timeout_s": 1.0}, "--session-timeout", "6-1800"),
        ({"session_timeout_s": 2000.0}, "--session-timeout", "6-1800"),
        ({"seek_timeout_s": 0}, "--seek-timeout", "above 0 and below 90"),
        ({"seek_timeout_s": 90.0}, "--seek-timeout", "ends recovery silently"),
        ({"seek_timeout_s": float("nan")}, "--seek-timeout", "e.g. 60"),
        ({"max_sessions_in_memory": 0}, "--max-sessions-in-memory", "at least 1"),
        ({"web_port": 70000}, "--web-port", "0-65535"),
        ({"worker_id": ""}, "--worker-id", "stable name"),
        ({"partitions": 0}, "partitions", ">= 1"),
        ({"commit_every": 0}, "commit_every", "at least 1"),
        ({"producer_linger_s": -0.1}, "producer_linger_s", ">= 0"),
    ],
)
def test_a_bad_value_names_its_flag(kwargs: dict[str, object], flag: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkerConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == flag
    assert hint in str(info.value)


def test_replace_validates_again() -> None:
    """The CLI completes the config with dataclasses.replace: still checked."""
    with pytest.raises(ConfigError, match="partitions"):
        dataclasses.replace(WorkerConfig(), partitions=-1)


def test_create_app_takes_settings_and_one_config() -> None:
    from streams.worker.faust_app import create_app

    params = list(inspect.signature(create_app).parameters)
    assert params == ["settings", "config"]
