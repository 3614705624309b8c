"""The shared OTLP mapper and the receiver's body decoding (pure: no broker, no server).

Spans come from the real OpenTelemetry SDK and its own encoders (protobuf and JSON),
so what is checked is what exporters send.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from streams.importers.otlp import LogRecord, MappingError, Span, map_log, map_span
from streams.otlp.decode import (
    BadRequest,
    BodyTooLarge,
    UnsupportedMediaType,
    decode_logs,
    decode_traces,
    decompress,
)

pytest.importorskip("opentelemetry.sdk", reason="the OTel SDK (test extra) makes the spans")


def sdk_spans() -> list[Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "agent", "n": 3}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.agent.name": "a"}):
        with tracer.start_as_current_span(
            "chat m",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 10,
                "gen_ai.usage.output_tokens": 2,
                "temperature": 0.5,
                "stream": True,
                "stops": ["a", "b"],
                "gen_ai.conversation.id": "c-1",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool ls",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "ls",
                "gen_ai.tool.call.arguments": '{"path": "."}',
                "gen_ai.conversation.id": "c-1",
            },
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "no such dir"))
    return list(memory.get_finished_spans())


def test_protobuf_and_json_bodies_normalize_to_equal_spans() -> None:
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as to_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as to_pb

    spans = sdk_spans()
    pb = decode_traces(to_pb(spans).SerializeToString(), "application/x-protobuf")
    js = decode_traces(to_json(spans).to_json().encode(), "application/json; charset=utf-8")
    assert len(pb) == 3
    assert pb == js
    chat = next(s for _, s in pb if isinstance(s, Span) and s.name == "chat m")
    assert chat.attrs["temperature"] == 0.5 and chat.attrs["stops"] == ["a", "b"]
    assert chat.resource_attrs["n"] == 3 and len(chat.trace_id) == 32
    tool = next(s for _, s in pb if isinstance(s, Span) and s.name == "execute_tool ls")
    mapped = map_span(tool)
    assert mapped is not None and mapped.session == "c-1"
    call, result = mapped.items
    assert call.fields["input"] == {"path": "."}
    assert (result.fields["is_error"], result.fields["error_message"]) == (True, "no such dir")


def _span(attrs: dict[str, Any], name: str = "x", status: int = 0) -> Span:
    return Span("ab" * 16, "cd" * 8, name, 5_000_000_000, 5_400_000_000, attrs, {}, status)


def test_pre_137_genai_names() -> None:
    step = map_span(
        _span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.prompt_tokens": 100,
                "gen_ai.usage.completion_tokens": 7,
                "session.id": "s-old",
            }
        )
    )
    assert step is not None and step.session == "s-old"
    assert (step.items[0].fields["input_tokens"], step.items[0].fields["output_tokens"]) == (100, 7)
    # Pydantic AI before the execute_tool convention: "running tool" spans
    running = map_span(
        _span(
            {
                "gen_ai.tool.name": "get_weather",
                "tool_arguments": '{"city": "Oslo"}',
                "tool_response": "rain",
                "gen_ai.tool.call.id": "call_9",
            },
            name="running tool",
        )
    )
    assert running is not None
    call, result = running.items
    assert (call.fields["tool_name"], call.fields["call_id"], call.fields["input"]) == (
        "get_weather",
        "call_9",
        {"city": "Oslo"},
    )
    assert result.fields["output"] == "rain" and result.fields["latency_ms"] == 400
    # OpenLLMetry (LangChain/LangGraph): traceloop tool spans, thread id as session
    tl = map_span(
        _span(
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "search",
                "traceloop.entity.input": '{"q": 1}',
                "traceloop.association.properties.thread_id": "thread-4",
            },
            name="search.tool",
        )
    )
    assert tl is not None and tl.session == "thread-4"
    assert tl.items[0].fields["tool_name"] == "search"
    llm = map_span(_span({"llm.request.type": "chat", "llm.usage.prompt_tokens": 3}))
    assert llm is not None and llm.items[0].etype == "model_step"
    assert llm.items[0].fields["input_tokens"] == 3


def test_openinference_llm_and_other_spans() -> None:
    llm = map_span(
        _span(
            {
                "openinference.span.kind": "LLM",
                "llm.token_count.prompt": 50,
                "llm.token_count.completion": 5,
                "llm.model_name": "gpt-4o-mini",
            }
        )
    )
    assert llm is not None and llm.session == "ab" * 16  # no session attribute: trace id
    assert llm.items[0].fields["metadata"]["model"] == "gpt-4o-mini"
    assert map_span(_span({"openinference.span.kind": "CHAIN"})) is None
    assert map_span(_span({"http.method": "GET"}, name="GET /")) is None
    with pytest.raises(MappingError, match=r"attributes: execute_tool span without"):
        map_span(_span({"openinference.span.kind": "TOOL"}))


def _log(attrs: dict[str, Any], body: Any = None, event_name: str = "") -> LogRecord:
    return LogRecord(7_000_000_000, 0, body, attrs, {"service.name": "codex"}, event_name)


def test_codex_log_events() -> None:
    tool = map_log(
        _log(
            {
                "event.name": "codex.tool_result",
                "conversation.id": "conv-x",
                "tool_name": "shell",
                "call_id": "call_A",
                "arguments": '{"command": ["ls"]}',
                "duration_ms": "250",
                "success": "false",
                "output": "ls: cannot access",
            }
        )
    )
    assert tool is not None and tool.session == "conv-x"
    call, result = tool.items
    assert (call.ts, result.ts, call.fields["call_id"]) == (6_750, 7_000, "call_A")
    assert call.fields["input"] == {"command": ["ls"]}
    assert result.fields["is_error"] and result.fields["output"] == "ls: cannot access"
    done = map_log(
        _log(
            {
                "event.kind": "response.completed",
                "input_token_count": 300,
                "output_token_count": 20,
                "conversation.id": "conv-x",
            },
            event_name="codex.sse_event",
        )
    )
    assert done is not None and done.items[0].fields["input_tokens"] == 300
    assert map_log(_log({"event.kind": "response.created"}, event_name="codex.sse_event")) is None
    assert map_log(_log({"event.name": "something.else"})) is None
    with pytest.raises(MappingError, match=r"attributes.tool_name"):
        map_log(_log({"event.name": "codex.tool_result"}))


def test_claude_code_log_protobuf() -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    kv = rl.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "claude-code"
    rec = rl.scope_logs.add().log_records.add()
    rec.time_unix_nano = 9_000_000_000
    rec.body.string_value = "claude_code.tool_result"
    for key, value in {
        "event.name": "tool_result",
        "session.id": "cc-1",
        "tool_name": "Edit",
        "success": "true",
        "duration_ms": "12",
        "event.timestamp": "2026-01-01T00:00:01.500Z",
    }.items():
        a = rec.attributes.add()
        a.key, a.value.string_value = key, value
    items = decode_logs(req.SerializeToString(), "application/x-protobuf")
    assert len(items) == 1
    mapped = map_log(items[0][1])
    assert mapped is not None and mapped.session == "cc-1"
    call, result = mapped.items
    assert result.ts == 1_767_225_601_500 and call.ts == result.ts - 12
    assert result.fields["is_error"] is False
    # the same record twice has the same dedup key; another time gives another key
    again = map_log(decode_logs(req.SerializeToString(), "application/x-protobuf")[0][1])
    assert again is not None and again.key == mapped.key
    rec.time_unix_nano += 1
    other = map_log(decode_logs(req.SerializeToString(), "application/x-protobuf")[0][1])
    assert other is not None and other.key != mapped.key


def test_bodies_that_cannot_be_decoded() -> None:
    with pytest.raises(UnsupportedMediaType):
        decode_traces(b"{}", "text/plain")
    with pytest.raises(BadRequest, match="not a protobuf ExportTraceServiceRequest"):
        decode_traces(b"\x0a\xff\xff\xff", "application/x-protobuf")
    with pytest.raises(BadRequest, match="expected a list"):
        decode_traces(json.dumps({"resourceSpans": {}}).encode(), "application/json")
    # unknown fields are ignored
    assert decode_traces(b'{"resourceSpans": [], "x": 1}', "application/json") == []
    bomb = gzip.compress(b"\0" * 1_000_000)
    assert len(bomb) < 2_000
    with pytest.raises(BodyTooLarge, match="over the 65536-byte limit"):
        decompress(bomb, "gzip", 65_536)
    with pytest.raises(BadRequest, match="truncated gzip"):
        decompress(bomb[:-20], "gzip", 10_000_000)
    with pytest.raises(BadRequest, match="Content-Encoding 'br'"):
        decompress(b"x", "br", 100)
    assert decompress(gzip.compress(b"abc"), "gzip", 100) == b"abc"
