"""The router's own metadata refresh (``Router._refresh_metadata``).

librdkafka re-matches the subscription regex on every full metadata response.
The router makes that request itself, every ``metadata_refresh_ms`` with its
discovery check and at once for an announcement; librdkafka's own periodic
refresh is only a backstop.  An announced topic leaves the pending ones as soon
as a response has it: with several routers, one placed on another router was
never "assigned" here, and the router refreshed (committing first) every 100 ms
for 2 s per new session topic.  Stand-ins for the consumer, no broker
(``Router()`` connects nothing until ``start()``).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from streams.router.router import Router
from streams.settings import Settings


def _router() -> Router:
    return Router(Settings(bootstrap="127.0.0.1:1", prefix="t"))


class _Consumer:
    """list_topics() answers ``topics`` and counts the requests."""

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics
        self.requests = 0

    def list_topics(self, timeout: float) -> Any:
        self.requests += 1
        ok = SimpleNamespace(error=None, partitions={0: object()})
        return SimpleNamespace(topics={name: ok for name in self.topics})

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return []

    def poll(self, timeout: float) -> None:
        return None


def test_a_refresh_schedules_the_next_and_drops_announced_topics_it_has() -> None:
    router = _router()
    consumer = _Consumer(["t.session.a", "t.control"])
    now_ms = time.monotonic() * 1000.0
    router._pending.add("t.session.a", now_ms)
    router._pending.add("t.session.b", now_ms)  # not in the metadata yet
    before = time.monotonic()
    router._refresh_metadata(consumer, 1.0)  # type: ignore[arg-type]
    period = router.config.metadata_refresh_ms / 1000.0
    assert before + period <= router._next_refresh <= time.monotonic() + period
    assert "t.session.a" not in router._pending  # matched now: the rejoin follows
    assert "t.session.b" in router._pending  # retried at its next try


def test_the_loop_refreshes_once_per_period_and_at_once_for_an_announcement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router = _router()
    consumer = _Consumer(["t.session.a"])
    router._consumer = consumer  # type: ignore[assignment]
    monkeypatch.setattr(router, "_route", lambda msgs: None)
    assert router._step(None, router.config)
    assert consumer.requests == 0  # the group join has just made its own request
    router._next_refresh = time.monotonic()  # the period is over
    assert router._step(None, router.config)
    assert router._step(None, router.config)
    assert consumer.requests == 1  # once per period
    router._pending.add("t.session.a", time.monotonic() * 1000.0)
    assert router._step(None, router.config)
    assert consumer.requests == 2  # an announcement: at once
    assert router._step(None, router.config)
    assert consumer.requests == 2  # answered: not asked again every 100 ms


def test_a_failed_refresh_waits_for_its_period_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """During a broker outage each request blocks the loop for its timeout: a failed
    one (the discovery check's or the loop's) is not made again at the next round."""
    from confluent_kafka import KafkaError, KafkaException

    router = _router()
    consumer = _Consumer([])

    def down(timeout: float) -> Any:
        consumer.requests += 1
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))

    monkeypatch.setattr(consumer, "list_topics", down)
    router._consumer = consumer  # type: ignore[assignment]
    monkeypatch.setattr(router, "_route", lambda msgs: None)
    router._next_refresh = time.monotonic()
    assert router._step(None, router.config)
    assert router._step(None, router.config)
    assert consumer.requests == 1
