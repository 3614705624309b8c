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
from router_io import publish, read_topic

from streams.core.events import TraceEvent
from streams.router import Router, RouterConfig
from streams.router import router as router_mod
from streams.serde import EventSerde
from streams.settings import Settings

SERDE = EventSerde()


def event(sid: str, seq: int) -> bytes:
    return SERDE.encode(
        TraceEvent(
            type="tool_call",
            session_id=sid,
            seq=seq,
            timestamp_ms=1_700_000_000_000 + seq,
            tool_name="bash",
            input={"cmd": f"ls {seq}"},
        )
    )


def _wait(what: str, cond: Any, timeout_s: float = 30.0) -> None:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(0.02)


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_consumer_that_stops_fetching_is_replaced_and_nothing_is_lost(
    settings: Settings, create_topics: Any, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    monkeypatch.setattr(router_mod, "STALL_CHECK_S", 0.5)
    sids = ["stall-a", "stall-b"]
    topics = {sid: settings.session_topic(sid) for sid in sids}
    create_topics(*topics.values())
    create_topics(settings.control_topic)
    config = RouterConfig(
        guarantee=guarantee,  # type: ignore[arg-type]
        batch_max_ms=20,
        status_interval_s=0,
    )
    router = Router(settings, config)
    router.start()
    thread = threading.Thread(target=router.run, name="router", daemon=True)
    thread.start()
    try:
        _wait("assignment", lambda: set(topics.values()) <= router.assigned_topics)
        first = [(topics[s], s.encode(), event(s, seq), None) for s in sids for seq in range(3)]
        publish(settings.bootstrap, first)
        _wait("first events routed", lambda: router.stats().routed >= 6)
        # Idle with everything routed: several checks, no replacement.
        time.sleep(4 * router_mod.STALL_CHECK_S)
        assert router.stall_restarts == 0
        consumer = router._consumer
        assert consumer is not None
        consumer.pause(consumer.assignment())  # fetching stops; the router is not told
        publish(
            settings.bootstrap,
            [(topics[sid], sid.encode(), event(sid, seq), None) for sid in sids for seq in (3, 4)],
        )
        _wait("stall noticed", lambda: router.stall_restarts >= 1, 30.0)
        _wait("events after the stall routed", lambda: router.stats().routed >= 10, 30.0)
        assert router._consumer is not consumer
        assert router.stall_restarts == 1
    finally:
        router.request_stop()
        thread.join(30)
        router.close()
    assert not thread.is_alive()
    events = read_topic(settings.bootstrap, settings.events_topic, 10)
    seen = Counter(
        (m.key().decode(), SERDE.decode(m.value()).seq) for m in events if m.error() is None
    )
    assert set(seen) == {(sid, seq) for sid in sids for seq in range(5)}
    if guarantee == "exactly-once":
        assert all(n == 1 for n in seen.values()), seen
