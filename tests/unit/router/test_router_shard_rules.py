"""Static shards (``--shard I/N``): which topics a shard owns, its settings, and the
router's own assignment of them (stand-ins for the consumer, no broker)."""

from __future__ import annotations

import argparse
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from streams.commands.router import add_arguments, router_config
from streams.errors import ConfigError
from streams.router import RouterConfig
from streams.router.router import Router
from streams.router.shards import Shard, shard_of
from streams.settings import Settings


def test_a_session_belongs_to_one_shard_by_a_hash_that_does_not_change() -> None:
    # CRC-32 of the UTF-8 id (0xe8b7be43, 0xe418e0ac, 0xf1099370, as binascii.crc32
    # gives them): pinned, since a change would move topics between shards
    assert [shard_of(s, 4) for s in ("a", "agent-7", "ü-session")] == [3, 0, 0]
    assert [shard_of(s, 3) for s in ("a", "agent-7", "ü-session")] == [
        0xE8B7BE43 % 3,
        0xE418E0AC % 3,
        0xF1099370 % 3,
    ]
    sids = [f"s{i}" for i in range(2000)]
    for n in (1, 2, 3, 8):
        owned = [[s for s in sids if Shard(i, n).owns(s)] for i in range(n)]
        assert sorted(s for share in owned for s in share) == sorted(sids)  # each once
        sizes = Counter(len(share) for share in owned)
        assert min(len(share) for share in owned) > 0.8 * len(sids) / n, sizes


def test_a_shard_is_parsed_from_index_over_count_and_refused_otherwise() -> None:
    assert Shard.parse("1/3") == Shard(1, 3)
    assert Shard.parse(" 0 / 2 ") == Shard(0, 2)
    assert str(Shard(1, 3)) == "1/3"
    for bad, says in (
        ("2/2", "the index must be 0..1"),
        ("0/0", "the count must be 1.."),
        ("1", "give INDEX/COUNT"),
        ("-1/2", "give INDEX/COUNT"),
    ):
        with pytest.raises(ConfigError, match=says):
            Shard.parse(bad)
    with pytest.raises(ConfigError, match="shard"):
        RouterConfig(shard="0/2")  # type: ignore[arg-type]


def test_a_shards_transactional_id_is_its_own_unless_one_is_given() -> None:
    assert RouterConfig(shard=Shard(1, 2)).resolved_transactional_id("p") == "p.router.shard-1-of-2"
    given = RouterConfig(shard=Shard(1, 2), transactional_id="mine")
    assert given.resolved_transactional_id("p") == "mine"
    assert RouterConfig().resolved_transactional_id("p") == "p.router.0"
    # the offsets stay in the one router group: a change of N keeps every position
    assert RouterConfig(shard=Shard(1, 2)).resolved_group_id("p") == "p.router"


def test_the_command_line_takes_a_shard_and_refuses_a_bad_one() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert router_config(parser.parse_args(["--shard", "1/2"])).shard == Shard(1, 2)
    assert router_config(parser.parse_args([])).shard is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--shard", "2/2"])


