"""The state file of a running local broker, and the truth about its pid.

``<data_dir>/broker.json`` is written (atomically) once the JVM is spawned and
removed by a clean stop.  It can go stale (machine reboot, ``kill -9``, a crash):
so a pid in it is only believed if that process is alive, is not a zombie, and
-- where ``/proc`` exists -- is a ``kafka.Kafka`` JVM started with *this*
data dir's ``server.properties`` (a recycled pid is not our broker).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from streams.errors import BrokerError

STATE_VERSION = 1


@dataclass(frozen=True)
class BrokerState:
    pid: int
    host: str
    port: int
    controller_port: int
    data_dir: str
    properties: str
    kafka_version: str
    started_at_ms: int
    version: int = STATE_VERSION

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def write_state(path: Path, state: BrokerState) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_state(path: Path) -> BrokerState | None:
    """The recorded state, or None if there is none; BrokerError if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BrokerError(
            f"{path}: not valid JSON ({exc}); delete it if no broker runs from this data dir"
        ) from exc
    if not isinstance(raw, dict):
        raise BrokerError(f"{path}: expected a JSON object; delete it if no broker runs")
    if raw.get("version") != STATE_VERSION:
        raise BrokerError(
            f"{path}: version {raw.get('version')!r} is not {STATE_VERSION}; "
            "delete it if no broker runs from this data dir"
        )
    fields = BrokerState.__dataclass_fields__
    missing = sorted(set(fields) - set(raw))
    if missing:
        raise BrokerError(f"{path}: missing {', '.join(missing)}; delete it if no broker runs")
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise BrokerError(f"{path}: unknown keys {', '.join(unknown)}")
    for name in ("pid", "port", "controller_port", "started_at_ms"):
        if not isinstance(raw[name], int) or isinstance(raw[name], bool):
            raise BrokerError(f"{path}: {name} must be an integer, got {raw[name]!r}")
    return BrokerState(**raw)


def remove_state(path: Path) -> None:
    path.unlink(missing_ok=True)


def _proc_stat_state(pid: int) -> str | None:
    """The one-letter process state from /proc (None where /proc is unavailable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    except OSError:
        return None
    # "pid (comm) S ..." -- comm may contain spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[0] if ")" in stat else None


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    state = _proc_stat_state(pid)
    return state not in ("Z", "X", "gone")


def process_cmdline(pid: int) -> list[str] | None:
    """argv of ``pid`` from /proc, or None where /proc is unavailable/unreadable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def is_our_broker(state: BrokerState) -> bool:
    """The recorded pid is alive and (where checkable) is this data dir's broker."""
    if not pid_alive(state.pid):
        return False
    argv = process_cmdline(state.pid)
    if argv is None:
        return True  # no /proc (macOS): liveness is all we can check
    return "kafka.Kafka" in argv and state.properties in argv


__all__ = [
    "STATE_VERSION",
    "BrokerState",
    "is_our_broker",
    "pid_alive",
    "process_cmdline",
    "read_state",
    "remove_state",
    "write_state",
]
