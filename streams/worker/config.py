"""The worker's own settings, one frozen value: what ``create_app(settings, config)`` builds.

:class:`~streams.settings.Settings` says where Kafka is and what the topics are
called (shared with the router and the SDK); :class:`WorkerConfig` says how this
worker runs (store, data dir, intervals, HTTP view, group membership).
``trajectory worker`` builds it from its flags (``streams.commands.worker``), and
tests and benchmarks build it directly.

Invariant: a ``WorkerConfig`` that exists is valid.  ``__post_init__`` checks every
field before any Kafka or Faust work, and its :class:`ConfigError` names the
``trajectory worker`` flag to fix (or the field, for those without a flag).  Stdlib
only at run time: importing this module does not import Faust.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streams.errors import ConfigError
from streams.worker.stall import DEFAULT_STALL_S

if TYPE_CHECKING:
    from streams.core.config import EngineConfig
    from streams.core.events import TraceEvent
    from streams.worker.auth import ViewAuth
    from streams.worker.metrics import WorkerMetrics

    Decoder = Callable[[bytes], TraceEvent]

#: ``--store`` choice -> Faust store URL.
STORES = {"rocksdb": "rocksdb://", "memory": "memory://"}
#: How long the group waits for a silent worker (Faust: 60 s; docs/guarantees.md).
DEFAULT_SESSION_TIMEOUT_S = 10.0
#: The broker's default group.min.session.timeout.ms / group.max.session.timeout.ms.
MIN_SESSION_TIMEOUT_S = 6.0
MAX_SESSION_TIMEOUT_S = 1800.0
#: About how long a changed session (its detector state, counters, budget and
#: minutes) waits for its flush (docs/guarantees.md "Sessions wait for their flush").
#: 30 s, Kafka Streams' default commit interval: with full trajectory windows a flush
#: re-encodes a session's whole state, and at 5 s that was half the worker's CPU.
DEFAULT_ENGINE_FLUSH_INTERVAL_S = 30.0
#: How long Faust waits for a Kafka request of its own, the recovery's seek to the
#: committed offsets included (Faust's ``broker_request_timeout``, set explicitly);
#: when that seek runs out, Faust ends recovery silently for good.
BROKER_REQUEST_TIMEOUT_S = 90.0
#: A seek to the committed offsets that has not ended after this long stops the
#: worker (``SeekTimeoutError``), before Faust's own timeout above: Kafka's consumer
#: gives an offset fetch ``default.api.timeout.ms`` = 60 s too.
DEFAULT_SEEK_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker runs (``trajectory worker --help`` explains each flag).

    ``store``: ``"rocksdb://"`` (rocksdict files under ``data_dir``, recovered
    incrementally from the changelog) or ``"memory://"`` (rebuilt from the changelog
    on every start); ``"rocksdb"``/``"memory"`` are accepted and normalized.
    ``data_dir`` defaults to ``./<prefix>-observer-data``; with ``worker_id`` the
    tables live in its sub-folder ``worker_id``.  ``partitions`` must equal the
    partition count of ``<prefix>.events`` (default: ``settings.events_partitions``).
    ``decode`` turns message bytes into a TraceEvent (default: the Avro serde).
    ``with_engine`` adds the ``engines`` table running the core engine
    (``engine_config``, default ``EngineConfig()``).  ``timer_interval_s`` None or 0:
    no timer assessments.  ``metrics`` defaults to a fresh ``WorkerMetrics``.
    ``max_sessions_in_memory`` bounds the decoded per-session caches.
    ``engine_flush_interval_s``: a changed session's values (detector state,
    counters, budget, minutes) are written about this long after they changed (new,
    ended: at the next commit), its partition's offset commit held back meanwhile; 0
    writes them at every commit.
    ``view_auth`` / ``web_ssl_context``: bearer tokens / HTTPS for the HTTP view.

    ``group_instance_id`` makes the worker a *static* group member (KIP-345): one
    restarted with the same id (after a crash, SIGKILL included) gets its partitions
    back at once instead of after the dead member's session timeout.
    ``session_timeout_s`` is how long the group waits for a silent member before its
    partitions move (the broker accepts 6-1800 s).
    ``stall_warn_s``: an events partition held (records to handle, paused, no seek)
    with no progress for this long is named at WARNING (streams/worker/stall.py).
    ``seek_timeout_s``: a seek to the committed offsets that has not ended after
    this long stops the worker non-zero (``SeekTimeoutError``); it must be below
    ``BROKER_REQUEST_TIMEOUT_S``, when Faust would end recovery silently instead.
    """

    store: str = "rocksdb://"
    data_dir: str | Path | None = None
    web_port: int = 6066
    web_enabled: bool = True
    worker_id: str | None = None
    partitions: int | None = None
    decode: Decoder | None = None
    commit_interval_s: float = 1.0
    engine_flush_interval_s: float = DEFAULT_ENGINE_FLUSH_INTERVAL_S
    with_engine: bool = True
    engine_config: EngineConfig | None = None
    producer_linger_s: float = 0.005
    commit_every: int = 50_000
    timer_interval_s: float | None = 1.0
    metrics: WorkerMetrics | None = None
    max_sessions_in_memory: int = 10_000
    view_auth: ViewAuth | None = None
    web_ssl_context: ssl.SSLContext | None = None
    group_instance_id: str | None = None
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    stall_warn_s: float = DEFAULT_STALL_S
    seek_timeout_s: float = DEFAULT_SEEK_TIMEOUT_S

    def __post_init__(self) -> None:
        store = STORES.get(self.store, self.store)
        if store not in STORES.values():
            raise ConfigError(
                "--store", f"{self.store!r}: use rocksdb or memory ('rocksdb://', 'memory://')"
            )
        object.__setattr__(self, "store", store)
        if self.timer_interval_s == 0:
            object.__setattr__(self, "timer_interval_s", None)
        if not self.commit_interval_s > 0:
            raise ConfigError(
                "--commit-interval", f"{self.commit_interval_s}: give a positive number of seconds"
            )
        if not self.engine_flush_interval_s >= 0:
            raise ConfigError(
                "--engine-flush-interval",
                f"{self.engine_flush_interval_s}: give seconds >= 0 (0: every commit)",
            )
        if self.timer_interval_s is not None and not self.timer_interval_s > 0:
            raise ConfigError(
                "--timer-interval",
                f"{self.timer_interval_s}: give a positive number of seconds (0: no timer)",
            )
        if not MIN_SESSION_TIMEOUT_S <= self.session_timeout_s <= MAX_SESSION_TIMEOUT_S:
            raise ConfigError(
                "--session-timeout",
                f"{self.session_timeout_s}: give {MIN_SESSION_TIMEOUT_S:g}-"
                f"{MAX_SESSION_TIMEOUT_S:g} seconds "
                "(the broker's group.min/max.session.timeout.ms)",
            )
        if not self.stall_warn_s > 0:
            raise ConfigError(
                "--stall-warn", f"{self.stall_warn_s}: give a positive number of seconds, e.g. 20"
            )
        if not 0 < self.seek_timeout_s < BROKER_REQUEST_TIMEOUT_S:
            raise ConfigError(
                "--seek-timeout",
                f"{self.seek_timeout_s}: give seconds above 0 and below "
                f"{BROKER_REQUEST_TIMEOUT_S:g} (Faust's broker_request_timeout: past it "
                "Faust ends recovery silently instead), e.g. 60",
            )
        if self.max_sessions_in_memory < 1:
            raise ConfigError(
                "--max-sessions-in-memory", f"{self.max_sessions_in_memory}: must be at least 1"
            )
        if not 0 <= self.web_port <= 65535:
            raise ConfigError("--web-port", f"{self.web_port}: give a TCP port, 0-65535")
        if self.worker_id is not None and not self.worker_id.strip():
            raise ConfigError("--worker-id", "empty: give a stable name, or leave it out")
        if self.partitions is not None and self.partitions < 1:
            raise ConfigError(
                "partitions", f"{self.partitions}: the partition count of <prefix>.events, >= 1"
            )
        if self.commit_every < 1:
            raise ConfigError("commit_every", f"{self.commit_every}: must be at least 1 record")
        if self.producer_linger_s < 0:
            raise ConfigError("producer_linger_s", f"{self.producer_linger_s}: must be >= 0")


__all__ = [
    "DEFAULT_ENGINE_FLUSH_INTERVAL_S",
    "DEFAULT_SESSION_TIMEOUT_S",
    "MAX_SESSION_TIMEOUT_S",
    "MIN_SESSION_TIMEOUT_S",
    "STORES",
    "WorkerConfig",
]
