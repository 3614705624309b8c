"""The router's Prometheus endpoint against a real broker.

(The worker's ``/metrics`` is scraped in tests/integration/test_http_view.py,
after a known set of events, and by ``trajectory demo``.)
"""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streams.broker import free_port
from streams.core.events import TraceEvent
from streams.router import Router, RouterConfig
from streams.router.metrics import RouterMetrics
from streams.serde import EventSerde
from streams.settings import Settings


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_router_metrics_endpoint(settings: Settings, create_topics: Any) -> None:
    sids = ["m0", "m1", "m2"]
    topics = create_topics(*(settings.session_topic(s) for s in sids))
    create_topics(settings.control_topic)
    serde = EventSerde()
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
    for sid in sids:
        for seq in range(10):
            kind = "tool_call" if seq % 2 == 0 else "tool_result"
            ev = TraceEvent(
                kind, sid, seq, 1_700_000_000_000 + seq, call_id=f"c{seq // 2}", tool_name="bash"
            )
            p.produce(settings.session_topic(sid), serde.encode(ev), sid.encode())
    p.produce(settings.session_topic("m0"), b"\xff not avro", b"m0")
    assert p.flush(30) == 0

    port = free_port()
    metrics = RouterMetrics(sample_interval_s=0.2)
    server = metrics.serve(port)
    router = Router(settings, RouterConfig(batch_max_ms=50, status_interval_s=0), metrics=metrics)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            router.run(max_seconds=90)
        except BaseException as exc:  # re-raised in the test thread below
            errors.append(exc)

    router.start()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        lag = "trajectory_router_consumer_lag_messages"
        deadline = time.monotonic() + 60
        s: dict[Any, float] = {}
        while time.monotonic() < deadline and not errors:
            s = scrape(port)
            routed = sum(v for (n, _), v in s.items() if n == "trajectory_router_events_total")
            lags = {lbl: v for (n, lbl), v in s.items() if n == lag}
            if routed >= 30 and len(lags) == len(topics) and not any(lags.values()):
                break
            time.sleep(0.3)
        assert not errors, errors
        assert s[("trajectory_router_events_total", (("type", "tool_call"),))] == 15
        assert s[("trajectory_router_events_total", (("type", "tool_result"),))] == 15
        dlq = {lbl: v for (n, lbl), v in s.items() if n == "trajectory_router_dlq_total"}
        assert sum(dlq.values()) == 1, dlq
        assert s[("trajectory_router_transactions_total", ())] >= 1
        assert (
            s[("trajectory_router_transaction_seconds_count", ())]
            == s[("trajectory_router_transactions_total", ())]
        )
        assert s[("trajectory_router_aborted_transactions_total", ())] == 0
        # every session topic's partition is reported, fully consumed
        for topic in topics:
            assert s[(lag, (("partition", "0"), ("topic", topic)))] == 0, s
    finally:
        router.request_stop()
        t.join(30)
        router.close()
        server.shutdown()
