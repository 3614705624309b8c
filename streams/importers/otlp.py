"""OTLP/JSON traces under the OpenTelemetry GenAI semantic conventions.

Input: ``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"spans": [...]}]}]}``
(one document, or one such document per line).  Attribute values are OTLP
``AnyValue`` objects (``stringValue``, ``intValue`` — a string in OTLP/JSON —,
``doubleValue``, ``boolValue``, ``arrayValue``, ``kvlistValue``).

Mapping per span, by ``gen_ai.operation.name`` (else the first word of the span
name):

* ``execute_tool`` → ``tool_call`` at ``startTimeUnixNano`` (tool =
  ``gen_ai.tool.name``, id = ``gen_ai.tool.call.id`` else the span id, input =
  ``gen_ai.tool.call.arguments``, parsed when it is JSON) and ``tool_result`` at
  ``endTimeUnixNano`` (output = ``gen_ai.tool.call.result``; ``is_error`` when the
  span status code is ERROR (2) or an ``error.type`` attribute is set);
* ``chat`` / ``text_completion`` / ``generate_content`` → ``model_step`` at the
  span's start with ``gen_ai.usage.input_tokens`` / ``output_tokens``;
* other spans (``invoke_agent``, ``create_agent``, HTTP, DB ...) are structure,
  not trajectory steps, and give no event.

Session = ``gen_ai.conversation.id`` (span attribute, else resource attribute),
else the trace id.  Events of a session are ordered by time (ties: tool calls,
then model steps, then results, then file order), and the session is framed by
``session_start`` / ``session_end`` at its first and last instant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.core.errors import ImportFormatError
from streams.core.events import EventType, JsonValue, TraceEvent
from streams.importers._common import SessionWriter, as_int, json_value, meta, summarize

FORMAT = "otlp"

_MODEL_OPS = frozenset({"chat", "text_completion", "generate_content"})
_STATUS_ERROR = (2, "STATUS_CODE_ERROR")
# Order of simultaneous events: the model step that decided a call, the call, its result.
_RANK: dict[str, int] = {"model_step": 0, "tool_call": 1, "tool_result": 2}


def sniff(doc: object) -> bool:
    return isinstance(doc, Mapping) and isinstance(doc.get("resourceSpans"), list)


def any_value(value: object) -> JsonValue:
    """An OTLP ``AnyValue`` as a plain JSON value."""
    if not isinstance(value, Mapping):
        return json_value(value)
    if "stringValue" in value:
        return json_value(value["stringValue"])
    if "intValue" in value:
        return as_int(value["intValue"])
    if "doubleValue" in value:
        return json_value(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        arr = value["arrayValue"]
        vals = arr.get("values", []) if isinstance(arr, Mapping) else []
        return [any_value(v) for v in vals]
    if "kvlistValue" in value:
        kv = value["kvlistValue"]
        vals = kv.get("values", []) if isinstance(kv, Mapping) else []
        return {
            str(p.get("key")): any_value(p.get("value")) for p in vals if isinstance(p, Mapping)
        }
    if "bytesValue" in value:
        return json_value(value["bytesValue"])
    return None


def attributes(obj: Mapping[str, Any]) -> dict[str, JsonValue]:
    attrs = obj.get("attributes") or []
    if not isinstance(attrs, list):
        return {}
    return {str(a.get("key")): any_value(a.get("value")) for a in attrs if isinstance(a, Mapping)}


@dataclass
class _Pending:
    ts: int
    rank: int
    order: int
    etype: EventType
    fields: dict[str, Any] = field(default_factory=dict)


def _nanos_to_ms(value: object, where: str, path: Path) -> int:
    n = as_int(value)
    if n is None:
        raise ImportFormatError(str(path), f"{where}: expected integer nanoseconds, got {value!r}")
    return n // 1_000_000


def _maybe_json(value: JsonValue) -> JsonValue:
    if isinstance(value, str):
        try:
            return json_value(json.loads(value))
        except json.JSONDecodeError:
            return value
    return value


def read(docs: list[object], path: Path) -> Iterator[TraceEvent]:
    sessions: dict[str, list[_Pending]] = {}
    order = 0
    for d, doc in enumerate(docs):
        if not sniff(doc):
            raise ImportFormatError(str(path), f"document {d}: no resourceSpans[]")
        assert isinstance(doc, Mapping)
        for r, rs in enumerate(doc["resourceSpans"]):
            if not isinstance(rs, Mapping):
                raise ImportFormatError(str(path), f"resourceSpans[{r}]: expected an object")
            resource = rs.get("resource")
            res_attrs = attributes(resource) if isinstance(resource, Mapping) else {}
            for s, ss in enumerate(rs.get("scopeSpans") or []):
                spans = ss.get("spans") if isinstance(ss, Mapping) else None
                if not isinstance(spans, list):
                    raise ImportFormatError(
                        str(path), f"resourceSpans[{r}].scopeSpans[{s}].spans: expected a list"
                    )
                for k, span in enumerate(spans):
                    where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"
                    if not isinstance(span, Mapping):
                        raise ImportFormatError(str(path), f"{where}: expected an object")
                    attrs = attributes(span)
                    name = str(span.get("name") or "")
                    op = attrs.get("gen_ai.operation.name")
                    if not isinstance(op, str):
                        op = name.split(" ", 1)[0] if name else ""
                    if op != "execute_tool" and op not in _MODEL_OPS:
                        continue
                    conv = attrs.get("gen_ai.conversation.id") or res_attrs.get(
                        "gen_ai.conversation.id"
                    )
                    sid = str(conv) if conv else str(span.get("traceId") or "otlp")
                    start = _nanos_to_ms(
                        span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano", path
                    )
                    end_raw = span.get("endTimeUnixNano")
                    end = (
                        start
                        if end_raw is None
                        else _nanos_to_ms(end_raw, f"{where}.endTimeUnixNano", path)
                    )
                    bucket = sessions.setdefault(sid, [])
                    order += 1
                    if op in _MODEL_OPS:
                        bucket.append(
                            _Pending(
                                start,
                                _RANK["model_step"],
                                order,
                                "model_step",
                                {
                                    "input_tokens": as_int(attrs.get("gen_ai.usage.input_tokens")),
                                    "output_tokens": as_int(
                                        attrs.get("gen_ai.usage.output_tokens")
                                    ),
                                    "latency_ms": max(0, end - start),
                                    "metadata": meta(
                                        {
                                            "model": attrs.get("gen_ai.request.model"),
                                            "span_id": span.get("spanId"),
                                        }
                                    ),
                                },
                            )
                        )
                        continue
                    tool = attrs.get("gen_ai.tool.name")
                    if not isinstance(tool, str) or not tool:
                        tool = name.split(" ", 1)[1] if " " in name else ""
                    if not tool:
                        raise ImportFormatError(
                            str(path),
                            f"{where}.attributes: execute_tool span without gen_ai.tool.name",
                        )
                    call_id = (
                        attrs.get("gen_ai.tool.call.id") or span.get("spanId") or (f"span-{order}")
                    )
                    args = _maybe_json(attrs.get("gen_ai.tool.call.arguments"))
                    result = attrs.get("gen_ai.tool.call.result")
                    status = span.get("status")
                    code = status.get("code") if isinstance(status, Mapping) else None
                    err_type = attrs.get("error.type")
                    failed = code in _STATUS_ERROR or bool(err_type)
                    message = status.get("message") if isinstance(status, Mapping) else None
                    bucket.append(
                        _Pending(
                            start,
                            _RANK["tool_call"],
                            order,
                            "tool_call",
                            {
                                "call_id": str(call_id),
                                "tool_name": tool,
                                "input": args,
                                "params_summary": summarize(args) if args is not None else None,
                            },
                        )
                    )
                    order += 1
                    bucket.append(
                        _Pending(
                            end,
                            _RANK["tool_result"],
                            order,
                            "tool_result",
                            {
                                "call_id": str(call_id),
                                "tool_name": tool,
                                "output": result,
                                "is_error": failed,
                                "error_message": (str(message or err_type) if failed else None),
                                "latency_ms": max(0, end - start),
                            },
                        )
                    )
    for sid in sorted(sessions):
        items = sorted(sessions[sid], key=lambda p: (p.ts, p.rank, p.order))
        w = SessionWriter(sid, items[0].ts)
        w.emit("session_start", items[0].ts, metadata={"source_format": FORMAT})
        ids: dict[str, str] = {}
        for p in items:
            f = dict(p.fields)
            if p.etype == "tool_call":
                unique = w.unique_call_id(f["call_id"])
                ids[f["call_id"]] = unique
                f["call_id"] = unique
            elif p.etype == "tool_result":
                f["call_id"] = ids.get(f["call_id"], f["call_id"])
            w.emit(p.etype, p.ts, **f)
        w.emit("session_end", w.last_ms, metadata={"source_format": FORMAT})
        yield from w.events


__all__ = ["FORMAT", "any_value", "attributes", "read", "sniff"]
