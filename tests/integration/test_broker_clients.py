"""Both Kafka clients this project uses work against the broker ``streams.broker`` runs.

confluent-kafka (SDK, router: transactions) and aiokafka (Faust: consumer groups,
admin-created topics) -- the reason Kafka 3.9.x was pinned (4.0 dropped protocol
versions aiokafka still sends).  One broker of our own for the module, so these
tests check *our* broker even when ``KAFKA_BOOTSTRAP`` points elsewhere.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.broker import LocalBroker, free_ports

pytestmark = pytest.mark.timeout(240)

N = 50


@pytest.fixture(scope="module")
def own_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base: Path = tmp_path_factory.mktemp("own-kafka")
    port, controller_port = free_ports(2)
    with LocalBroker(base, port=port, controller_port=controller_port) as broker:
        yield broker.bootstrap


def _name(kind: str) -> str:
    return f"t{uuid.uuid4().hex[:12]}.{kind}"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)])
    futures[topic].result(timeout=60)


def _consume_all(bootstrap: str, topic: str, n: int, **conf: Any) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _name("group"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **conf,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(600):
            if len(got) >= n:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value()))
        consumer.commit(asynchronous=False)
        # nothing beyond what was produced
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None
    finally:
        consumer.close()
    return got


def test_confluent_kafka_round_trip(own_bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = _name("plain")
    _create(own_bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": own_bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    sent = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(N)]
    for key, value in sent:
        producer.produce(topic, value, key, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * N
    got = _consume_all(own_bootstrap, topic, N)
    assert sorted(got) == sorted(sent)


def test_confluent_kafka_transactions_commit_and_abort(own_bootstrap: str) -> None:
    """Needs transaction.state.log.replication.factor=1 / min.isr=1 on one node."""
    from confluent_kafka import Producer

    topic = _name("tx")
    _create(own_bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": own_bootstrap, "transactional.id": _name("txid")})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"aborted{i}".encode(), b"k")
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"committed{i}".encode(), b"k")
    producer.commit_transaction(30)
    got = _consume_all(own_bootstrap, topic, 5, **{"isolation.level": "read_committed"})
    assert [v for _, v in got] == [f"committed{i}".encode() for i in range(5)]


def test_aiokafka_round_trip_with_group_and_admin(own_bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = _name("aio")

    async def scenario() -> list[tuple[bytes, bytes]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=own_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=own_bootstrap)
        await producer.start()
        try:
            for i in range(N):
                await producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i % 5}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=own_bootstrap,
            group_id=_name("aio-group"),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            async with asyncio.timeout(90):
                while len(got) < N:
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        got.extend((r.key, r.value) for r in records)
            await consumer.commit()
            assert len(consumer.assignment()) == 3
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    assert sorted(got) == sorted((f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(N))


def test_topics_are_not_auto_created(own_bootstrap: str) -> None:
    """A produce to a topic nobody created fails instead of creating it silently."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient

    topic = _name("missing")
    producer = Producer({"bootstrap.servers": own_bootstrap, "message.timeout.ms": 4000})
    errors: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1
    assert errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    topics = AdminClient({"bootstrap.servers": own_bootstrap}).list_topics(timeout=10).topics
    assert topic not in topics
