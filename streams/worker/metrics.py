"""Prometheus metrics of the Faust worker (served as ``GET /metrics`` on its web port).

Why a class with its own :class:`~prometheus_client.CollectorRegistry`: several
workers (and tests) may run in one process; the global registry would mix their
counters and refuse a second registration of the same name.

The processing loop calls three hooks, one line each (they never raise on
valid input and cost a few microseconds):

* :meth:`WorkerMetrics.on_event` after an event was processed (applied or a
  duplicate): counts it by type, observes the processing time and the
  event-time lag (wall clock now - the event's ``timestamp_ms``);
  :meth:`WorkerMetrics.on_events` does the same for a whole fetched batch (the
  worker's batch handler calls it once per batch);
* :meth:`WorkerMetrics.on_outputs` with the core engine's
  :class:`~streams.core.engine.EngineOutput`: counts fired patterns by type and
  new assessments by (top) severity; a duplicate (``applied`` False) counts nothing;
* :meth:`WorkerMetrics.on_dlq` when a message is dead-lettered, by error class;
* :meth:`WorkerMetrics.on_assessment` for an assessment made outside an event
  (timer-triggered), which has no EngineOutput.

The events-topic consumer lag (high watermark - next offset to process, per
partition) is sampled when ``/metrics`` is scraped (:meth:`sample_lag`), so it
costs nothing between scrapes.

Invariants: counters only grow; label values are bounded sets (event types,
pattern types, severities, error class names, partitions) -- never session ids.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from streams.core.assessment import CurrentAssessment
    from streams.core.engine import EngineOutput

#: Per-event processing time buckets (seconds): the worker does ~0.5-2 ms per event.
PROCESSING_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
#: Event-time lag buckets (seconds): live traffic is ~10-200 ms behind, replays hours.
LAG_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 600.0)

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


class WorkerMetrics:
    """The worker's metric families in a private registry (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._event_children: dict[str, Any] = {}
        self.events = Counter(
            "trajectory_worker_events",
            "Events taken from <prefix>.events and processed (applied or duplicate), by type",
            ["type"],
            registry=r,
        )
        self.processing = Histogram(
            "trajectory_worker_event_processing_seconds",
            "Wall time to process one event (decode, tables, engine, output encoding)",
            buckets=PROCESSING_BUCKETS,
            registry=r,
        )
        self.event_time_lag = Histogram(
            "trajectory_worker_event_time_lag_seconds",
            "Wall clock when processed minus the event's timestamp_ms (negative counts as 0)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.event_time_lag_last = Gauge(
            "trajectory_worker_event_time_lag_last_seconds",
            "Event-time lag of the most recently processed event",
            registry=r,
        )
        self.detections = Counter(
            "trajectory_worker_detections",
            "Patterns fired by the core detectors, by pattern type",
            ["pattern_type"],
            registry=r,
        )
        self.assessments = Counter(
            "trajectory_worker_assessments",
            "New assessments (published to <prefix>.assessments), by top severity",
            ["severity"],
            registry=r,
        )
        self.dlq = Counter(
            "trajectory_worker_dlq",
            "Messages the worker dead-lettered, by error class",
            ["reason_class"],
            registry=r,
        )
        self.engine_flushes = Counter(
            "trajectory_worker_engine_flushes",
            "Session detector states written to the engines table (each covers every "
            "event since its last write; --engine-flush-interval)",
            registry=r,
        )
        self.state_encode = Counter(
            "trajectory_worker_state_encode_cpu_seconds",
            "CPU seconds the worker spent encoding table values at flushes (canonical "
            "state, deflate; the engine snapshots are taken before)",
            registry=r,
        )
        self.engines_waiting = Gauge(
            "trajectory_worker_engines_waiting",
            "Changed detector states left waiting for a later commit at the last commit",
            registry=r,
        )
        self.offsets_held = Counter(
            "trajectory_worker_offsets_held",
            "Partition offset commits held back to the first event a waiting detector "
            "state has not written (a crash re-processes from there)",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "trajectory_worker_consumer_lag_messages",
            "Events-topic lag per partition: high watermark - next offset to process "
            "(sampled at scrape time)",
            ["partition"],
            registry=r,
        )

    # -- hooks called by the processing loop ------------------------------
    def on_engine_plan(self, due: int, waiting: int, held: int) -> None:
        """One commit's engine plan (``StateFlusher.note_plan``)."""
        if due:
            self.engine_flushes.inc(due)
        self.engines_waiting.set(waiting)
        if held:
            self.offsets_held.inc(held)

    def on_event(self, event_type: str, started_ns: int, timestamp_ms: int | None = None) -> None:
        """One event processed; ``started_ns`` is ``time.perf_counter_ns()`` at its start."""
        child = self._event_children.get(event_type)
        if child is None:  # labels() takes a lock and builds a key: once per type
            child = self._event_children[event_type] = self.events.labels(event_type)
        child.inc()
        self.processing.observe(max(0, time.perf_counter_ns() - started_ns) / 1e9)
        if timestamp_ms is not None:
            lag = max(0.0, time.time() - timestamp_ms / 1000.0)
            self.event_time_lag.observe(lag)
            self.event_time_lag_last.set(lag)

    def on_events(
        self, types: Mapping[str, int], seconds: Sequence[float], timestamps_ms: Sequence[int]
    ) -> None:
        """Many events processed (a fetched batch): what :meth:`on_event` records for
        each, at a fraction of the cost.

        ``types``: how many events of each type; ``seconds``: each event's processing
        time; ``timestamps_ms``: each event's ``timestamp_ms`` (lag = wall clock now
        minus it, negative counts as 0; the last one sets the "last" gauge).  Why: one
        ``on_event`` is ~2.5 us (a lock per counter, sum and bucket), about 3 % of the
        worker's per-event CPU; here each counter, sum and bucket is incremented once
        per batch.
        """
        children = self._event_children
        for event_type, n in types.items():
            child = children.get(event_type)
            if child is None:
                child = children[event_type] = self.events.labels(event_type)
            child.inc(n)
        _observe_many(self.processing, seconds)
        if timestamps_ms:
            now = time.time()
            lags = [max(0.0, now - ts / 1000.0) for ts in timestamps_ms]
            _observe_many(self.event_time_lag, lags)
            self.event_time_lag_last.set(lags[-1])

    def on_outputs(self, output: EngineOutput | None) -> None:
        """Count what the engine produced for one event (nothing for a duplicate)."""
        if output is None or not output.applied:
            return
        for det in output.patterns:
            self.detections.labels(det.pattern.pattern_type).inc()
        if output.assessment is not None:
            self.on_assessment(output.assessment)

    def on_assessment(self, current: CurrentAssessment) -> None:
        """Count one new assessment; also the hook for timer-made ones (no EngineOutput)."""
        # Same rule as streams.worker.outputs: only an assessment with observer output is published.
        if current.assessments:
            self.assessments.labels(current.severity).inc()

    def on_dlq(self, reason_class: str) -> None:
        self.dlq.labels(reason_class).inc()

    # -- scrape ------------------------------------------------------------
    def sample_lag(self, lags: Mapping[int, int] | Iterable[tuple[int, int]]) -> None:
        """Set the per-partition lag gauge; partitions no longer given are removed."""
        items = dict(lags.items() if isinstance(lags, Mapping) else lags)
        for partition, lag in items.items():
            if lag < 0:
                raise ValueError(f"partition {partition}: negative lag {lag}")
            self.consumer_lag.labels(str(partition)).set(lag)
        for labels in list(self.consumer_lag._metrics):  # gauges of revoked partitions
            if int(labels[0]) not in items:
                self.consumer_lag.remove(*labels)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)


