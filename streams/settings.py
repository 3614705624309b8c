"""Deployment settings shared by the SDK, router, worker and CLI.

Values come from keyword arguments, else ``TRAJECTORY_*`` / ``KAFKA_BOOTSTRAP``
environment variables, else the defaults below.  Topic names are derived here
and nowhere else, so every process agrees on them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from streams.errors import ConfigError, InvalidEventError
from streams.security import SecurityConfig, current

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def check_session_id(session_id: str) -> str:
    """Session ids become topic names, so they use Kafka's topic charset."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise InvalidEventError(
            "session_id",
            f"{session_id!r} is not a valid session id: use 1-200 characters of "
            "letters, digits, '.', '_' or '-' (it becomes part of a Kafka topic name)",
        )
    return session_id


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(name, f"expected an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Settings:
    bootstrap: str = field(
        default_factory=lambda: os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    prefix: str = field(default_factory=lambda: os.environ.get("TRAJECTORY_PREFIX", "traj"))
    events_partitions: int = field(
        default_factory=lambda: _env_int("TRAJECTORY_EVENTS_PARTITIONS", 6)
    )
    schema_registry_url: str | None = field(
        default_factory=lambda: os.environ.get("TRAJECTORY_SCHEMA_REGISTRY_URL") or None
    )
    max_message_bytes: int = field(
        default_factory=lambda: _env_int("TRAJECTORY_MAX_MESSAGE_BYTES", 1024 * 1024)
    )
    max_payload_bytes: int = field(
        default_factory=lambda: _env_int("TRAJECTORY_MAX_PAYLOAD_BYTES", 64 * 1024)
    )
    privacy: str = field(default_factory=lambda: os.environ.get("TRAJECTORY_PRIVACY", "full"))
    session_retention_ms: int = field(
        default_factory=lambda: _env_int("TRAJECTORY_SESSION_RETENTION_MS", 7 * 24 * 3600 * 1000)
    )
    #: TLS/SASL of every Kafka client (streams.security; flags > TRAJECTORY_* > properties file)
    security: SecurityConfig = field(default_factory=current)

    def __post_init__(self) -> None:
        if not re.match(r"^[A-Za-z0-9_-]{1,100}$", self.prefix):
            raise ConfigError(
                "prefix", f"{self.prefix!r}: use letters, digits, '_' or '-' (no dots)"
            )
        if self.privacy not in ("full", "summary"):
            raise ConfigError("privacy", f"{self.privacy!r}: use 'full' or 'summary'")
        if self.events_partitions < 1:
            raise ConfigError("events_partitions", "must be >= 1")

    def with_(self, **changes: Any) -> Settings:
        known = {f.name for f in fields(self)}
        for key in changes:
            if key not in known:
                raise ConfigError(key, f"unknown setting; known: {', '.join(sorted(known))}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    # topic names -----------------------------------------------------------
    def session_topic(self, session_id: str) -> str:
        return f"{self.prefix}.session.{check_session_id(session_id)}"

    @property
    def session_topic_regex(self) -> str:
        return "^" + re.escape(f"{self.prefix}.session.") + r"[A-Za-z0-9._-]+$"

    @property
    def events_topic(self) -> str:
        return f"{self.prefix}.events"

    @property
    def dlq_topic(self) -> str:
        return f"{self.prefix}.dlq"

    @property
    def patterns_topic(self) -> str:
        return f"{self.prefix}.patterns"

    @property
    def assessments_topic(self) -> str:
        return f"{self.prefix}.assessments"

    @property
    def assessment_history_topic(self) -> str:
        """Every assessment, time-retained (the compacted assessments topic keeps the latest)."""
        return f"{self.prefix}.assessment-history"

    @property
    def snapshots_topic(self) -> str:
        return f"{self.prefix}.snapshots"

    @property
    def control_topic(self) -> str:
        return f"{self.prefix}.control"


__all__ = ["SESSION_ID_RE", "Settings", "check_session_id"]
