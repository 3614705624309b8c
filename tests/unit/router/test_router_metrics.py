"""Router metrics (streams.router.metrics) and the router's producer partitioner.

Fakes only stand in for librdkafka objects here (pure unit tests); the router's
metrics endpoint against a real broker is tests/integration/test_metrics_router_endpoint.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from prom_samples import samples

from streams.router.metrics import RouterMetrics


def test_counts_move_only_when_the_transaction_commits() -> None:
    m = RouterMetrics()
    m.on_accepted("tool_call")
    m.on_accepted("tool_call")
    m.on_rejected("InvalidEventError")
    m.on_abort(3)  # consumed again later: must not be counted twice
    m.on_accepted("tool_call")
    m.on_accepted("model_step")
    m.on_rejected("InvalidEventError")
    m.on_commit(0.12, 0.02)
    s = samples(m)
    assert s[("trajectory_router_events_total", (("type", "tool_call"),))] == 1
    assert s[("trajectory_router_events_total", (("type", "model_step"),))] == 1
    assert s[("trajectory_router_dlq_total", (("reason_class", "InvalidEventError"),))] == 1
    assert s[("trajectory_router_transactions_total", ())] == 1
    assert s[("trajectory_router_aborted_transactions_total", ())] == 1
    assert s[("trajectory_router_aborted_messages_total", ())] == 3
    assert s[("trajectory_router_transaction_seconds_count", ())] == 1
    assert s[("trajectory_router_transaction_seconds_bucket", (("le", "0.1"),))] == 0
    assert s[("trajectory_router_transaction_seconds_bucket", (("le", "0.15"),))] == 1
    assert s[("trajectory_router_commit_seconds_sum", ())] == pytest.approx(0.02)


def test_consumer_replacements_by_reason_and_admin_helper_deaths() -> None:
    m = RouterMetrics()
    m.on_consumer_replaced("stall")
    m.on_consumer_replaced("stall")
    m.on_consumer_replaced("fenced")
    m.on_admin_helper_death()
    s = samples(m)
    assert s[("trajectory_router_consumer_replacements_total", (("reason", "stall"),))] == 2
    assert s[("trajectory_router_consumer_replacements_total", (("reason", "fenced"),))] == 1
    assert s[("trajectory_router_admin_helper_deaths_total", ())] == 1


class _TP:
    def __init__(self, topic: str, partition: int, offset: int = -1001) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


class _Consumer:
    def __init__(self, positions: dict[tuple[str, int], int], highs: dict[tuple[str, int], int]):
        self.positions, self.highs = positions, highs
        self.position_calls = 0

    def position(self, tps: list[Any]) -> list[_TP]:
        self.position_calls += 1
        return [
            _TP(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001))
            for tp in tps
        ]

    def get_watermark_offsets(self, tp: Any, cached: bool = False) -> tuple[int, int]:
        assert cached, "sampling must not cost a broker round trip"
        return 0, self.highs[(tp.topic, tp.partition)]


def test_lag_sampling_is_periodic_and_forgets_revoked_partitions() -> None:
    now = [100.0]
    m = RouterMetrics(sample_interval_s=2.0, clock=lambda: now[0])
    c = _Consumer(
        {("p.session.a", 0): 10, ("p.session.b", 0): 4},
        {
            ("p.session.a", 0): 15,
            ("p.session.b", 0): 4,
            ("p.session.c", 0): 9,
        },
    )
    assigned = [_TP("p.session.a", 0), _TP("p.session.b", 0), _TP("p.session.c", 0)]
    m.maybe_sample(c, assigned)
    s = samples(m)
    lag = "trajectory_router_consumer_lag_messages"
    assert s[(lag, (("partition", "0"), ("topic", "p.session.a")))] == 5
    assert s[(lag, (("partition", "0"), ("topic", "p.session.b")))] == 0
    # no position yet (nothing consumed): no claim either way
    assert (lag, (("partition", "0"), ("topic", "p.session.c"))) not in s
    now[0] += 1.0
    m.maybe_sample(c, assigned[:1])
    assert c.position_calls == 1  # within the interval: not sampled again
    now[0] += 1.5
    m.maybe_sample(c, assigned[:1])
    s = samples(m)
    assert (lag, (("partition", "0"), ("topic", "p.session.b"))) not in s
    assert s[(lag, (("partition", "0"), ("topic", "p.session.a")))] == 5


def test_router_producer_uses_java_compatible_murmur2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Faust's routing (and streams.worker.web) computes murmur2 partitions: the router's
    transactional producer must place session keys the same way."""
    import streams.router.router as router_mod
    from streams.router import RouterConfig
    from streams.settings import Settings

    seen: dict[str, Any] = {}

    class FakeProducer:
        def __init__(self, conf: dict[str, Any]) -> None:
            seen["producer"] = conf

        def init_transactions(self, timeout: float) -> None:
            pass

    class FakeConsumer:
        def __init__(self, conf: dict[str, Any]) -> None:
            seen["consumer"] = conf

        def subscribe(self, topics: list[str], **kwargs: Any) -> None:
            pass

    monkeypatch.setattr(router_mod, "Producer", FakeProducer)
    monkeypatch.setattr(router_mod, "Consumer", FakeConsumer)
    monkeypatch.setattr(router_mod, "ensure_topics", lambda settings, config: None)
    r = router_mod.Router(Settings(prefix="p"), RouterConfig(), decoder=lambda b: None)  # type: ignore[arg-type,return-value]
    r.start()
    assert seen["producer"]["partitioner"] == "murmur2_random"
