"""A router whose consumer holds partitions but stops fetching replaces it
(``Router._check_stall``, ``STALL_CHECK_S``).

Seen after a broker restart (at-least-once, ``tests/bench/bench_router_restarts.py
--guarantee at-least-once``): the router kept taking new partitions, consumed
nothing, and had not recovered after 4 minutes.  That librdkafka state cannot be
produced on demand, so this test stops the consumer's fetching behind the router's
back (it pauses every assigned partition itself, which the router does not know of)
and checks that the router notices, replaces its consumer and routes everything,
exactly once under exactly-once.  Real broker, in-process router.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer
from router_io import publish, read_topic, running, session_topics, tool_event, wait_until

from streams.router import Router, RouterConfig
from streams.router import router as router_mod
from streams.serde import EventSerde
from streams.settings import Settings

SERDE = EventSerde()


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_consumer_that_stops_fetching_is_replaced_and_nothing_is_lost(
    settings: Settings, create_topics: Any, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    monkeypatch.setattr(router_mod, "STALL_CHECK_S", 0.5)
    sids = ["stall-a", "stall-b"]
    topics = session_topics(settings, create_topics, sids)
    config = RouterConfig(
        guarantee=guarantee,  # type: ignore[arg-type]
        batch_max_ms=20,
        status_interval_s=0,
    )
    router = Router(settings, config)
    router.start()
    with running(router):
        wait_until("assignment", lambda: set(topics.values()) <= router.assigned_topics)
        first = [
            (topics[s], s.encode(), tool_event(s, seq), None) for s in sids for seq in range(3)
        ]
        publish(settings.bootstrap, first)
        wait_until("first events routed", lambda: router.stats().routed >= 6)
        # Idle with everything routed: several checks, no replacement.
        time.sleep(4 * router_mod.STALL_CHECK_S)
        assert router.stall_restarts == 0
        consumer = router._consumer
        assert consumer is not None
        # fetching stops for the session partitions; the router is not told
        consumer.pause([tp for tp in consumer.assignment() if tp.topic != settings.control_topic])
        publish(
            settings.bootstrap,
            [
                (topics[sid], sid.encode(), tool_event(sid, seq), None)
                for sid in sids
                for seq in (3, 4)
            ],
        )
        # ... while announcements keep coming on the control topic, more often than
        # the check's idle time (seen after a broker restart: they hid the stall)
        stop = threading.Event()

        def announce() -> None:
            producer = Producer({"bootstrap.servers": settings.bootstrap, "linger.ms": 0})
            while not stop.wait(router_mod.STALL_CHECK_S / 5):
                producer.produce(settings.control_topic, key=b"stall-a", value=b"")
                producer.flush(5.0)

        announcer = threading.Thread(target=announce, daemon=True)
        announcer.start()
        try:
            wait_until("stall noticed", lambda: router.stall_restarts >= 1, 30.0)
        finally:
            stop.set()
            announcer.join()
        wait_until("events after the stall routed", lambda: router.stats().routed >= 10, 30.0)
        assert router._consumer is not consumer
        assert router.stall_restarts == 1
    events = read_topic(settings.bootstrap, settings.events_topic, 10)
    seen = Counter(
        (m.key().decode(), SERDE.decode(m.value()).seq) for m in events if m.error() is None
    )
    assert set(seen) == {(sid, seq) for sid in sids for seq in range(5)}
    if guarantee == "exactly-once":
        assert all(n == 1 for n in seen.values()), seen


class _CutOff:
    """A consumer whose metadata requests fail as if its connections were broken;
    everything else is passed through to the real one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "cut off (test)"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_consumer_cut_off_from_a_reachable_cluster_is_replaced(
    settings: Settings, create_topics: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen after a broker restart in CI: every metadata request of the router's
    consumer failed ("Broker transport failure") for 2 minutes while the broker
    served the other clients; the consumer had lost its partitions, so nothing was
    routed.  Here the discovery check's metadata requests fail for the first
    consumer only; the admin client still reaches the cluster."""
    monkeypatch.setattr(router_mod, "DISCOVERY_CHECK_S", 0.3)
    sid = "cut-off"
    topic = settings.session_topic(sid)
    create_topics(topic, settings.control_topic)
    router = Router(settings, RouterConfig(batch_max_ms=20, status_interval_s=0))
    router.start()
    first = router._consumer
    check = router._check_discovery

    def cut_off_check(consumer: Any) -> None:
        check(_CutOff(consumer) if consumer is first else consumer)

    monkeypatch.setattr(router, "_check_discovery", cut_off_check)
    with running(router):
        publish(settings.bootstrap, [(topic, sid.encode(), tool_event(sid, 0), None)])
        wait_until("first event routed", lambda: router.stats().routed >= 1)
        wait_until("cut-off noticed", lambda: router.cut_off_restarts >= 1, 30.0)
        # (the counter moves before the old consumer is closed and the new one made)
        wait_until("consumer replaced", lambda: router._consumer not in (first, None), 30.0)
        publish(settings.bootstrap, [(topic, sid.encode(), tool_event(sid, 1), None)])
        wait_until("routed by the new consumer", lambda: router.stats().routed >= 2, 30.0)
        assert router.cut_off_restarts == 1  # the new consumer's checks succeed
    events = read_topic(settings.bootstrap, settings.events_topic, 2)
    seqs = Counter(SERDE.decode(m.value()).seq for m in events if m.error() is None)
    assert seqs == {0: 1, 1: 1}
