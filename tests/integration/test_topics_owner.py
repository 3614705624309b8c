"""streams.topics on a real broker: whichever process creates a topic first (worker,
router, SDK, snapshots), the topic gets the owner's spec; existing topics are left alone."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

from streams.router import ensure_topics as ensure_router_topics
from streams.router.config import RouterConfig
from streams.sdk import Publisher
from streams.settings import Settings
from streams.topics import (
    SESSION_SEGMENT_INDEX_BYTES,
    ensure_topics,
    ensure_worker_topics,
    max_message_bytes,
    router_topic_specs,
    session_topic_spec,
    worker_topic_specs,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def topic_configs(admin: Any, topic: str) -> dict[str, str]:
    """The topic's configs; right after creation the broker asked may not know it yet
    (UNKNOWN_TOPIC_OR_PART), so ask again for up to 30 s."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + 30
    while True:
        try:
            configs = admin.describe_configs([res])[res].result(timeout=30)
            return {k: v.value for k, v in configs.items()}
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_worker_created_topics_carry_the_owner_size_and_policies(
    settings: Settings, admin: Any
) -> None:
    # Regression: the worker created events/dlq/patterns/assessments/history with no
    # max.message.bytes (the broker's ~1 MiB default), smaller than what the router
    # forwards to them when it was not the one to create them first.
    settings = settings.with_(max_message_bytes=2_000_000, events_partitions=3)
    assert ensure_worker_topics(settings) == 3
    size = str(max_message_bytes(settings))
    for spec in worker_topic_specs(settings):
        got = topic_configs(admin, spec.name)
        assert got["max.message.bytes"] == size, spec.name
        assert got["cleanup.policy"] == spec.config.get("cleanup.policy", "delete"), spec.name
    snapshots = topic_configs(admin, settings.snapshots_topic)
    assert snapshots["cleanup.policy"] == "compact"
    assert snapshots["max.message.bytes"] == size

    # the router after the worker: creates only its control topic, keeps the rest
    md = admin.list_topics(timeout=30)
    assert settings.control_topic not in md.topics
    ensure_router_topics(settings, RouterConfig(), admin)
    assert topic_configs(admin, settings.control_topic)["cleanup.policy"] == "compact"
    again = ensure_topics(
        admin, router_topic_specs(settings, -1), bootstrap=settings.bootstrap, timeout_s=30
    )
    assert again == []  # TOPIC_ALREADY_EXISTS is success, nothing recreated


def test_session_topics_from_the_sdk_match_the_owner_spec(settings: Settings, admin: Any) -> None:
    settings = settings.with_(session_retention_ms=3_600_000)
    with Publisher(settings) as pub:
        (topic,) = pub.ensure_session_topics(["own-1"])
    spec = session_topic_spec(settings, "own-1")
    assert topic == spec.name
    got = topic_configs(admin, topic)
    for key, value in spec.config.items():
        assert got[key] == value, key
    assert got["segment.index.bytes"] == str(SESSION_SEGMENT_INDEX_BYTES)
    assert len(admin.list_topics(timeout=30).topics[topic].partitions) == 1
