"""OpenTelemetry (OTLP) spans and log events → trajectory events: the one mapper.

Both the offline importer (``trajectory analyze spans.json``) and the live OTLP/HTTP
receiver (:mod:`streams.otlp`) go through :func:`map_span` / :func:`map_log`, so a
span gives the same events whether it arrived in a file or over the wire.  Input is
first normalized to :class:`Span` / :class:`LogRecord` (plain Python values: ids in
lowercase hex, times in integer nanoseconds, attributes as JSON values), from OTLP's
JSON mapping here (:func:`spans_from_json`, :func:`logs_from_json`) or from the
protobuf messages in :mod:`streams.otlp.decode`.

File input: ``{"resourceSpans": [...]}`` and/or ``{"resourceLogs": [...]}`` (one
document, or one per line).  Attribute values are OTLP ``AnyValue`` objects
(``stringValue``, ``intValue`` — a string in OTLP/JSON —, ``doubleValue``,
``boolValue``, ``arrayValue``, ``kvlistValue``, ``bytesValue``).

Spans, by kind (:func:`span_operation`):

* GenAI semantic conventions (current): ``gen_ai.operation.name`` =
  ``execute_tool`` → ``tool_call`` at the span start (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id`` else the span id, ``gen_ai.tool.call.arguments`` parsed
  when JSON) and ``tool_result`` at its end (``gen_ai.tool.call.result``;
  ``is_error`` when the status code is ERROR or ``error.type`` is set);
  ``chat`` / ``text_completion`` / ``generate_content`` → ``model_step`` with
  ``gen_ai.usage.input_tokens`` / ``output_tokens``;
* pre-1.37 GenAI names: ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``,
  Pydantic AI's ``tool_arguments`` / ``tool_response``, OpenLLMetry's
  ``traceloop.span.kind=tool`` with ``traceloop.entity.name/input/output`` and
  ``llm.request.type``, ``llm.usage.prompt_tokens``;
* OpenInference: ``openinference.span.kind`` = ``TOOL`` (``tool.name``,
  ``tool.parameters`` else ``input.value``, ``output.value``, ``tool_call.id``) and
  ``LLM`` (``llm.token_count.prompt`` / ``completion``, ``llm.model_name``);
* anything else (``invoke_agent``, HTTP, DB ...) is structure, not a trajectory
  step: no event, and not an error.

Log events (:func:`map_log`), named by ``event.name`` (attribute), the record's
``eventName`` or a string body: Claude Code's ``claude_code.tool_result`` (a
``tool_call`` at ``timestamp - duration_ms`` and its ``tool_result``; ``success``
false → error result), ``claude_code.api_request`` (``model_step`` with tokens),
``claude_code.api_error`` (agent ``error``), ``claude_code.user_prompt``
(``message``); Codex CLI's ``codex.tool_result`` (``call_id``, ``arguments``,
``output``, ``success``), ``codex.sse_event`` of kind ``response.completed``
(``model_step`` with ``input_token_count`` / ``output_token_count``) and
``codex.user_prompt``.  Other log records are ignored.

Session = the first of ``gen_ai.conversation.id``, ``session.id``,
``conversation.id``, ``traceloop.association.properties.thread_id`` /
``session_id`` (span or record attribute, else resource attribute), else the trace
id.  A file's events of a session are ordered by time (ties: model step, tool call,
result, then file order) and framed by ``session_start`` / ``session_end``.

Invariant: mapping is a pure function of one span or record; an item that claims to
be a trajectory step but cannot be one (a tool span with no tool name, a time that
is not an integer) raises :class:`MappingError` naming the attribute, which the file
importer turns into an :class:`ImportFormatError` and the receiver into a rejected
item of ``partial_success``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from streams.core.events import EventType, JsonValue, TraceEvent
from streams.errors import ImportFormatError, MappingError
from streams.importers._common import SessionWriter, as_int, json_value, meta, summarize

FORMAT = "otlp"

_MODEL_OPS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_STATUS_ERROR = (2, "STATUS_CODE_ERROR")
# Order of simultaneous events: the model step that decided a call, the call, its result.
_RANK: dict[str, int] = {"message": 0, "model_step": 0, "tool_call": 1, "tool_result": 2}
_RANK_ERROR = 2

#: Attributes naming the session, in order of preference (span/record, then resource).
SESSION_KEYS: tuple[str, ...] = (
    "gen_ai.conversation.id",
    "session.id",
    "conversation.id",
    "traceloop.association.properties.thread_id",
    "traceloop.association.properties.session_id",
)
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name")
_CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "tool.call_id")
_ARGS_KEYS = (
    "gen_ai.tool.call.arguments",
    "tool.parameters",
    "tool_arguments",
    "traceloop.entity.input",
    "input.value",
)
_RESULT_KEYS = (
    "gen_ai.tool.call.result",
    "tool_response",
    "traceloop.entity.output",
    "output.value",
)
_IN_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
_OUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "llm.usage.completion_tokens",
)
_MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")


# -- normalized input -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """One OTLP span, decoder-independent (JSON mapping or protobuf).

    Ids are lowercase hex ('' when absent); times are integer epoch nanoseconds
    (``end_ns`` None when absent); ``status_code`` is OTLP's enum (0 unset, 1 ok,
    2 error).
    """

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int | None
    attrs: Mapping[str, JsonValue]
    resource_attrs: Mapping[str, JsonValue]
    status_code: int = 0
    status_message: str = ""
    parent_span_id: str = ""


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One OTLP log record, decoder-independent (see :class:`Span`)."""

    time_ns: int
    observed_ns: int
    body: JsonValue
    attrs: Mapping[str, JsonValue]
    resource_attrs: Mapping[str, JsonValue]
    event_name: str = ""
    trace_id: str = ""
    span_id: str = ""


