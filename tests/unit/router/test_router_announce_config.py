"""Announcement parsing, pending-topic retries, config checks, status line."""

from __future__ import annotations

import pytest

from streams.errors import ConfigError, InvalidEventError
from streams.router.announce import PendingTopics, parse_announcement
from streams.router.config import RouterConfig
from streams.router.stats import RouterStats, format_status


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"s1", b"tp.session.s1"),
        (b"s1", b'{"topic": "tp.session.s1", "session_id": "s1"}'),
        (b"s1", None),
        (None, b"  tp.session.s1\n"),
    ],
)
def test_parse_announcement_forms(key: bytes | None, value: bytes | None) -> None:
    assert parse_announcement(key, value, "tp") == "tp.session.s1"


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (None, None, "control.value"),
        (b"s", b"tp.events", "control.value"),
        (b"s", b"other.session.s", "control.value"),
        (b"s", b'{"topic": 3}', "control.value.topic"),
        (b"s", b"{not json", "control.value"),
        (b"s", b"\xff\xfe", "control.value"),
        (b"\xff", None, "control.key"),
    ],
)
def test_parse_announcement_rejects(key: bytes | None, value: bytes | None, field: str) -> None:
    with pytest.raises(InvalidEventError) as info:
        parse_announcement(key, value, "tp")
    assert info.value.field == field


def test_pending_topics_retry_schedule_and_assignment() -> None:
    p = PendingTopics(retry_ms=100, max_tries=3)
    assert not p.refresh_due(0)
    p.add("a", now_ms=1000)
    assert "a" in p and len(p) == 1
    assert not p.refresh_due(999)
    assert p.refresh_due(1000)  # try 1
    assert not p.refresh_due(1050)  # spaced by retry_ms
    assert p.refresh_due(1100)  # try 2
    assert p.refresh_due(1200)  # try 3: gives up afterwards (regex refresh remains)
    assert len(p) == 0
    p.add("b", 0)
    p.add("c", 0)
    p.assigned({"b", "x"})
    assert "b" not in p and "c" in p


def test_pending_add_is_idempotent() -> None:
    p = PendingTopics(retry_ms=100, max_tries=5)
    p.add("a", 0)
    assert p.refresh_due(0)
    p.add("a", 0)  # re-announcement must not reset the schedule
    assert not p.refresh_due(50)


def test_config_defaults_and_derivation() -> None:
    c = RouterConfig()
    assert c.resolved_group_id("tp") == "tp.router"
    assert c.resolved_transactional_id("tp") == "tp.router.0"
    c2 = RouterConfig(transactional_id="r-7", group_id="g")
    assert c2.resolved_transactional_id("tp") == "r-7"
    assert c2.resolved_group_id("tp") == "g"


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"batch_max_messages": 0}, "batch_max_messages"),
        ({"batch_max_ms": -1}, "batch_max_ms"),
        ({"batch_idle_ms": -1}, "batch_idle_ms"),
        ({"batch_idle_ms": True}, "batch_idle_ms"),
        ({"batch_idle_ms": 2.5}, "batch_idle_ms"),
        ({"metadata_refresh_ms": True}, "metadata_refresh_ms"),
        ({"fetch_min_bytes": 0}, "fetch_min_bytes"),
        ({"fetch_wait_max_ms": 0}, "fetch_wait_max_ms"),
        ({"replication_factor": 0}, "replication_factor"),
        ({"status_interval_s": -1.0}, "status_interval_s"),
        ({"transactional_id": "  "}, "transactional_id"),
    ],
)
def test_config_rejects(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        RouterConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


def test_should_commit_by_size_and_age() -> None:
    c = RouterConfig(batch_max_messages=10, batch_max_ms=100)
    assert not c.should_commit(0, 10_000)  # nothing to commit
    assert not c.should_commit(9, 99)
    assert c.should_commit(10, 0)
    assert c.should_commit(1, 100)


def test_should_close_idle_when_caught_up_and_old_enough() -> None:
    """A caught-up transaction closes at batch_idle_ms, not at the window (batch_max_ms)."""
    c = RouterConfig(batch_max_ms=2000, batch_idle_ms=10)
    assert c.should_close_idle(1, 10, caught_up=True)
    assert c.should_close_idle(5, 1999, caught_up=True)
    assert not c.should_commit(5, 1999)  # the window alone would still wait
    assert not c.should_close_idle(5, 9.9, caught_up=True)  # younger than the minimum age
    assert not c.should_close_idle(5, 1999, caught_up=False)  # more is queued: keep filling
    assert not c.should_close_idle(0, 1999, caught_up=True)  # nothing to commit


def test_should_close_idle_off() -> None:
    assert not RouterConfig(batch_idle_ms=0).should_close_idle(5, 99, caught_up=True)
    # at-least-once holds nothing back: offsets keep their own interval
    alo = RouterConfig(guarantee="at-least-once", batch_idle_ms=10)
    assert not alo.should_close_idle(5, 99, caught_up=True)


def test_format_status_rates() -> None:
    a = RouterStats(routed=100, dead_lettered=1, at_s=10.0)
    b = RouterStats(routed=300, dead_lettered=5, transactions=4, commit_s=0.75, at_s=12.0)
    line = format_status(a, b, assigned_partitions=7)
    assert "routed 300 (+100.0/s)" in line
    assert "dlq 5 (+2.0/s)" in line
    assert "txns 4" in line and "partitions 7" in line
    assert "commit-wait 0.75s" in line
    assert "\n" not in line
    assert "(+0.0/s)" in format_status(b, b, 0)
