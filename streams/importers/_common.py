"""Shared plumbing of the importers: reading (gzip-transparent), session ids, seq.

Invariants every importer keeps through :class:`SessionWriter`:

* every event of a session carries the same sanitized ``session_id``;
* ``seq`` counts from 0 per session, with no gaps, in emission order;
* ``timestamp_ms`` never goes backwards within a session (a source time that
  would move the clock back is clamped to the previous event's time), so the
  event-time logic downstream sees a monotonic session clock.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streams.core.events import Budget, EventType, JsonValue, TraceEvent
from streams.errors import ImportFormatError

#: gzip files start with these two bytes whatever their name says.
GZIP_MAGIC = b"\x1f\x8b"

#: Synthetic event-time base for formats without timestamps (2024-01-01T00:00:00Z).
#: Fixed, so importing the same file twice gives identical events.
SYNTHETIC_BASE_MS = 1_704_067_200_000
#: Synthetic spacing between steps of formats without timestamps.
SYNTHETIC_STEP_MS = 1_000

_SESSION_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_SESSION_ID_MAX = 200
_SUMMARY_MAX = 200


def read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic bytes."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ImportFormatError(str(path), f"corrupt gzip data: {exc}") from exc
    return raw


def read_text(path: Path) -> str:
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            str(path), f"not UTF-8 text (byte {exc.start}); trajectory files are JSON"
        ) from exc


def file_stem(path: Path) -> str:
    """The file name without ``.gz`` and the format suffixes (``.traj.json``...)."""
    name = path.name
    for suffix in (".gz", ".json", ".jsonl", ".traj", ".ndjson"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    for suffix in (".traj", ".json", ".jsonl"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def sanitize_session_id(raw: str) -> str:
    """A valid session id (``[A-Za-z0-9._-]{1,200}``) derived deterministically from *raw*.

    Runs of other characters become ``_``; ids longer than 200 characters keep a
    prefix and a hash of the whole, so distinct long ids stay distinct.
    """
    cleaned = _SESSION_ID_BAD.sub("_", raw).strip("_") or "session"
    if len(cleaned) > _SESSION_ID_MAX:
        digest = hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]
        cleaned = cleaned[: _SESSION_ID_MAX - 17] + "-" + digest
    return cleaned


def summarize(value: object) -> str:
    """A one-line, at most 200-character description of tool parameters."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 3] + "..."


def meta(values: Mapping[str, object]) -> dict[str, str]:
    """String metadata: ``None`` values are left out, others JSON-encoded unless str."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, str):
            out[key] = value
        else:
            out[key] = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return out


def as_int(value: object) -> int | None:
    """Ints, integral floats and digit strings as int; anything else as None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def json_value(value: Any) -> JsonValue:
    """*value* as a JSON value (it came out of ``json.loads``, so it already is one)."""
    return value  # type: ignore[no-any-return]


class SessionWriter:
    """Builds one session's events with consecutive ``seq`` and a monotonic clock."""

    def __init__(self, session_id: str, start_ms: int) -> None:
        self.session_id = sanitize_session_id(session_id)
        self.last_ms = start_ms
        self.events: list[TraceEvent] = []
        self._call_ids: dict[str, int] = {}

    def unique_call_id(self, raw: str | None) -> str:
        """A call id unique in this session (sources reuse ids, e.g. tau-bench)."""
        base = raw or f"call-{len(self._call_ids)}"
        n = self._call_ids.get(base, 0)
        self._call_ids[base] = n + 1
        return base if n == 0 else f"{base}#{n}"

    def emit(
        self,
        etype: EventType,
        timestamp_ms: int | None = None,
        *,
        call_id: str | None = None,
        tool_name: str | None = None,
        input: JsonValue = None,
        output: JsonValue = None,
        params_summary: str | None = None,
        is_error: bool = False,
        error_message: str | None = None,
        text: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        latency_ms: int | None = None,
        metadata: Mapping[str, str] | None = None,
        budget: Budget | None = None,
    ) -> TraceEvent:
        ts = self.last_ms if timestamp_ms is None else max(timestamp_ms, self.last_ms)
        self.last_ms = ts
        event = TraceEvent(
            type=etype,
            session_id=self.session_id,
            seq=len(self.events),
            timestamp_ms=ts,
            call_id=call_id,
            tool_name=tool_name,
            input=input,
            output=output,
            params_summary=params_summary,
            is_error=is_error,
            error_message=error_message,
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_ms=latency_ms,
            metadata=dict(metadata or {}),
            budget=budget,
        )
        self.events.append(event)
        return event


__all__ = [
    "GZIP_MAGIC",
    "SYNTHETIC_BASE_MS",
    "SYNTHETIC_STEP_MS",
    "SessionWriter",
    "as_int",
    "file_stem",
    "json_value",
    "meta",
    "read_bytes",
    "read_text",
    "sanitize_session_id",
    "summarize",
]
