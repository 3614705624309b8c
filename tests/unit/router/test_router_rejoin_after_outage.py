"""The router after a broker restart: a consumer the group no longer counts as itself.

Seen in full suite runs under load (tests/integration/test_router_broker_restart.py,
at-least-once): after the broker came back the router was alive, held 0 partitions
and routed nothing for 120 s.  After every broker restart the group fences the
router's consumer (a JoinGroup retried during the outage takes its static
``group.instance.id``; FENCED_INSTANCE_ID); normally the consumer's fatal error
comes out of ``consume()`` and the router replaces the consumer.  When it does not,
the group shows the router's topics owned by a "ghost" member with the router's own
instance id, and the discovery check, which skipped every topic some member owned,
never forced anything.

Pure code with stand-ins for the librdkafka objects (no broker, no client: ``Router()``
connects nothing until ``start()``); the real outage is the integration test's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.router import router as router_mod
from streams.router.admin import GroupMember, GroupView, OffsetsView
from streams.router.config import RouterConfig
from streams.router.metrics import RouterMetrics
from streams.router.router import Owner, Router, _ConsumerFenced, plan_discovery
from streams.settings import Settings

SETTINGS = Settings(bootstrap="127.0.0.1:1", prefix="t")
INSTANCE = RouterConfig().resolved_transactional_id("t")
TOPICS = frozenset(SETTINGS.session_topic(s) for s in ("a", "b"))
GHOST = Owner("t.router.0-old-member", INSTANCE)
OTHER = Owner("t.router.1-member", "t.router.1")


def plan(
    owners: dict[str, Owner],
    *,
    previous: frozenset[str] = frozenset(),
    held: int = 0,
    forced: frozenset[str] = frozenset(),
) -> Any:
    return plan_discovery(
        TOPICS,
        owners,
        instance_id=INSTANCE,
        previous=previous,
        held_partitions=held,
        forced_before=forced,
    )


# -- the decision (plan_discovery) ---------------------------------------------
def test_topics_another_router_owns_are_never_suspects() -> None:
    p = plan({t: OTHER for t in TOPICS}, previous=TOPICS)
    assert (p.action, p.suspects, set(p.elsewhere)) == ("none", frozenset(), set(TOPICS))


def test_a_ghost_of_this_instance_is_a_suspect_and_acted_on_at_the_second_check() -> None:
    first = plan({t: GHOST for t in TOPICS})
    assert (first.action, first.suspects, first.ghosts) == ("none", TOPICS, TOPICS)
    second = plan({t: GHOST for t in TOPICS}, previous=first.suspects, held=3)
    assert second.action == "restart"  # re-subscribing a fenced consumer cannot help


def test_unowned_topics_force_a_rebalance_while_partitions_are_held_else_a_restart() -> None:
    assert plan({}, previous=TOPICS, held=3).action == "rebalance"
    assert plan({}, previous=TOPICS, held=0).action == "restart"
    # a forced rebalance that did not place them: the consumer itself is replaced
    assert plan({}, previous=TOPICS, held=3, forced=TOPICS).action == "restart"


# -- the router acting on it (_check_discovery) ----------------------------------
class FakeConsumer:
    """What _check_discovery / _restart_consumer / _subscribe call on a consumer."""

    def __init__(self, topics: frozenset[str]) -> None:
        self.topics = topics
        self.closed = False
        self.subscribed: list[list[str]] = []

    def list_topics(self, timeout: float) -> Any:
        meta = SimpleNamespace(error=None, partitions={0: object()})
        return SimpleNamespace(topics={t: meta for t in self.topics})

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed.append(list(topics))

    def resume(self, partitions: list[TopicPartition]) -> None:
        pass  # (_on_assign resumes partitions paused before a revoke)

    def close(self) -> None:
        self.closed = True


class FakeAdmin:
    """A :class:`~streams.router.admin.RouterAdmin` whose group gives ``owner``
    every topic."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner

    def describe_group(self, group: str, timeout_s: float) -> GroupView:
        member = GroupMember(self.owner.member_id, self.owner.instance_id, TOPICS)
        return GroupView("STABLE", (member,))

    def offsets(self, keys: Any, timeout_s: float, *, committed_of: Any = None) -> OffsetsView:
        return OffsetsView({}, None)

    def reaches_cluster(self, timeout_s: float) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> Router:
    r = Router(SETTINGS, RouterConfig(guarantee="at-least-once"), metrics=RouterMetrics())
    r._consumer = FakeConsumer(TOPICS)  # type: ignore[assignment]
    r._subscription = [SETTINGS.session_topic_regex, SETTINGS.control_topic]
    r._admin = FakeAdmin(GHOST)  # type: ignore[assignment]
    r.first_assigned_at = 0.0
    monkeypatch.setattr(router_mod, "Consumer", lambda conf: FakeConsumer(TOPICS))
    return r


def test_a_router_holding_nothing_while_a_ghost_of_itself_owns_its_topics_restarts(
    router: Router,
) -> None:
    """Fails without the fix: the old check counted the ghost as a live owner."""
    old = router._consumer
    assert isinstance(old, FakeConsumer)
    for _ in range(2):  # two checks in a row (DISCOVERY_CHECK_S apart)
        router._check_discovery(router._consumer)  # type: ignore[arg-type]
    assert router._consumer is not old and old.closed
    assert router.forced_restarts == 1
    assert router.metrics is not None  # the operator sees the replacement and why
    replaced = router.metrics.consumer_replacements.labels("discovery")._value.get()
    assert replaced == 1
    assert router._consumer.subscribed == [router._subscription]  # type: ignore[union-attr]
    # a late callback of the replaced consumer (its close may run on in a helper
    # thread) must not take the new consumer's partitions away
    tp = TopicPartition(sorted(TOPICS)[0], 0)
    router._on_assign(router._consumer, [tp])  # type: ignore[arg-type]
    router._on_lost(old, [tp])  # type: ignore[arg-type]
    router._on_revoke(old, [tp])  # type: ignore[arg-type]
    assert router.assigned_topics == {tp.topic}


def test_a_router_with_another_live_owner_does_nothing(router: Router) -> None:
    router._admin = FakeAdmin(OTHER)  # type: ignore[assignment]
    old = router._consumer
    for _ in range(3):
        router._check_discovery(router._consumer)  # type: ignore[arg-type]
    assert router._consumer is old and router.forced_restarts == 0
    assert router.forced_rebalances == 0


# -- an offset commit answered FENCED_INSTANCE_ID ---------------------------------
class CommitFencedConsumer(FakeConsumer):
    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return []

    def poll(self, timeout: float) -> None:
        return None

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        raise KafkaException(KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced (test)"))


class DeliveredProducer:
    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def test_an_offset_commit_answered_fenced_replaces_the_consumer_in_that_step() -> None:
    """Fails without the fix: the refusal was only counted ("the next commit covers
    it"), and every later commit of the dead consumer failed the same way unless its
    fatal error happened to come out of consume()."""
    r = Router(SETTINGS, RouterConfig(guarantee="at-least-once", batch_max_messages=1))
    r._consumer = CommitFencedConsumer(TOPICS)  # type: ignore[assignment]
    r._producer = DeliveredProducer()  # type: ignore[assignment]
    r._in_txn = True
    r._txn_msgs = 1
    r._uncommitted = {(sorted(TOPICS)[0], 0): 5}
    with pytest.raises(_ConsumerFenced, match=r"offset commit: .*fenced"):
        r._step(None, r.config)
    assert r.stats().failed_commits == 1
