"""Worker metrics (streams.worker.metrics): hooks -> Prometheus text, own registry per instance."""

from __future__ import annotations

import time

import pytest
from prom_samples import samples

from streams.core.assessment import Assessment, CurrentAssessment
from streams.core.engine import EngineOutput, PatternDetection
from streams.core.patterns import TrajectoryPattern
from streams.worker.metrics import WorkerMetrics


def _pattern(ptype: str) -> PatternDetection:
    return PatternDetection(
        "s",
        3,
        2,
        1000,
        TrajectoryPattern(pattern_type=ptype, confidence=0.9, evidence=(), first_seen_ms=1000),
    )


def test_hooks_render_as_prometheus_text() -> None:
    m = WorkerMetrics()
    now_ms = int(time.time() * 1000)
    for t in ("tool_call", "tool_call", "tool_result"):
        m.on_event(t, time.perf_counter_ns() - 2_000_000, now_ms - 1500)  # 2 ms, 1.5 s behind
    warn = CurrentAssessment(
        assessments=(Assessment(observer_name="patterns", summary="x", severity="warning"),), seq=3
    )
    m.on_outputs(EngineOutput(True, (_pattern("doom_loop"), _pattern("doom_loop")), warn))
    m.on_outputs(EngineOutput(True, (_pattern("stall"),), None))
    # a duplicate counts nothing, an assessment without observer output is not published
    m.on_outputs(EngineOutput(False, (_pattern("stall"),), warn))
    m.on_outputs(EngineOutput(True, (), CurrentAssessment()))
    m.on_outputs(None)
    m.on_dlq("SerdeError")
    m.sample_lag({0: 5, 2: 0})
    s = samples(m)
    assert s[("trajectory_worker_events_total", (("type", "tool_call"),))] == 2
    assert s[("trajectory_worker_events_total", (("type", "tool_result"),))] == 1
    assert s[("trajectory_worker_detections_total", (("pattern_type", "doom_loop"),))] == 2
    assert s[("trajectory_worker_detections_total", (("pattern_type", "stall"),))] == 1
    assert s[("trajectory_worker_assessments_total", (("severity", "warning"),))] == 1
    assert ("trajectory_worker_assessments_total", (("severity", "info"),)) not in s
    assert s[("trajectory_worker_dlq_total", (("reason_class", "SerdeError"),))] == 1
    assert s[("trajectory_worker_event_processing_seconds_count", ())] == 3
    assert 0.006 <= s[("trajectory_worker_event_processing_seconds_sum", ())] < 1.0
    assert s[("trajectory_worker_event_time_lag_seconds_count", ())] == 3
    assert 1.4 < s[("trajectory_worker_event_time_lag_last_seconds", ())] < 10
    # 1.5 s lag falls in the 2.5 s bucket, not in the 1 s one
    assert s[("trajectory_worker_event_time_lag_seconds_bucket", (("le", "1.0"),))] == 0
    assert s[("trajectory_worker_event_time_lag_seconds_bucket", (("le", "2.5"),))] == 3
    assert s[("trajectory_worker_consumer_lag_messages", (("partition", "0"),))] == 5
    assert s[("trajectory_worker_consumer_lag_messages", (("partition", "2"),))] == 0


def test_revoked_partitions_leave_the_lag_gauge() -> None:
    m = WorkerMetrics()
    m.sample_lag({0: 1, 1: 2})
    m.sample_lag([(1, 4)])
    s = samples(m)
    assert ("trajectory_worker_consumer_lag_messages", (("partition", "0"),)) not in s
    assert s[("trajectory_worker_consumer_lag_messages", (("partition", "1"),))] == 4
    with pytest.raises(ValueError, match="negative lag"):
        m.sample_lag({3: -1})


def test_instances_do_not_share_counters() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    a.on_dlq("X")
    assert samples(a)[("trajectory_worker_dlq_total", (("reason_class", "X"),))] == 1
    assert ("trajectory_worker_dlq_total", (("reason_class", "X"),)) not in samples(b)


def test_future_event_time_counts_as_zero_lag() -> None:
    m = WorkerMetrics()
    m.on_event("tool_call", time.perf_counter_ns(), int(time.time() * 1000) + 60_000)
    assert samples(m)[("trajectory_worker_event_time_lag_last_seconds", ())] == 0


# Bounds themselves (observe counts ``amount <= bound``), 0, between, and above the last.
AMOUNTS = [0.0, 0.0001, 0.00011, 0.0003, 0.005, 0.0051, 1.0, 1.5, 0.25, 7.0, 0.0001, 600.0]


def test_batched_observations_render_like_one_observe_each() -> None:
    """``on_events`` increments each bucket once per batch through prometheus_client's
    Histogram internals: the exposition must be what one ``observe`` per value gives."""
    from streams.worker.metrics import _observe_many

    one, many = WorkerMetrics(), WorkerMetrics()
    for a in AMOUNTS:
        one.processing.observe(a)
        one.event_time_lag.observe(a)
    _observe_many(many.processing, AMOUNTS)
    _observe_many(many.event_time_lag, AMOUNTS)
    _observe_many(many.processing, [])
    got, want = samples(many), samples(one)
    assert got.keys() == want.keys()
    for key, value in want.items():
        if key[0].endswith("_sum"):
            assert got[key] == pytest.approx(value)
        elif not key[0].endswith("_created"):
            assert got[key] == value, key


def test_batched_observations_fall_back_to_observe_without_the_internals() -> None:
    from streams.worker.metrics import _observe_many

    class Plain:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, amount: float) -> None:
            self.seen.append(amount)

    plain = Plain()
    _observe_many(plain, AMOUNTS)  # type: ignore[arg-type]
    assert plain.seen == AMOUNTS


def test_on_events_records_a_batch_like_on_event_per_event() -> None:
    m = WorkerMetrics()
    now_ms = int(time.time() * 1000)
    m.on_events({"tool_call": 2, "tool_result": 1}, [0.002, 0.0004, 0.03], [now_ms - 1500] * 2)
    m.on_events({}, [], [])
    m.on_events({"tool_call": 1}, [0.002], [now_ms + 60_000])  # future: lag 0
    s = samples(m)
    assert s[("trajectory_worker_events_total", (("type", "tool_call"),))] == 3
    assert s[("trajectory_worker_events_total", (("type", "tool_result"),))] == 1
    assert s[("trajectory_worker_event_processing_seconds_count", ())] == 4
    assert s[("trajectory_worker_event_processing_seconds_sum", ())] == pytest.approx(0.0344)
    assert s[("trajectory_worker_event_processing_seconds_bucket", (("le", "0.0005"),))] == 1
    assert s[("trajectory_worker_event_time_lag_seconds_count", ())] == 3
    assert s[("trajectory_worker_event_time_lag_seconds_bucket", (("le", "1.0"),))] == 1
    assert s[("trajectory_worker_event_time_lag_seconds_bucket", (("le", "2.5"),))] == 3
    assert s[("trajectory_worker_event_time_lag_last_seconds", ())] == 0


def test_engine_plans_count_flushes_waiting_and_held_offsets() -> None:
    m = WorkerMetrics()
    m.on_engine_plan(due=200, waiting=800, held=3)
    m.on_engine_plan(due=0, waiting=950, held=0)
    s = samples(m)
    assert s[("trajectory_worker_engine_flushes_total", ())] == 200
    assert s[("trajectory_worker_engines_waiting", ())] == 950  # as of the last commit
    assert s[("trajectory_worker_offsets_held_total", ())] == 3
