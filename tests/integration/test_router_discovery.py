"""Issue #15, defect 5: session topics created while the router is down.

A router routes session A, stops; while no router runs, new sessions B and C are
created through the real SDK (topic + announcement + events).  The restarted
router (same instance id: static group membership) must route B and C without
any further new session to trigger a rebalance.  Before the fix it never did:
the restarted static member got its old assignment back and the regex
re-match saw "no change".
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from procs import RouterProc
from router_io import read_topic

from streams.sdk import Publisher
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SERDE = EventSerde()


def sdk_session(settings: Settings, sid: str, events: int) -> None:
    with Publisher(settings) as pub:
        with pub.session(sid) as session:
            for i in range(events):
                session.message(f"m{i}")
        pub.flush()


def wait_for_topic(settings: Settings, topic: str, timeout_s: float = 60.0) -> None:
    """The router creates ``<prefix>.events`` at start; read it only after that."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return
        assert time.monotonic() < deadline, f"{topic} was not created"
        time.sleep(0.2)


def routed_sessions(settings: Settings, expect: int, timeout_s: float) -> dict[str, int]:
    wait_for_topic(settings, settings.events_topic)
    msgs = read_topic(settings.bootstrap, settings.events_topic, expect, timeout_s=timeout_s)
    counts: dict[str, int] = {}
    for m in msgs:
        sid = SERDE.decode(m.value()).session_id
        counts[sid] = counts.get(sid, 0) + 1
    return counts


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_sessions_created_while_router_is_down_are_routed_after_restart(
    settings: Settings, tmp_path: Path, guarantee: str
) -> None:
    log = tmp_path / "router.log"
    flags = ("--guarantee", guarantee, "--status-every", "1")
    # session_start + 3 messages + session_end per session
    per_session = 5
    router = RouterProc(settings, log, *flags)
    try:
        sdk_session(settings, "before", 3)
        counts = routed_sessions(settings, per_session, timeout_s=60)
        assert counts == {"before": per_session}, router.log_tail()
        assert router.stop(signal.SIGTERM) == 0, router.log_tail()

        sdk_session(settings, "whiledown1", 3)
        sdk_session(settings, "whiledown2", 3)

        router = RouterProc(settings, log, *flags)
        counts = routed_sessions(settings, 3 * per_session, timeout_s=45)
        assert router.proc.poll() is None, router.log_tail()
        want = {"before": per_session, "whiledown1": per_session, "whiledown2": per_session}
        assert counts == want, router.log_tail(80)
        assert router.stop(signal.SIGTERM) == 0, router.log_tail()
    finally:
        router.stop(signal.SIGKILL)
