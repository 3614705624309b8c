"""The router's admin requests, made by its child process, against the real broker.

What the discovery check (describe_group), the paused and stall checks (offsets)
and the cut-off check (reaches_cluster) read; how a child death is handled is the
unit test's (tests/unit/router/test_router_admin.py).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from router_io import wait_until

from streams.router.admin import AdminProcess
from streams.settings import Settings


def test_the_child_reads_the_group_its_committed_offsets_and_the_stable_end(
    settings: Settings, create_topics: Any
) -> None:
    topic, empty = create_topics(settings.session_topic("a"), settings.session_topic("b"))
    group = f"{settings.prefix}.group"
    plain = Producer({"bootstrap.servers": settings.bootstrap})
    for i in range(5):
        plain.produce(topic, f"v{i}".encode())
    plain.flush(10)
    # an open transaction: its records are past the last stable offset
    txn = Producer({"bootstrap.servers": settings.bootstrap, "transactional.id": group + ".txn"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, b"open")
    txn.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": group,
            "group.instance.id": "member-1",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    admin = AdminProcess({"bootstrap.servers": settings.bootstrap})
    try:
        consumer.subscribe([topic, empty])
        wait_until("assignment", lambda: (consumer.poll(0.2), consumer.assignment())[1])
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert admin.reaches_cluster(2.0) is True

        view = admin.describe_group(group, 2.0)
        assert view is not None
        (member,) = view.members
        assert member.instance_id == "member-1"
        assert member.topics == {topic, empty}
        assert view.state.endswith("STABLE")

        offsets = admin.offsets([(topic, 0), (empty, 0)], 2.0, committed_of=group)
        assert offsets.ends == {(topic, 0): 5, (empty, 0): 0}  # the open record is not
        assert offsets.committed is not None
        assert offsets.committed[(topic, 0)] == 2
        assert offsets.committed.get((empty, 0), -1001) < 0  # nothing committed there
        assert admin.offsets([(topic, 0)], 2.0).committed is None  # not asked for
        assert admin.deaths == 0
    finally:
        admin.close()
        consumer.close()
        txn.abort_transaction(10)