@dataclass
class Pending:
    """An event before it has a session ``seq``: time, tie-break rank and fields."""

    ts: int
    rank: int
    etype: EventType
    fields: dict[str, Any] = field(default_factory=dict)
    order: int = 0


@dataclass(frozen=True, slots=True)
class Mapped:
    """What one span or record gives: its session, a dedup key and its events."""

    session: str
    key: str
    items: tuple[Pending, ...]


# -- OTLP JSON → normalized -----------------------------------------------------


def sniff(doc: object) -> bool:
    return isinstance(doc, Mapping) and (
        isinstance(doc.get("resourceSpans"), list) or isinstance(doc.get("resourceLogs"), list)
    )


def any_value(value: object) -> JsonValue:
    """An OTLP ``AnyValue`` (JSON mapping) as a plain JSON value."""
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


def _nanos(value: object, where: str) -> int:
    n = as_int(value)
    if n is None:
        raise MappingError(where, f"expected integer nanoseconds, got {value!r}")
    return n


def _hex_id(value: object) -> str:
    return value.lower() if isinstance(value, str) else ""


def _status(span: Mapping[str, Any]) -> tuple[int, str]:
    status = span.get("status")
    if not isinstance(status, Mapping):
        return 0, ""
    code = status.get("code")
    if code in _STATUS_ERROR:
        code = 2
    elif code in ("STATUS_CODE_OK",):
        code = 1
    n = as_int(code) or 0
    message = status.get("message")
    return n, message if isinstance(message, str) else ""


