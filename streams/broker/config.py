"""Pure rendering of the files a local KRaft broker needs (no I/O, no processes).

Kept apart from the process code so the exact ``server.properties`` and log4j
settings are unit-testable and reviewable in one place.

Invariants:

* the broker is a single combined broker+controller (``node.id=1``) listening on
  ``host`` only (127.0.0.1 by default: a development broker must not be reachable
  from the network);
* every internal topic (offsets, transaction state) has replication factor 1 and
  ``min.isr`` 1, otherwise consumer groups and transactions never become available
  on one node;
* ``group.initial.rebalance.delay.ms=0`` so a test's first consumer joins at once.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streams.errors import ConfigError

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
SLF4J_BACKEND = ("org.slf4j", "slf4j-reload4j", "1.7.36")
DEPENDENCY_PLUGIN_VERSION = "3.6.1"


@dataclass(frozen=True)
class BrokerConfig:
    """What one local broker looks like.  ``data_dir`` holds everything it writes.

    ``auto_create_topics`` is False by default: every process of this project
    creates its topics explicitly (router/SDK through the admin API, Faust through
    its own admin calls), and a broker that silently creates topics on a produce
    or a metadata request hides exactly the bug where a topic is never created
    (with the wrong partition count or cleanup policy).  Turn it on only to run
    third-party code that relies on it.
    """

    data_dir: Path
    port: int = 9092
    controller_port: int = 9093
    host: str = "127.0.0.1"
    node_id: int = 1
    auto_create_topics: bool = False
    num_partitions: int = 1
    internal_topic_partitions: int = 10
    overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("port", "controller_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 < value < 65536:
                raise ConfigError(name, f"{value!r} is not a TCP port: use 1-65535")
        if self.port == self.controller_port:
            raise ConfigError(
                "controller_port",
                f"{self.controller_port} equals the broker port: pick a different port "
                f"(e.g. --controller-port {self.port + 1})",
            )
        if self.num_partitions < 1:
            raise ConfigError("num_partitions", "must be >= 1")
        if self.internal_topic_partitions < 1:
            raise ConfigError("internal_topic_partitions", "must be >= 1")
        for key, value in self.overrides.items():
            if "\n" in key or "\n" in str(value) or "=" in key:
                raise ConfigError(f"overrides.{key}", "keys/values must be single-line, no '='")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        """Kafka's data (the topic partitions and the KRaft metadata log)."""
        return self.data_dir / "data"

    @property
    def logs_dir(self) -> Path:
        """Human-readable logs (log4j output and the JVM's stdout/stderr)."""
        return self.data_dir / "logs"

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log4j_path(self) -> Path:
        return self.data_dir / "log4j.properties"

    @property
    def state_path(self) -> Path:
        return self.data_dir / "broker.json"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.logs_dir / "stdout.log"


def server_properties(cfg: BrokerConfig) -> dict[str, str]:
    """The broker's settings as an ordered mapping (overrides applied last)."""
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(cfg.node_id),
        "controller.quorum.voters": f"{cfg.node_id}@{cfg.host}:{cfg.controller_port}",
        "listeners": f"PLAINTEXT://{cfg.host}:{cfg.port},CONTROLLER://{cfg.host}:{cfg.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{cfg.host}:{cfg.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(cfg.log_dir),
        "num.partitions": str(cfg.num_partitions),
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(cfg.internal_topic_partitions),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": str(cfg.internal_topic_partitions),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true" if cfg.auto_create_topics else "false",
        "delete.topic.enable": "true",
        # The cleaner's default 128 MiB dedupe buffer is most of a small dev heap.
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # Every partition's segment preallocates a sparse, mmapped offset and time
        # index of this size (default 10 MiB each).  Tests and benchmarks create
        # thousands of partitions; once their indexes are written the page cache
        # fills with index pages and the broker thrashes on page faults (seen: one
        # core pinned, produce stalled for tens of seconds).  1 MiB still indexes
        # ~350 MiB of log per segment.  Session topics set 128 KiB themselves.
        "log.index.size.max.bytes": str(1024 * 1024),
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    for key, value in cfg.overrides.items():
        props[key] = str(value)
    return props


def render_properties(props: Mapping[str, str], header: str = "") -> str:
    """Java ``.properties`` text; values here never need escaping except ``\\``."""
    lines = [f"# {line}" for line in header.splitlines()]
    for key, value in props.items():
        lines.append(f"{key}={value.replace(chr(92), chr(92) * 2)}")
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """Inverse of :func:`render_properties` (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ConfigError(f"line {number}", f"{raw!r} is not key=value")
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().replace("\\\\", "\\")
    return out


def log4j_properties(cfg: BrokerConfig, *, console: bool = False) -> dict[str, str]:
    """Readable logs: INFO for the broker's own lifecycle, WARN for chatty internals.

    To a size-capped rolling file (10 MiB x 3) in ``logs/``, or to stdout when
    ``console`` (``--foreground``).
    """
    appender = "stdout" if console else "file"
    props: dict[str, str] = {"log4j.rootLogger": f"INFO, {appender}"}
    if console:
        props.update(
            {
                "log4j.appender.stdout": "org.apache.log4j.ConsoleAppender",
                "log4j.appender.stdout.layout": "org.apache.log4j.PatternLayout",
                "log4j.appender.stdout.layout.ConversionPattern": "[%d] %p %m (%c{1})%n",
            }
        )
    else:
        props.update(
            {
                "log4j.appender.file": "org.apache.log4j.RollingFileAppender",
                "log4j.appender.file.File": str(cfg.server_log),
                "log4j.appender.file.MaxFileSize": "10MB",
                "log4j.appender.file.MaxBackupIndex": "2",
                "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
                "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c{1})%n",
            }
        )
    for logger in (
        "org.apache.kafka",
        "kafka.log",
        "kafka.cluster",
        "kafka.coordinator",
        "kafka.controller",
        "kafka.network",
        "kafka.server",
        "kafka.raft",
        "kafka.utils",
        "state.change.logger",
        "org.apache.zookeeper",
    ):
        props[f"log4j.logger.{logger}"] = "WARN"
    # The lines that say "started" / "shut down" are worth keeping.
    props["log4j.logger.kafka.server.KafkaRaftServer"] = "INFO"
    props["log4j.logger.kafka.server.BrokerServer"] = "INFO"
    props["log4j.logger.kafka.server.ControllerServer"] = "INFO"
    return props


def random_cluster_id(raw: bytes | None = None) -> str:
    """A cluster id in the form of ``kafka-storage random-uuid``.

    Kafka's ``Uuid.randomUuid()``: 16 random bytes, URL-safe base64 without
    padding (22 characters), never starting with ``-`` (it would read as a CLI
    option).  Done here rather than by spawning a JVM, which costs seconds.
    """
    while True:
        data = raw if raw is not None else os.urandom(16)
        if len(data) != 16:
            raise ConfigError("cluster_id", f"needs 16 bytes, got {len(data)}")
        text = base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text
        if raw is not None:
            raise ConfigError("cluster_id", "these bytes encode to an id starting with '-'")


__all__ = [
    "DEPENDENCY_PLUGIN_VERSION",
    "KAFKA_VERSION",
    "SCALA_VERSION",
    "SLF4J_BACKEND",
    "BrokerConfig",
    "log4j_properties",
    "parse_properties",
    "random_cluster_id",
    "render_properties",
    "server_properties",
]
