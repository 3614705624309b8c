"""The one ``Producer.produce`` signature the router unit tests' fakes share
(test modules never import one another: tests/unit/test_test_layout.py)."""

from __future__ import annotations

from typing import Any


class FakeProduce:
    """``confluent_kafka.Producer.produce``'s signature, positional or keyword, as the
    router calls it: positional, any partition, no per-message callback
    (``streams.router.router._ANY_PARTITION``).  Subclasses record a call in
    :meth:`produced`."""

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        assert (partition, callback, on_delivery) == (-1, None, None)
        self.produced(topic, value, key, timestamp, headers)

    def produced(
        self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any
    ) -> None:
        raise NotImplementedError
