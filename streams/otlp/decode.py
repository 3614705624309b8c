"""OTLP/HTTP request bodies → normalized spans and log records.

``decode_traces(body, content_type, content_encoding)`` and ``decode_logs(...)``
return ``[(where, Span | MappingError)]``: a span that cannot be normalized is
rejected alone (it goes into ``partial_success``); a body that cannot be decoded
at all raises :class:`BadRequest` (the receiver answers 400, which OTLP clients
do not retry) and :class:`UnsupportedMediaType` names the content types we take.

JSON follows OTLP's JSON mapping (lowerCamelCase keys, hex trace/span ids, enums as
integers, 64-bit integers as strings, unknown fields ignored) through the same
:func:`streams.importers.otlp.spans_from_json` the file importer uses; protobuf is
parsed with the ``opentelemetry-proto`` messages and converted field by field
(bytes ids to lowercase hex, ``bytesValue`` to base64 as the JSON mapping has it),
so both encodings of one span normalize to equal :class:`Span` values.
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Mapping
from typing import Any

from streams.core.events import JsonValue
from streams.errors import BadRequest, BodyTooLarge, MappingError, UnsupportedMediaType
from streams.importers.otlp import LogRecord, Span, logs_from_json, spans_from_json

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

Item = tuple[str, Any]


def media_type(content_type: str | None) -> str:
    """``application/json`` or ``application/x-protobuf`` (parameters dropped)."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if base == JSON:
        return JSON
    raise UnsupportedMediaType(
        f"Content-Type {content_type!r} is not supported: send {PROTOBUF} or {JSON}"
    )


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body, gunzipped when ``Content-Encoding: gzip``; at most ``limit`` bytes out."""
    enc = (content_encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise BadRequest(f"Content-Encoding {content_encoding!r} is not supported: use gzip")
    d = zlib.decompressobj(wbits=31 if enc != "deflate" else 15)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"corrupt {enc} body: {exc}") from exc
    if len(out) > limit:
        raise BodyTooLarge(f"decompressed body is over the {limit}-byte limit")
    if not d.eof:
        raise BadRequest(f"truncated {enc} body")
    return out


def _json_doc(body: bytes) -> Mapping[str, Any]:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise BadRequest(f"body is JSON {type(doc).__name__}, expected an object")
    return doc


# -- protobuf ------------------------------------------------------------------------


def _pb_value(v: Any) -> JsonValue:
    which = v.WhichOneof("value")
    if which == "string_value":
        return str(v.string_value)
    if which == "int_value":
        return int(v.int_value)
    if which == "bool_value":
        return bool(v.bool_value)
    if which == "double_value":
        return float(v.double_value)
    if which == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return None


def _pb_attrs(attrs: Any) -> dict[str, JsonValue]:
    return {kv.key: _pb_value(kv.value) for kv in attrs}


def _parse_pb(message: Any, body: bytes, what: str) -> Any:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise BadRequest(f"body is not a protobuf {what}: {exc}") from exc
    return message


def _pb_traces(body: bytes) -> list[Item]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = _parse_pb(ExportTraceServiceRequest(), body, "ExportTraceServiceRequest")
    out: list[Item] = []
    for r, rs in enumerate(req.resource_spans):
        res_attrs = _pb_attrs(rs.resource.attributes)
        for s, ss in enumerate(rs.scope_spans):
            for k, sp in enumerate(ss.spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"
                out.append(
                    (
                        where,
                        Span(
                            trace_id=sp.trace_id.hex(),
                            span_id=sp.span_id.hex(),
                            parent_span_id=sp.parent_span_id.hex(),
                            name=sp.name,
                            start_ns=sp.start_time_unix_nano,
                            end_ns=sp.end_time_unix_nano or None,
                            attrs=_pb_attrs(sp.attributes),
                            resource_attrs=res_attrs,
                            status_code=int(sp.status.code),
                            status_message=sp.status.message,
                        ),
                    )
                )
    return out


def _pb_logs(body: bytes) -> list[Item]:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    req = _parse_pb(ExportLogsServiceRequest(), body, "ExportLogsServiceRequest")
    out: list[Item] = []
    for r, rl in enumerate(req.resource_logs):
        res_attrs = _pb_attrs(rl.resource.attributes)
        for s, sl in enumerate(rl.scope_logs):
            for k, lr in enumerate(sl.log_records):
                where = f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{k}]"
                out.append(
                    (
                        where,
                        LogRecord(
                            time_ns=lr.time_unix_nano,
                            observed_ns=lr.observed_time_unix_nano,
                            body=_pb_value(lr.body) if lr.HasField("body") else None,
                            attrs=_pb_attrs(lr.attributes),
                            resource_attrs=res_attrs,
                            event_name=lr.event_name,
                            trace_id=lr.trace_id.hex(),
                            span_id=lr.span_id.hex(),
                        ),
                    )
                )
    return out


def _json_items(doc: Mapping[str, Any], logs: bool) -> list[Item]:
    try:
        return list(logs_from_json(doc) if logs else spans_from_json(doc))
    except MappingError as exc:
        raise BadRequest(f"not an OTLP {'logs' if logs else 'traces'} request: {exc}") from exc


def decode_traces(body: bytes, content_type: str | None) -> list[Item]:
    """``[(where, Span | MappingError)]`` of an ``ExportTraceServiceRequest`` body."""
    if media_type(content_type) == PROTOBUF:
        return _pb_traces(body)
    return _json_items(_json_doc(body), logs=False)


def decode_logs(body: bytes, content_type: str | None) -> list[Item]:
    """``[(where, LogRecord | MappingError)]`` of an ``ExportLogsServiceRequest`` body."""
    if media_type(content_type) == PROTOBUF:
        return _pb_logs(body)
    return _json_items(_json_doc(body), logs=True)


def gzip_body(body: bytes) -> bytes:
    """gzip *body* (tests and the benchmark send compressed requests as exporters do)."""
    return gzip.compress(body, compresslevel=1)


__all__ = [
    "JSON",
    "PROTOBUF",
    "BadRequest",
    "BodyTooLarge",
    "UnsupportedMediaType",
    "decode_logs",
    "decode_traces",
    "decompress",
    "gzip_body",
    "media_type",
]