class _Consumer:
    """list_topics() answers ``topics`` (name -> partition count); the assignment
    calls are recorded."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.assigned: list[tuple[str, int]] = []
        self.calls: list[str] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(error=None, partitions={p: object() for p in range(n)})
                for name, n in self.topics.items()
            }
        )

    def incremental_assign(self, tps: list[Any]) -> None:
        self.calls.append("assign")
        self.assigned += [(tp.topic, tp.partition) for tp in tps]

    def incremental_unassign(self, tps: list[Any]) -> None:
        self.calls.append("unassign")
        gone = {(tp.topic, tp.partition) for tp in tps}
        self.assigned = [k for k in self.assigned if k not in gone]

    def resume(self, tps: list[Any]) -> None:
        pass


def _shard_router(index: int) -> Router:
    return Router(
        Settings(bootstrap="127.0.0.1:1", prefix="t"), RouterConfig(shard=Shard(index, 2))
    )


def test_a_shard_assigns_itself_its_session_topics_and_the_control_topic_only() -> None:
    sids = [f"s{i}" for i in range(12)]
    topics = {f"t.session.{s}": 1 for s in sids} | {"t.control": 3, "t.events": 6, "other": 1}
    covered: list[tuple[str, int]] = []
    for index in (0, 1):
        router = _shard_router(index)
        consumer = _Consumer(topics)
        router._consumer = consumer  # type: ignore[assignment]
        router._subscribe()  # the start: the shard's assignment, no group subscription
        mine = {f"t.session.{s}" for s in sids if shard_of(s, 2) == index}
        assert {t for t, _ in consumer.assigned} == mine | {"t.control"}
        assert sorted(p for t, p in consumer.assigned if t == "t.control") == [0, 1, 2]
        assert router.assigned_topics == mine | {"t.control"}
        assert router.first_assigned_at is not None
        covered += [k for k in consumer.assigned if k[0] != "t.control"]
        # a refresh that finds nothing new assigns nothing again
        router._refresh_metadata(consumer, 1.0)  # type: ignore[arg-type]
        assert consumer.calls == ["assign"]
    assert sorted(covered) == sorted((f"t.session.{s}", 0) for s in sids)  # each once


def test_a_refresh_adds_a_new_topic_of_the_shard_and_drops_a_deleted_one() -> None:
    router = _shard_router(0)
    mine = [s for s in (f"n{i}" for i in range(40)) if shard_of(s, 2) == 0][:3]
    theirs = next(s for s in (f"m{i}" for i in range(40)) if shard_of(s, 2) == 1)
    consumer = _Consumer({"t.control": 1, f"t.session.{mine[0]}": 1, f"t.session.{mine[1]}": 1})
    router._consumer = consumer  # type: ignore[assignment]
    router._subscribe()
    router._uncommitted[(f"t.session.{mine[1]}", 0)] = 7
    # mine[1] deleted; mine[2] and another shard's topic created
    del consumer.topics[f"t.session.{mine[1]}"]
    consumer.topics[f"t.session.{mine[2]}"] = 1
    consumer.topics[f"t.session.{theirs}"] = 1
    router._refresh_metadata(consumer, 1.0)  # type: ignore[arg-type]
    assert consumer.calls == ["assign", "unassign", "assign"]
    expected = {"t.control", f"t.session.{mine[0]}", f"t.session.{mine[2]}"}
    assert {t for t, _ in consumer.assigned} == expected
    assert router.assigned_topics == expected
    # a deleted topic's uncommitted offset is not sent with the next commit
    assert (f"t.session.{mine[1]}", 0) not in router._uncommitted


def test_an_announcement_refreshes_a_shard_without_committing_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the group a refresh makes the group rejoin, so the open batch is committed
    before it; a shard's assignment fences nothing, so the batch stays open."""
    import time

    router = _shard_router(0)
    consumer = _Consumer({"t.control": 1})
    consumer.consume = lambda num_messages, timeout: []  # type: ignore[attr-defined]
    consumer.poll = lambda timeout: None  # type: ignore[attr-defined]
    router._consumer = consumer  # type: ignore[assignment]
    router._subscribe()
    monkeypatch.setattr(router, "_route", lambda msgs: None)
    commits: list[bool] = []
    monkeypatch.setattr(router, "_commit", lambda *a, **k: commits.append(True))
    router._uncommitted[("t.control", 0)] = 1  # an open batch
    router._pending.add("t.session.x", time.monotonic() * 1000.0)
    assert router._step(None, router.config)
    assert commits == []


def test_a_shard_stops_when_the_router_group_has_members() -> None:
    from streams.router.admin import GroupMember, GroupView

    router = _shard_router(1)
    answers: list[GroupView | None] = [
        None,  # the description failed: decides nothing
        GroupView("Empty", ()),
        GroupView("Stable", (GroupMember("m-1", "t.router.0", frozenset({"t.session.a"})),)),
    ]
    router._admin = SimpleNamespace(  # type: ignore[assignment]
        describe_group=lambda group, timeout: answers.pop(0)
    )
    router._check_no_group_members()
    router._check_no_group_members()
    with pytest.raises(ConfigError, match=r"'t.router' has 1 member\(s\) \(e.g. t.router.0\)"):
        router._check_no_group_members()
