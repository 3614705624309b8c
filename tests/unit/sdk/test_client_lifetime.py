"""Our Kafka clients are freed by reference counting, never by the garbage collector.

Why: a confluent-kafka client freed by the cyclic garbage collector is destroyed in
whatever thread the collection happens to run in.  Admin results are delivered by a
callback in librdkafka's own background thread (``AdminClient`` futures), and a
collection that runs there and frees a client makes librdkafka abort the process
("rd_kafka_destroy() called from librdkafka owned thread"; seen here: a pytest
worker died with ``Fatal Python error: Aborted`` / ``Garbage-collecting`` in
``_make_topics_result`` during ``Publisher.ensure_session_topics``;
confluentinc/confluent-kafka-python#2129).  An agent process that creates and
closes publishers could die the same way.  So a closed (or dropped) client owner
must not sit in a reference cycle with its client: ``error_cb`` holds its owner
weakly, and ``close()`` lets go of the clients at once.

No broker is needed: creating a client does not connect.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from streams.errors import DeliveryError
from streams.sdk import Publisher
from streams.settings import Settings

DEAD = "127.0.0.1:1"  # nothing listens: nothing is sent, nothing connects in time


@contextmanager
def collector_finds() -> Iterator[list[object]]:
    """Kafka clients that only the cyclic collector could free, after the body ran
    with the collector off (so only reference counting freed objects meanwhile)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what a collection finds, to look at it
    found: list[object] = []
    try:
        yield found
        gc.collect()
        found.extend(o for o in gc.garbage if isinstance(o, (Producer, AdminClient)))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_a_publisher_dropped_without_close_is_freed_by_refcounting() -> None:
    """Without a cycle, dropping the last reference frees the producer right away
    (in the dropping thread); with one, only a collection would."""
    with collector_finds() as left:
        pub = Publisher(Settings(bootstrap=DEAD))
        del pub
    assert left == [], f"{len(left)} client(s) were only reachable by the cyclic collector"


def _live_clients() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, (Producer, AdminClient)))


def test_closing_releases_the_clients_and_later_use_says_closed() -> None:
    """``close()`` frees the producer and admin client there and then, in the
    closing thread, even while the publisher itself is still referenced."""
    pub = Publisher(Settings(bootstrap=DEAD))
    before = _live_clients()
    pub.close()
    assert _live_clients() == before - 2, "close() kept its producer or admin client"
    pub.close()  # idempotent
    pub.check()  # nothing pending, nothing failed
    with pytest.raises(DeliveryError, match="closed"):
        pub.ensure_session_topic("s1")
    with pytest.raises(DeliveryError, match="closed"):
        pub.flush(1)
