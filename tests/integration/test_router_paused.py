"""Fan-in (issue #12): the router pauses the session topics of ended sessions, so its
fetches stop listing them, and still routes an event published after the end.

Real broker, in-process router.  ``paused_check_s`` bounds how late such an event is
routed (one ListOffsets request per check finds it and resumes the partition).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from router_io import publish, read_topic, running, session_topics, tool_event, wait_until

from streams.router import Router, RouterConfig
from streams.serde import EventSerde
from streams.settings import Settings

SERDE = EventSerde()
CHECK_S = 1.0


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_an_ended_sessions_topic_is_paused_and_a_late_event_still_routed(
    settings: Settings, create_topics: Any, guarantee: str
) -> None:
    sids = ["ended-a", "ended-b", "live"]
    topics = session_topics(settings, create_topics, sids)
    config = RouterConfig(
        guarantee=guarantee,  # type: ignore[arg-type]
        batch_max_ms=20,
        paused_check_s=CHECK_S,
        status_interval_s=0,
    )
    router = Router(settings, config)
    router.start()
    with running(router):
        wait_until("assignment", lambda: set(topics.values()) <= router.assigned_topics)
        items: list[tuple[str, bytes | None, bytes, Any]] = []
        for sid in sids:
            items += [(topics[sid], sid.encode(), tool_event(sid, seq), None) for seq in range(3)]
        for sid in ("ended-a", "ended-b"):
            items.append((topics[sid], sid.encode(), tool_event(sid, 3, "session_end"), None))
        publish(settings.bootstrap, items)
        wait_until("pause", lambda: router.paused_topics == {topics["ended-a"], topics["ended-b"]})
        # the live session keeps flowing while the others are paused
        publish(settings.bootstrap, [(topics["live"], b"live", tool_event("live", 3), None)])
        # a late event after the end: found by a check, resumed and routed
        t0 = time.monotonic()
        publish(
            settings.bootstrap, [(topics["ended-a"], b"ended-a", tool_event("ended-a", 4), None)]
        )
        waited = wait_until("late event routed", lambda: router.stats().routed >= 13, 15.0)
        print(f"\n{guarantee}: an event after session_end routed {waited * 1000:.0f} ms later")
        assert time.monotonic() - t0 < CHECK_S + 5.0
        assert router.resumed_total == 1
        assert router.paused_topics == {topics["ended-b"]}
    events = read_topic(settings.bootstrap, settings.events_topic, 13)
    seen = Counter(
        (m.key().decode(), SERDE.decode(m.value()).seq) for m in events if m.error() is None
    )
    expected = {(sid, seq) for sid in sids for seq in range(4)} | {("ended-a", 4)}
    assert set(seen) == expected
    if guarantee == "exactly-once":
        assert all(n == 1 for n in seen.values()), seen


def test_a_paused_partition_revoked_and_assigned_again_is_fetched(
    settings: Settings, create_topics: Any
) -> None:
    """librdkafka keeps a partition paused across revoke + re-assignment; the router
    forgets it at the revoke, so it must resume it when it is assigned again (else
    its next event would never be routed).  The periodic check cannot rescue it here
    (``paused_check_s`` 600); the rebalance callbacks run as librdkafka runs them."""
    from confluent_kafka import TopicPartition

    topic = settings.session_topic("ended")
    create_topics(topic)
    create_topics(settings.control_topic)
    config = RouterConfig(batch_max_ms=20, paused_check_s=600, status_interval_s=0)
    router = Router(settings, config)
    router.start()
    try:
        items = [(topic, b"ended", tool_event("ended", 0), None)]
        items.append((topic, b"ended", tool_event("ended", 1, "session_end"), None))
        publish(settings.bootstrap, items)
        router.run(max_seconds=30, until=lambda st: topic in router.paused_topics)
        assert router.paused_topics == {topic}
        consumer = router._consumer
        assert consumer is not None
        tps = [TopicPartition(topic, 0)]
        router._on_revoke(consumer, tps)
        consumer.incremental_unassign(tps)
        router._on_assign(consumer, tps)
        consumer.incremental_assign(tps)
        assert router.paused_topics == frozenset()
        publish(settings.bootstrap, [(topic, b"ended", tool_event("ended", 2), None)])
        stats = router.run(max_seconds=15, until=lambda st: st.routed >= 3)
        assert stats.routed == 3, stats
    finally:
        router.close()
