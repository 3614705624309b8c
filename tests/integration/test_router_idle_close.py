"""Exactly-once: a caught-up transaction closes after ``batch_idle_ms``, not at the
end of the batch window (``RouterConfig.batch_idle_ms``, issue #12), on a real broker.

A trickle (one event every ``GAP_S``) under a long window (``WINDOW_MS``): with the
rule on, the router has nothing more to hand over after each event, so each one
is committed in a transaction of its own, long before the window could close;
with it off (the old behaviour) the window gathers several events per
transaction.  The checks count the router's own transactions (``RouterStats``),
not wall time, so a loaded machine cannot make them flake: the trickle spans
``(N - 1) * GAP_S`` = 1.4 s, less than one window, so a router that waits out
the window commits it in at most a few transactions (one per 2 s, plus stragglers
if publishing stalls), and one that closes when caught up needs ~N.  Every event
must still reach ``<prefix>.events`` exactly once (read_committed).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from router_io import publish, read_topic, tool_event

from streams.router import Router, RouterConfig
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SERDE = EventSerde()
N = 8
GAP_S = 0.2
#: Far longer than the trickle's gaps: only the idle rule can close a batch early.
WINDOW_MS = 2000


def _trickle(settings: Settings, create_topics: Any, cfg: RouterConfig) -> Router:
    """Route N events published GAP_S apart; returns the (closed) router."""
    sid = "trickle"
    topic = settings.session_topic(sid)
    create_topics(topic, settings.control_topic)
    router = Router(settings, cfg)
    router.start()
    t = threading.Thread(
        target=router.run,
        kwargs={"max_seconds": 120, "until": lambda s: s.routed >= N},
        daemon=True,
    )
    t.start()
    try:
        # the first event once the router has its partition (no join time in the trickle)
        deadline = time.monotonic() + 60
        while not router.assigned_topics:
            assert time.monotonic() < deadline, "router never got the session topic"
            time.sleep(0.05)
        for seq in range(N):
            publish(settings.bootstrap, [(topic, sid.encode(), tool_event(sid, seq), None)])
            time.sleep(GAP_S)
        t.join(90)
        assert not t.is_alive(), f"router did not route {N} events: {router.stats()}"
    finally:
        router.request_stop()
        t.join(30)
        router.close()
    events = read_topic(settings.bootstrap, settings.events_topic, N)
    got = [(m.key().decode(), SERDE.decode(m.value()).seq) for m in events]
    assert sorted(got) == [(sid, s) for s in range(N)], "lost or duplicated events"
    return router


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background-commit"])
def test_a_trickle_is_committed_when_caught_up_not_at_the_window(
    settings: Settings, create_topics: Any, background: bool
) -> None:
    cfg = RouterConfig(
        transactional_id=f"{settings.prefix}.r",
        batch_max_ms=WINDOW_MS,
        batch_idle_ms=10,
        commit_in_background=background,
        status_interval_s=0,
        paused_check_s=0,
    )
    stats = _trickle(settings, create_topics, cfg).stats()
    print(f"\n{stats}")
    assert stats.routed == N and stats.aborts == 0
    # a 2 s window alone commits a 1.4 s trickle in ~1-2 transactions
    assert stats.transactions >= N // 2 + 1, stats
    assert stats.idle_closes >= N // 2, stats


def test_batch_idle_ms_0_waits_out_the_window(settings: Settings, create_topics: Any) -> None:
    cfg = RouterConfig(
        transactional_id=f"{settings.prefix}.r",
        batch_max_ms=WINDOW_MS,
        batch_idle_ms=0,
        status_interval_s=0,
        paused_check_s=0,
    )
    stats = _trickle(settings, create_topics, cfg).stats()
    print(f"\n{stats}")
    assert stats.routed == N and stats.idle_closes == 0
    assert stats.transactions < N // 2 + 1, stats
