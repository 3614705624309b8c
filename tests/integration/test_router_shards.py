"""Static shards on the real broker: two routers (``--shard 0/2``, ``--shard 1/2``)
split the session topics between them without a consumer group, and together
route every event exactly once, across a SIGKILL of one shard, a restart of it,
and a session topic created while they run.

Why: with several routers in one group every new session topic rebalances the
group (docs/chaos.md "Rejoins under session churn"); a static shard assigns
itself its topics (:mod:`streams.router.shards`).  What must hold: read_committed
readers of ``<prefix>.events`` see each published event once; the shard that was
never killed routed exactly the events of the sessions it owns; no router joined
the group (it has no members) while the group holds their committed offsets.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_io import SessionStreamPublisher
from procs import spawn_router
from router_io import EventsReader, encoded, publish, tool_event, wait_until

from streams.router import RouterConfig
from streams.router.shards import shard_of
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SESSIONS = [f"shard{i}" for i in range(10)]
LATE = "shard-late"


def start_shard(
    settings: Settings, log_path: Path, shard: str, guarantee: str
) -> subprocess.Popen[bytes]:
    return spawn_router(
        settings,
        log_path,
        "--shard",
        shard,
        "--guarantee",
        guarantee,
        "--batch-size",
        "50",
        "--batch-ms",
        "40",
        "--refresh-ms",
        "1000",
        partitions=3,
    )


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_two_static_shards_route_every_event_once_across_a_kill_and_a_late_topic(
    settings: Settings, create_topics: Any, tmp_path: Path, guarantee: str
) -> None:
    """At-least-once, the killed shard may repeat what it routed since its last
    offset commit (the worker's seq dedupe absorbs it); nothing is lost either way."""
    owners = {sid: shard_of(sid, 2) for sid in [*SESSIONS, LATE]}
    assert set(owners.values()) == {0, 1}, owners  # both shards have work
    create_topics(*(settings.session_topic(s) for s in SESSIONS))
    create_topics(settings.control_topic)
    pub = SessionStreamPublisher(settings, SESSIONS, 150, encoded)
    logs = [tmp_path / "shard0.log", tmp_path / "shard1.log"]
    routers = [start_shard(settings, logs[i], f"{i}/2", guarantee) for i in (0, 1)]
    committed = EventsReader(settings, "read_committed")
    late_published: list[tuple[str, int]] = []
    try:
        pub.start()

        # both shards route (some committed events of each one's sessions)
        def routed_by_both() -> bool:
            committed.poll(0.1)
            return {owners[sid] for sid, _ in committed.keys} == {0, 1}

        wait_until("both shards routing", routed_by_both, 60)
        # a session topic created while they run: its shard's metadata refresh adds it
        create_topics(settings.session_topic(LATE))
        late_topic = settings.session_topic(LATE)
        publish(
            settings.bootstrap,
            [(late_topic, LATE.encode(), tool_event(LATE, s), None) for s in range(30)],
        )
        late_published = [(LATE, s) for s in range(30)]
        # SIGKILL shard 1 mid-stream, restart it with the same flags (its
        # transactional id fences the dead one's open transaction)
        time.sleep(0.5)
        routers[1].send_signal(signal.SIGKILL)
        assert routers[1].wait(10) == -signal.SIGKILL
        pub.killed.set()
        time.sleep(1.0)
        routers[1] = start_shard(settings, logs[1], "1/2", guarantee)
        pub.join(90)
        assert pub.done.is_set() and not pub.errors, pub.errors
        assert not pub.undelivered
        expected = set(pub.published) | set(late_published)
        deadline = time.monotonic() + 90
        while len(set(committed.keys)) < len(expected):
            assert time.monotonic() < deadline, (
                len(set(committed.keys)),
                len(expected),
                sorted(expected - set(committed.keys))[:5],
                logs[0].read_text()[-3000:],
                logs[1].read_text()[-3000:],
            )
            for r, log in zip(routers, logs, strict=True):
                assert r.poll() is None, log.read_text()
            committed.poll(0.2)
        committed.poll(2.0)  # duplicates, if any, would arrive now
        # no router joined the router group, which holds their committed offsets
        group = RouterConfig().resolved_group_id(settings.prefix)
        probe = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": group})
        try:
            done = probe.committed(
                [TopicPartition(settings.session_topic(s), 0) for s in [*SESSIONS, LATE]],
                timeout=10,
            )
        finally:
            probe.close()
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": settings.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert not desc.members, [m.member_id for m in desc.members]
        for r in routers:
            r.send_signal(signal.SIGTERM)
        for r, log in zip(routers, logs, strict=True):
            assert r.wait(30) == 0, log.read_text()
    finally:
        for r in routers:
            if r.poll() is None:
                r.kill()
                r.wait(10)
        committed.close()

    counts = Counter(committed.keys)
    dupes = {k: c for k, c in counts.items() if c > 1}
    if guarantee == "exactly-once":
        assert not dupes, f"duplicated events: {list(dupes.items())[:10]}"
    else:  # only the killed shard's sessions may repeat
        assert {owners[sid] for sid, _ in dupes} <= {1}, list(dupes)[:10]
    assert set(counts) == expected, f"lost: {sorted(expected - set(counts))[:10]}"
    published_of = Counter(owners[sid] for sid, _ in expected)
    text0, text1 = logs[0].read_text(), logs[1].read_text()
    assert "router is shard 0/2 of" in text0 and "router is shard 1/2 of" in text1
    assert f"{guarantee})" in text0
    # shard 0 ran from start to end: it routed exactly its sessions' events
    m = re.search(r"stopped: routed (\d+)", text0)
    assert m is not None, text0[-2000:]
    assert int(m.group(1)) == published_of[0], (m.group(1), published_of)
    # every session topic was consumed to its end, offsets committed in the group
    ends = {s: n for s, n in Counter(sid for sid, _ in expected).items()}
    for tp in done:
        sid = tp.topic.rsplit(".", 1)[-1]
        assert tp.offset >= ends[sid], (tp.topic, tp.offset, ends[sid])


def test_a_static_shard_beside_a_group_router_stops_naming_the_mix(
    settings: Settings, create_topics: Any, tmp_path: Path
) -> None:
    """The broker takes the offset commits of both, so a shard beside routers without
    ``--shard`` would route its share twice: it stops instead (exit code 2, bad usage)."""
    create_topics(*(settings.session_topic(s) for s in SESSIONS[:3]), settings.control_topic)
    group_log, shard_log = tmp_path / "group.log", tmp_path / "shard.log"
    group_router = spawn_router(settings, group_log, "--status-every", "0", partitions=3)
    try:
        group = RouterConfig().resolved_group_id(settings.prefix)
        wait_until("the group router joined", lambda: "assigned" in group_log.read_text(), 60)
        shard = start_shard(settings, shard_log, "0/2", "exactly-once")
        try:
            rc = shard.wait(60)
        finally:
            if shard.poll() is None:
                shard.kill()
                shard.wait(10)
        text = shard_log.read_text()
        assert rc == 2, text[-2000:]
        assert f"the router group {group!r} has 1 member(s)" in text, text[-2000:]
        assert "Run every router of the deployment with --shard I/N, or none" in text
        assert group_router.poll() is None, group_log.read_text()  # the group router goes on
    finally:
        group_router.send_signal(signal.SIGTERM)
        group_router.wait(30)
