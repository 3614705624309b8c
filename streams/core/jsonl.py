"""The JSON Lines form of :class:`~streams.core.events.TraceEvent`.

It is a superset of AgentV's ``TraceEvent`` (``type``, ``timestamp`` as ISO-8601,
``id``, ``name``, ``input``, ``output``, ``text``, ``metadata``) plus ``session_id``
and the fields our model adds.  One JSON object per line; this is what the CLI
reads and writes.  Mapping:

=====================  ======================================
JSON key               TraceEvent field
=====================  ======================================
``type``               ``type``
``timestamp``          ``timestamp_ms`` (ISO-8601, UTC, ms)
``id``                 ``call_id``
``name``               ``tool_name``
``input``/``output``   ``input``/``output``
``text``               ``text``
``metadata``           ``metadata`` (string values)
``session_id``         ``session_id``
``seq``                ``seq`` (defaults to the line's position)
``agent_id``           ``agent_id``
``parent_session_id``  ``parent_session_id``
``params_summary``     ``params_summary``
``is_error``           ``is_error``
``error``              ``error_message``
``usage``              ``{"input_tokens", "output_tokens"}``
``latency_ms``         ``latency_ms``
``budget``             ``{"deadline", "max_tokens", "tokens_used", "max_tool_calls"}``
=====================  ======================================

Keys whose value is the default are omitted when writing, so AgentV-only readers
see the familiar shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from streams.core.errors import InvalidEventError
from streams.core.events import EVENT_TYPES, Budget, EventType, JsonValue, TraceEvent

#: second -> its ISO-8601 text up to the ".": events come many per second, and
#: ``strftime`` was most of the worker's per-event ``event_to_json``.  Bounded:
#: cleared when full.
_ISO_SECONDS: dict[int, str] = {}
_ISO_SECONDS_MAX = 4096


def ms_to_iso(ms: int) -> str:
    """Epoch milliseconds to ISO-8601 UTC with millisecond precision and a ``Z``."""
    second, milli = divmod(ms, 1000)
    head = _ISO_SECONDS.get(second)
    if head is None:
        # the second's own timestamp: the same date and time fields as ms / 1000 has
        head = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        if len(_ISO_SECONDS) >= _ISO_SECONDS_MAX:
            _ISO_SECONDS.clear()
        _ISO_SECONDS[second] = head
    return f"{head}{milli:03d}Z"


def iso_to_ms(value: str, *, field: str = "timestamp") -> int:
    """ISO-8601 (``Z`` or offset; naive means UTC) to epoch milliseconds."""
    if not isinstance(value, str):
        raise InvalidEventError(field, f"expected an ISO-8601 string, got {type(value).__name__}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidEventError(
            field, f"{value!r} is not ISO-8601 (e.g. 2025-01-15T14:32:00.000Z)"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def _opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEventError(key, f"expected a string, got {type(value).__name__}")
    return value


def _opt_int(obj: Mapping[str, Any], key: str, path: str | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InvalidEventError(path or key, f"expected an integer, got {value!r}")
    return value


def event_from_json(
    obj: Mapping[str, Any],
    *,
    default_session_id: str | None = None,
    default_seq: int = 0,
) -> TraceEvent:
    """Build an event from one parsed JSON object; errors name the bad key."""
    if not isinstance(obj, Mapping):
        raise InvalidEventError("<event>", f"expected a JSON object, got {type(obj).__name__}")
    etype = obj.get("type")
    if etype not in EVENT_TYPES:
        raise InvalidEventError("type", f"{etype!r} is not one of {', '.join(EVENT_TYPES)}")
    if "timestamp" not in obj:
        raise InvalidEventError("timestamp", "missing (ISO-8601 string required)")
    ts = iso_to_ms(obj["timestamp"])
    session_id = _opt_str(obj, "session_id") or default_session_id
    if not session_id:
        raise InvalidEventError(
            "session_id", "missing (pass a default session id for AgentV traces)"
        )
    seq = _opt_int(obj, "seq")
    metadata_raw = obj.get("metadata") or {}
    if not isinstance(metadata_raw, Mapping):
        raise InvalidEventError("metadata", "expected a JSON object")
    metadata = {
        str(k): v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
        for k, v in metadata_raw.items()
    }
    usage = obj.get("usage") or {}
    if not isinstance(usage, Mapping):
        raise InvalidEventError("usage", "expected an object with input_tokens/output_tokens")
    budget_raw = obj.get("budget")
    budget: Budget | None = None
    if budget_raw is not None:
        if not isinstance(budget_raw, Mapping):
            raise InvalidEventError("budget", "expected an object")
        deadline = budget_raw.get("deadline")
        budget = Budget(
            deadline_ms=None if deadline is None else iso_to_ms(deadline, field="budget.deadline"),
            max_tokens=_opt_int(budget_raw, "max_tokens", "budget.max_tokens"),
            tokens_used=_opt_int(budget_raw, "tokens_used", "budget.tokens_used"),
            max_tool_calls=_opt_int(budget_raw, "max_tool_calls", "budget.max_tool_calls"),
        )
    is_error = obj.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InvalidEventError("is_error", f"expected true/false, got {is_error!r}")
    return TraceEvent(
        type=cast(EventType, etype),
        session_id=session_id,
        seq=default_seq if seq is None else seq,
        timestamp_ms=ts,
        agent_id=_opt_str(obj, "agent_id"),
        parent_session_id=_opt_str(obj, "parent_session_id"),
        call_id=_opt_str(obj, "id"),
        tool_name=_opt_str(obj, "name"),
        input=cast(JsonValue, obj.get("input")),
        output=cast(JsonValue, obj.get("output")),
        params_summary=_opt_str(obj, "params_summary"),
        is_error=is_error,
        error_message=_opt_str(obj, "error"),
        text=_opt_str(obj, "text"),
        input_tokens=_opt_int(usage, "input_tokens", "usage.input_tokens"),
        output_tokens=_opt_int(usage, "output_tokens", "usage.output_tokens"),
        latency_ms=_opt_int(obj, "latency_ms"),
        metadata=metadata,
        budget=budget,
    )


def event_to_json(event: TraceEvent) -> dict[str, Any]:
    """The JSON object for one event (keys at their default are left out)."""
    out: dict[str, Any] = {
        "type": event.type,
        "timestamp": ms_to_iso(event.timestamp_ms),
        "session_id": event.session_id,
        "seq": event.seq,
    }
    if event.call_id is not None:
        out["id"] = event.call_id
    if event.tool_name is not None:
        out["name"] = event.tool_name
    if event.input is not None:
        out["input"] = event.input
    if event.output is not None:
        out["output"] = event.output
    if event.text is not None:
        out["text"] = event.text
    if event.metadata:
        out["metadata"] = dict(sorted(event.metadata.items()))
    if event.agent_id is not None:
        out["agent_id"] = event.agent_id
    if event.parent_session_id is not None:
        out["parent_session_id"] = event.parent_session_id
    if event.params_summary is not None:
        out["params_summary"] = event.params_summary
    if event.is_error:
        out["is_error"] = True
    if event.error_message is not None:
        out["error"] = event.error_message
    if event.input_tokens is not None or event.output_tokens is not None:
        usage: dict[str, int] = {}
        if event.input_tokens is not None:
            usage["input_tokens"] = event.input_tokens
        if event.output_tokens is not None:
            usage["output_tokens"] = event.output_tokens
        out["usage"] = usage
    if event.latency_ms is not None:
        out["latency_ms"] = event.latency_ms
    if event.budget is not None:
        b = event.budget
        budget: dict[str, Any] = {}
        if b.deadline_ms is not None:
            budget["deadline"] = ms_to_iso(b.deadline_ms)
        if b.max_tokens is not None:
            budget["max_tokens"] = b.max_tokens
        if b.tokens_used is not None:
            budget["tokens_used"] = b.tokens_used
        if b.max_tool_calls is not None:
            budget["max_tool_calls"] = b.max_tool_calls
        out["budget"] = budget
    return out


def dumps_event(event: TraceEvent) -> str:
    """One JSONL line (no trailing newline), keys in a stable order."""
    return json.dumps(event_to_json(event), ensure_ascii=False, separators=(",", ":"))


def read_jsonl(
    lines: Iterable[str], *, source: str = "<jsonl>", default_session_id: str | None = None
) -> Iterator[TraceEvent]:
    """Parse JSONL lines; blank lines are skipped; errors name source and line."""
    seqs: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            sid = obj.get("session_id") if isinstance(obj, dict) else None
            sid = sid if isinstance(sid, str) and sid else default_session_id
            next_seq = seqs.get(sid or "", 0)
            event = event_from_json(
                obj, default_session_id=default_session_id, default_seq=next_seq
            )
        except json.JSONDecodeError as exc:
            raise InvalidEventError(f"{source}:{lineno}", f"not JSON: {exc.msg}") from exc
        except InvalidEventError as exc:
            raise InvalidEventError(f"{source}:{lineno}.{exc.field}", str(exc)) from exc
        seqs[event.session_id] = event.seq + 1
        yield event


__all__ = [
    "dumps_event",
    "event_from_json",
    "event_to_json",
    "iso_to_ms",
    "ms_to_iso",
    "read_jsonl",
]
