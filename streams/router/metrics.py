"""Prometheus metrics of the ingest router (``trajectory router --metrics-port N``).

Why counts move at commit time: in exactly-once mode the router forwards in
Kafka transactions, and an aborted transaction's messages are consumed again.
Counting at consume time would count them twice, so accepted / dead-lettered
messages are held per open batch (:meth:`RouterMetrics.on_accepted`,
:meth:`RouterMetrics.on_rejected`) and added to the counters by
:meth:`RouterMetrics.on_commit`, or dropped (and counted as aborted) by
:meth:`RouterMetrics.on_abort`.  So the counters equal what read_committed
readers of ``<prefix>.events`` / ``<prefix>.dlq`` see.  In at-least-once mode
they are added by :meth:`RouterMetrics.on_flushed`, after the producer flush
that confirmed their delivery (whether or not the offset commit that follows
succeeds: the messages are in Kafka either way).

Which families move in which mode (``trajectory_router_guarantee{guarantee=...}``
is 1 for the running mode): ``transactions``, ``aborted_*`` and
``transaction_seconds`` in exactly-once mode; ``offset_commits``,
``failed_offset_commits``, ``flush_seconds`` and ``offset_commit_seconds`` in
at-least-once mode; ``commit_seconds`` in both (the time the router loop is
blocked per commit: at-least-once, the flush only, as its offset commit is
asynchronous).  A static shard (``--shard I/N``) also exposes
``trajectory_router_shard{index="I",count="N"}`` = 1, so an alert can compare the
shards up with ``N`` (a stopped shard's topics wait for it).

Consumer lag per source partition (high watermark - position) is sampled by
:meth:`RouterMetrics.maybe_sample` from the router's own loop every
``sample_interval_s`` (librdkafka's client is used from the router thread only;
the cached high watermark is updated by every fetch response, so sampling costs
no broker round trip).

Own :class:`~prometheus_client.CollectorRegistry` per instance (tests run
several routers in one process).  :meth:`RouterMetrics.serve` starts
``prometheus_client``'s HTTP server on a port (daemon thread).
Label values are bounded: event types, error classes, topic+partition of the
router's assignment (one per session topic: with many sessions this is the
largest family; partitions that are no longer assigned are removed).
"""

from __future__ import annotations

import time
from collections import Counter as _Tally
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest, start_http_server

TXN_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 10.0)


def _only(gauge: Gauge, *labels: str) -> None:
    """Set ``gauge{labels}`` to 1 and drop every other label set it had (an info
    gauge: one value at a time)."""
    for old in list(gauge._metrics):
        gauge.remove(*old)
    gauge.labels(*labels).set(1)