def _observe_many(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe(a)`` for each of ``amounts`` (finite, as the worker's are),
    incrementing the sum and each bucket touched once.

    Reads prometheus_client's Histogram internals (``_upper_bounds``, ``_buckets``:
    per-bucket counts, ``_sum``; 0.20-0.26); without them it observes one by one.
    ``tests/unit/worker/test_metrics_worker.py`` checks both give the same exposition.
    """
    if not amounts:
        return
    bounds: list[float] | None = getattr(histogram, "_upper_bounds", None)
    buckets: list[Any] | None = getattr(histogram, "_buckets", None)
    total: Any = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for amount in amounts:
            histogram.observe(amount)
        return
    counts = [0] * len(bounds)
    for amount in amounts:
        counts[bisect_left(bounds, amount)] += 1  # the first bound >= amount, as observe
    total.inc(math.fsum(amounts))
    for bucket, n in zip(buckets, counts, strict=True):
        if n:
            bucket.inc(n)


def faust_events_lag(app: object, events_topic: str) -> dict[int, int]:
    """Per-partition lag of ``events_topic`` as this worker's Faust consumer sees it.

    High watermark (from the last fetch response) minus the next offset to
    process (``Consumer._read_offset``, the offset the stream last handed to the
    agent, + 1).  A partition nothing was read from yet is skipped: its lag is
    unknown, and neither 0 nor the whole high watermark would be true.
    ``_read_offset`` is Faust internal (faust-streaming 0.15.3,
    ``faust/transport/consumer.py``).
    """
    consumer = app.consumer  # type: ignore[attr-defined]
    read = consumer._read_offset
    lags: dict[int, int] = {}
    for tp in consumer.assignment():
        if tp.topic != events_topic:
            continue
        high = consumer.highwater(tp)
        if high is None or high < 0:
            continue
        last = read.get(tp)
        if last is None:
            continue
        lags[tp.partition] = max(0, high - (last + 1))
    return lags


__all__ = [
    "CONTENT_TYPE",
    "LAG_BUCKETS",
    "PROCESSING_BUCKETS",
    "WorkerMetrics",
    "faust_events_lag",
]