def json_span(span: Mapping[str, Any], res_attrs: Mapping[str, JsonValue], where: str) -> Span:
    """One OTLP/JSON span object as a :class:`Span` (raises :class:`MappingError`)."""
    start = _nanos(span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano")
    end_raw = span.get("endTimeUnixNano")
    end = None if end_raw is None else _nanos(end_raw, f"{where}.endTimeUnixNano")
    code, message = _status(span)
    return Span(
        trace_id=_hex_id(span.get("traceId")),
        span_id=_hex_id(span.get("spanId")),
        parent_span_id=_hex_id(span.get("parentSpanId")),
        name=str(span.get("name") or ""),
        start_ns=start,
        end_ns=end,
        attrs=attributes(span),
        resource_attrs=res_attrs,
        status_code=code,
        status_message=message,
    )


def _list_or_empty(value: object) -> object:
    """An absent (or null) repeated field is empty; anything else is checked as a list."""
    return [] if value is None else value


def _resource_attrs(container: Mapping[str, Any]) -> dict[str, JsonValue]:
    resource = container.get("resource")
    return attributes(resource) if isinstance(resource, Mapping) else {}


_T = TypeVar("_T")


def _walk_json(
    doc: Mapping[str, Any],
    names: tuple[str, str, str],
    convert: Callable[[Mapping[str, Any], Mapping[str, JsonValue], str], _T],
) -> Iterator[tuple[str, _T | MappingError]]:
    """``(where, item)`` for every item of an OTLP JSON request: resource ->
    scope -> item (``names``, e.g. ``resourceSpans / scopeSpans / spans``).

    An item that cannot be converted comes as ``(where, MappingError)`` so a caller
    can reject it alone; a structurally broken document raises :class:`MappingError`.
    """
    top, mid, leaf = names
    resources = _list_or_empty(doc.get(top))
    if not isinstance(resources, list):
        raise MappingError(top, "expected a list")
    for r, res in enumerate(resources):
        if not isinstance(res, Mapping):
            raise MappingError(f"{top}[{r}]", "expected an object")
        res_attrs = _resource_attrs(res)
        scopes = _list_or_empty(res.get(mid))
        if not isinstance(scopes, list):
            raise MappingError(f"{top}[{r}].{mid}", "expected a list")
        for s, scope in enumerate(scopes):
            items = scope.get(leaf) if isinstance(scope, Mapping) else None
            if items is None and isinstance(scope, Mapping):
                continue
            if not isinstance(items, list):
                raise MappingError(f"{top}[{r}].{mid}[{s}].{leaf}", "expected a list")
            for k, item in enumerate(items):
                where = f"{top}[{r}].{mid}[{s}].{leaf}[{k}]"
                if not isinstance(item, Mapping):
                    yield where, MappingError(where, "expected an object")
                    continue
                try:
                    yield where, convert(item, res_attrs, where)
                except MappingError as exc:
                    yield where, exc


def spans_from_json(doc: Mapping[str, Any]) -> Iterator[tuple[str, Span | MappingError]]:
    """``(where, span)`` for every span of an ``ExportTraceServiceRequest`` in JSON."""
    return _walk_json(doc, ("resourceSpans", "scopeSpans", "spans"), json_span)


def _json_log(rec: Mapping[str, Any], res_attrs: Mapping[str, JsonValue], where: str) -> LogRecord:
    return LogRecord(
        time_ns=_nanos(rec.get("timeUnixNano") or 0, f"{where}.timeUnixNano"),
        observed_ns=_nanos(rec.get("observedTimeUnixNano") or 0, f"{where}.observedTimeUnixNano"),
        body=any_value(rec.get("body")),
        attrs=attributes(rec),
        resource_attrs=res_attrs,
        event_name=str(rec.get("eventName") or ""),
        trace_id=_hex_id(rec.get("traceId")),
        span_id=_hex_id(rec.get("spanId")),
    )


def logs_from_json(doc: Mapping[str, Any]) -> Iterator[tuple[str, LogRecord | MappingError]]:
    """``(where, record)`` for every record of an ``ExportLogsServiceRequest`` in JSON."""
    return _walk_json(doc, ("resourceLogs", "scopeLogs", "logRecords"), _json_log)


# -- the mapper -------------------------------------------------------------------


def _first(attrs: Mapping[str, JsonValue], keys: tuple[str, ...]) -> JsonValue:
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def _maybe_json(value: JsonValue) -> JsonValue:
    if isinstance(value, str):
        try:
            return json_value(json.loads(value))
        except json.JSONDecodeError:
            return value
    return value


def session_of(
    attrs: Mapping[str, JsonValue], resource_attrs: Mapping[str, JsonValue], trace_id: str
) -> str:
    """The raw session id of a span or record (see the module docstring)."""
    value = _first(attrs, SESSION_KEYS)
    if value is None:
        value = _first(resource_attrs, SESSION_KEYS)
    if value is None:
        return trace_id or "otlp"
    return str(value)


def span_operation(span: Span) -> str:
    """``execute_tool``, a model operation (``chat`` ...) or another span kind."""
    attrs = span.attrs
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    oi_kind = attrs.get("openinference.span.kind")
    if isinstance(oi_kind, str) and oi_kind:
        kind = oi_kind.upper()
        return "execute_tool" if kind == "TOOL" else "chat" if kind == "LLM" else kind.lower()
    tl_kind = attrs.get("traceloop.span.kind")
    if tl_kind == "tool":
        return "execute_tool"
    req_type = attrs.get("llm.request.type")
    if isinstance(req_type, str) and req_type in _MODEL_OPS:
        return "chat"
    if attrs.get("gen_ai.tool.name"):  # Pydantic AI before 1.37: "running tool"
        return "execute_tool"
    return span.name.split(" ", 1)[0] if span.name else ""


def _ms(ns: int) -> int:
    return ns // 1_000_000


def map_span(span: Span) -> Mapped | None:
    """The events of one span, or None for a span that is not a trajectory step."""
    op = span_operation(span)
    if op != "execute_tool" and op not in _MODEL_OPS:
        return None
    attrs = span.attrs
    sid = session_of(attrs, span.resource_attrs, span.trace_id)
    key = f"span:{span.trace_id}:{span.span_id}"
    start = _ms(span.start_ns)
    end = start if span.end_ns is None else _ms(span.end_ns)
    latency = max(0, end - start)
    if op in _MODEL_OPS:
        step = Pending(
            start,
            _RANK["model_step"],
            "model_step",
            {
                "input_tokens": as_int(_first(attrs, _IN_TOKEN_KEYS)),
                "output_tokens": as_int(_first(attrs, _OUT_TOKEN_KEYS)),
                "latency_ms": latency,
                "metadata": meta({"model": _first(attrs, _MODEL_KEYS), "span_id": span.span_id}),
            },
        )
        return Mapped(sid, key, (step,))
    tool = _first(attrs, _TOOL_NAME_KEYS)
    if tool is None and attrs.get("traceloop.span.kind") == "tool":
        tool = attrs.get("traceloop.entity.name")
    if not isinstance(tool, str) or not tool:
        tool = span.name.split(" ", 1)[1] if " " in span.name else ""
    if not tool:
        raise MappingError(
            "attributes", "execute_tool span without gen_ai.tool.name (or tool.name)"
        )
    call_id = str(_first(attrs, _CALL_ID_KEYS) or span.span_id or f"span-{start}")
    args = _maybe_json(_first(attrs, _ARGS_KEYS))
    result = _first(attrs, _RESULT_KEYS)
    err_type = attrs.get("error.type")
    failed = span.status_code == 2 or bool(err_type)
    message = span.status_message or (str(err_type) if err_type else "")
    if failed and not message:
        message = str(attrs.get("exception.message") or "error")
    pair = _call_and_result(
        call_id, tool, args, result, (start, end), message if failed else None, latency
    )
    return Mapped(sid, key, pair)


def _call_and_result(
    call_id: str,
    tool: str,
    args: JsonValue,
    output: JsonValue,
    times_ms: tuple[int, int],
    error_message: str | None,
    latency_ms: int | None,
) -> tuple[Pending, Pending]:
    """The ``tool_call`` / ``tool_result`` pair one tool span or tool log event maps
    to (``error_message`` set: the result is an error)."""
    start, end = times_ms
    call = Pending(
        start,
        _RANK["tool_call"],
        "tool_call",
        {
            "call_id": call_id,
            "tool_name": tool,
            "input": args,
            "params_summary": summarize(args) if args is not None else None,
        },
    )
    res = Pending(
        end,
        _RANK["tool_result"],
        "tool_result",
        {
            "call_id": call_id,
            "tool_name": tool,
            "output": output,
            "is_error": error_message is not None,
            "error_message": error_message,
            "latency_ms": latency_ms,
        },
    )
    return call, res


def _truthy(value: JsonValue) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def log_event_name(rec: LogRecord) -> str:
    """``claude_code.tool_result``-style name of a log event ('' when it has none)."""
    name = rec.attrs.get("event.name")
    if not isinstance(name, str) or not name:
        name = rec.event_name or (rec.body if isinstance(rec.body, str) else "")
    if name and "." not in name:
        # Claude Code puts "tool_result" in event.name and the full name in the body.
        body = rec.body if isinstance(rec.body, str) else ""
        if body.endswith("." + name):
            return body
        service = rec.resource_attrs.get("service.name")
        if service == "claude-code":
            return "claude_code." + name
    return name


def _record_ms(rec: LogRecord) -> int:
    stamp = rec.attrs.get("event.timestamp")
    if isinstance(stamp, str) and stamp:
        try:
            return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError as exc:
            raise MappingError(
                "attributes.event.timestamp", f"not an ISO 8601 time: {stamp!r}"
            ) from exc
    ns = rec.time_ns or rec.observed_ns
    if not ns:
        raise MappingError("timeUnixNano", "a log event needs timeUnixNano or event.timestamp")
    return _ms(ns)


def _log_key(rec: LogRecord, name: str) -> str:
    material = json.dumps(
        [rec.time_ns, rec.observed_ns, name, rec.trace_id, rec.span_id, rec.body, rec.attrs],
        sort_keys=True,
        default=str,
        separators=(",", ":"),
    )
    return "log:" + hashlib.sha1(material.encode("utf-8")).hexdigest()


def map_log(rec: LogRecord) -> Mapped | None:
    """The events of one Claude Code / Codex log event, or None for other records."""
    name = log_event_name(rec)
    if not name.startswith(("claude_code.", "codex.")):
        return None
    kind = name.split(".", 1)[1]
    attrs = rec.attrs
    sid = session_of(attrs, rec.resource_attrs, rec.trace_id)
    if kind == "tool_result":
        ts = _record_ms(rec)
        tool = attrs.get("tool_name") or attrs.get("tool.name")
        if not isinstance(tool, str) or not tool:
            raise MappingError("attributes.tool_name", f"{name} event without a tool name")
        duration = as_int(attrs.get("duration_ms"))
        if duration is None and isinstance(attrs.get("duration_ms"), float):
            duration = int(attrs["duration_ms"])  # type: ignore[arg-type]
        key = _log_key(rec, name)
        call_id = attrs.get("call_id") or attrs.get("tool_use_id") or attrs.get("tool_call_id")
        cid = str(call_id) if call_id else key[4:20]
        raw_args = attrs.get("arguments")
        if raw_args is None:
            raw_args = attrs.get("tool_parameters")
        args = _maybe_json(raw_args)
        success = _truthy(attrs.get("success"))
        error = attrs.get("error")
        failed = success is False or bool(error)
        output = attrs.get("output")
        start = ts - max(0, duration or 0)
        failure = (str(error) if error else "tool failed") if failed else None
        pair = _call_and_result(cid, tool, args, output, (start, ts), failure, duration)
        return Mapped(sid, key, pair)
    if kind == "api_request" or (
        kind == "sse_event" and attrs.get("event.kind") == "response.completed"
    ):
        ts = _record_ms(rec)
        in_tok = as_int(attrs.get("input_tokens") if kind == "api_request" else None)
        out_tok = as_int(attrs.get("output_tokens") if kind == "api_request" else None)
        if kind == "sse_event":
            in_tok = as_int(attrs.get("input_token_count"))
            out_tok = as_int(attrs.get("output_token_count"))
        duration = as_int(attrs.get("duration_ms"))
        step = Pending(
            ts - max(0, duration or 0),
            _RANK["model_step"],
            "model_step",
            {
                "input_tokens": in_tok,
                "output_tokens": out_tok,
                "latency_ms": duration,
                "metadata": meta({"model": attrs.get("model"), "cost_usd": attrs.get("cost_usd")}),
            },
        )
        return Mapped(sid, _log_key(rec, name), (step,))
    if kind == "api_error":
        ts = _record_ms(rec)
        error = attrs.get("error") or "API error"
        item = Pending(ts, _RANK_ERROR, "error", {"is_error": True, "error_message": str(error)})
        return Mapped(sid, _log_key(rec, name), (item,))
    if kind == "user_prompt":
        ts = _record_ms(rec)
        prompt = attrs.get("prompt")
        text = prompt if isinstance(prompt, str) else "<user prompt>"
        item = Pending(ts, _RANK["message"], "message", {"text": text})
        return Mapped(sid, _log_key(rec, name), (item,))
    return None


# -- the file importer ----------------------------------------------------------------


def read(docs: list[object], path: Path) -> Iterator[TraceEvent]:
    sessions: dict[str, list[Pending]] = {}
    order = 0
    for d, doc in enumerate(docs):
        if not sniff(doc):
            raise ImportFormatError(
                str(path), f"document {d}: no resourceSpans[] or resourceLogs[]"
            )
        assert isinstance(doc, Mapping)
        mapped: list[Mapped] = []
        try:
            signals: tuple[tuple[Iterator[tuple[str, Any]], Callable[[Any], Mapped | None]], ...]
            signals = ((spans_from_json(doc), map_span), (logs_from_json(doc), map_log))
            for walk, map_item in signals:
                for where, found in walk:
                    if isinstance(found, MappingError):
                        raise ImportFormatError(str(path), str(found))
                    try:
                        m = map_item(found)
                    except MappingError as exc:
                        raise ImportFormatError(str(path), f"{where}.{exc}") from exc
                    if m is not None:
                        mapped.append(m)
        except MappingError as exc:
            raise ImportFormatError(str(path), f"document {d}: {exc}") from exc
        for m in mapped:
            bucket = sessions.setdefault(m.session, [])
            for p in m.items:
                order += 1
                p.order = order
                bucket.append(p)
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


__all__ = [
    "FORMAT",
    "SESSION_KEYS",
    "LogRecord",
    "Mapped",
    "MappingError",
    "Pending",
    "Span",
    "any_value",
    "attributes",
    "json_span",
    "log_event_name",
    "logs_from_json",
    "map_log",
    "map_span",
    "read",
    "session_of",
    "sniff",
    "span_operation",
    "spans_from_json",
]