class RouterMetrics:
    """The router's metric families (see the module docstring)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        sample_interval_s: float = 2.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.sample_interval_s = sample_interval_s
        self._clock = clock
        self._next_sample = 0.0
        self._pending_types: _Tally[str] = _Tally()
        self._pending_dlq: _Tally[str] = _Tally()
        r = self.registry
        self.guarantee = Gauge(
            "trajectory_router_guarantee",
            "1 for the processing guarantee this router runs with (exactly-once | at-least-once)",
            ["guarantee"],
            registry=r,
        )
        self.shard = Gauge(
            "trajectory_router_shard",
            "1 for the static shard this router runs as (--shard index/count); absent for "
            "a member of the router group",
            ["index", "count"],
            registry=r,
        )
        self.events = Counter(
            "trajectory_router_events",
            "Events forwarded to <prefix>.events (committed transactions, or delivery "
            "confirmed by a flush in at-least-once mode), by type",
            ["type"],
            registry=r,
        )
        self.dlq = Counter(
            "trajectory_router_dlq",
            "Messages dead-lettered (committed transactions, or delivery confirmed by a "
            "flush in at-least-once mode), by error class",
            ["reason_class"],
            registry=r,
        )
        self.transactions = Counter(
            "trajectory_router_transactions", "Committed transactions", registry=r
        )
        self.aborts = Counter(
            "trajectory_router_aborted_transactions", "Aborted transactions", registry=r
        )
        self.aborted_messages = Counter(
            "trajectory_router_aborted_messages",
            "Messages in aborted transactions (consumed again afterwards)",
            registry=r,
        )
        self.txn_seconds = Histogram(
            "trajectory_router_transaction_seconds",
            "Wall time of a transaction from begin to committed (bounded by --batch-ms "
            "plus the commit round trips): the latency the router adds",
            buckets=TXN_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "trajectory_router_commit_seconds",
            "Wall time the router loop is blocked per commit: send_offsets_to_transaction + "
            "commit_transaction (exactly-once), or the producer flush (at-least-once: the "
            "offset commit that follows is asynchronous)",
            buckets=TXN_BUCKETS,
            registry=r,
        )
        self.offset_commits = Counter(
            "trajectory_router_offset_commits",
            "At-least-once: consumer offset commits after a producer flush",
            registry=r,
        )
        self.failed_offset_commits = Counter(
            "trajectory_router_failed_offset_commits",
            "At-least-once: offset commits the broker refused (e.g. during a rebalance); "
            "the messages were delivered, a restart would route them again",
            registry=r,
        )
        self.flush_seconds = Histogram(
            "trajectory_router_flush_seconds",
            "At-least-once: producer flush before an offset commit (waits for the "
            "in-flight deliveries; the loop is blocked meanwhile)",
            buckets=TXN_BUCKETS,
            registry=r,
        )
        self.offset_commit_seconds = Histogram(
            "trajectory_router_offset_commit_seconds",
            "At-least-once: from the flush's start to the answer of the asynchronous "
            "offset commit that followed it (accepted or refused)",
            buckets=TXN_BUCKETS,
            registry=r,
        )
        self.consumer_replacements = Counter(
            "trajectory_router_consumer_replacements",
            "Consumers the router replaced, by reason: fenced (the group fenced it), "
            "discovery (session topics left without a live owner), stall (partitions "
            "with records it did not fetch), cut_off (its connections broken while "
            "the cluster answered another client), commit_unknown (after a commit given "
            "up with its outcome unknown: the new one resumes from the committed offsets)",
            ["reason"],
            registry=r,
        )
        self.admin_helper_deaths = Counter(
            "trajectory_router_admin_helper_deaths",
            "The router's admin helper process died (librdkafka's admin client "
            "aborts around broker outages, librdkafka#4605) and was replaced",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "trajectory_router_consumer_lag_messages",
            "Per source partition: high watermark - consumer position (sampled)",
            ["topic", "partition"],
            registry=r,
        )

    # -- hooks (router thread) --------------------------------------------
    def set_guarantee(self, guarantee: str) -> None:
        """Called by the router at start: exposes its mode (only one label is 1)."""
        _only(self.guarantee, guarantee)

    def set_shard(self, index: int, count: int) -> None:
        """Called by a static shard at start (an alert can compare the shards up with
        ``count``)."""
        _only(self.shard, str(index), str(count))

    def on_accepted(self, event_type: str) -> None:
        self._pending_types[event_type] += 1

    def on_rejected(self, error_class: str) -> None:
        self._pending_dlq[error_class] += 1

    def _count_pending(self) -> None:
        for event_type, n in self._pending_types.items():
            self.events.labels(event_type).inc(n)
        for error_class, n in self._pending_dlq.items():
            self.dlq.labels(error_class).inc(n)
        self._pending_types.clear()
        self._pending_dlq.clear()

    def on_commit(self, txn_seconds: float, commit_seconds: float) -> None:
        """Exactly-once: the open transaction committed; its messages count now."""
        self._count_pending()
        self.transactions.inc()
        self.txn_seconds.observe(max(0.0, txn_seconds))
        self.commit_seconds.observe(max(0.0, commit_seconds))

    def on_flushed(self, flush_seconds: float) -> None:
        """At-least-once: a flush confirmed delivery of the batch's messages (they
        count now); the loop was blocked for ``flush_seconds``."""
        self._count_pending()
        self.flush_seconds.observe(max(0.0, flush_seconds))
        self.commit_seconds.observe(max(0.0, flush_seconds))

    def on_offsets_commit(self, seconds: float, *, ok: bool = True) -> None:
        """At-least-once: the answer to an asynchronous offset commit came back,
        ``seconds`` after its flush began: accepted (``ok``) or refused."""
        if ok:
            self.offset_commits.inc()
        else:
            self.failed_offset_commits.inc()
        self.offset_commit_seconds.observe(max(0.0, seconds))

    def on_abort(self, messages: int) -> None:
        """The open transaction was aborted: its messages will be consumed again."""
        self._pending_types.clear()
        self._pending_dlq.clear()
        self.aborts.inc()
        self.aborted_messages.inc(messages)

    def on_consumer_replaced(self, reason: str) -> None:
        self.consumer_replacements.labels(reason).inc()

    def on_admin_helper_death(self) -> None:
        self.admin_helper_deaths.inc()

    def maybe_sample(self, consumer: Any, assigned: Iterable[Any]) -> None:
        """Every ``sample_interval_s``: lag = cached high watermark - position."""
        now = self._clock()
        if now < self._next_sample:
            return
        self._next_sample = now + self.sample_interval_s
        tps = list(assigned)
        lags: dict[tuple[str, str], int] = {}
        if tps:
            for tp in consumer.position(tps):
                if tp.offset < 0:  # nothing consumed yet: no position to compare
                    continue
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
                if high < 0:
                    continue
                lags[(tp.topic, str(tp.partition))] = max(0, high - tp.offset)
        self.set_lags(lags)

    def set_lags(self, lags: dict[tuple[str, str], int]) -> None:
        for (topic, partition), lag in lags.items():
            self.consumer_lag.labels(topic, partition).set(lag)
        for labels in list(self.consumer_lag._metrics):
            if labels not in lags:
                self.consumer_lag.remove(*labels)

    # -- exposition --------------------------------------------------------
    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on ``addr:port`` (daemon thread); returns the server."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server


__all__ = ["TXN_BUCKETS", "RouterMetrics"]
