"""The OTLP/HTTP receiver on the real broker, fed by the real OpenTelemetry SDK.

* a small agent instrumented with ``opentelemetry-sdk`` and its OTLP/HTTP exporter
  (protobuf, and JSON) loops on a failing tool → ``trajectory otlp`` → its
  session topic → router → worker: the worker's warning assessments equal what
  ``trajectory analyze`` says of the same spans saved as an OTLP JSON file, and
  the events on the session topic equal the file importer's (bar session_end);
* OpenInference-shaped spans and Claude Code / Codex log events land as sessions;
* an undecodable body gets 400 with the reason and publishes nothing;
* a retried export (the same request twice) does not duplicate events, and a
  receiver restart continues a session's seq.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_io import live_history, read_all
from procs import REPO, RouterProc, WorkerProc

from streams.broker import free_port
from streams.core.events import TraceEvent
from streams.importers import read_events
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = pytest.mark.integration


class ReceiverProc:
    """``python -m streams.commands.otlp`` on a free port, for one test's prefix."""

    def __init__(self, settings: Settings, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.log_path = log
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streams.commands.otlp",
                "--bootstrap",
                settings.bootstrap,
                "--prefix",
                settings.prefix,
                "--port",
                str(self.port),
                *extra,
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log_tail()
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "receiver did not start:\n" + self.log_tail()
            time.sleep(0.2)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def post(
        self,
        path: str,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(
            self.url + path,
            data=body,
            method="POST",
            headers={"Content-Type": content_type, **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            return resp.read().decode()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


@pytest.fixture
def receiver(settings: Settings, tmp_path: Path) -> Iterator[ReceiverProc]:
    proc = ReceiverProc(settings, tmp_path / "otlp.log")
    try:
        yield proc
    finally:
        proc.stop()


def session_events(settings: Settings, session_id: str, idle_s: float = 2.0) -> list[TraceEvent]:
    serde = EventSerde()
    records = read_all(settings, settings.session_topic(session_id), idle_s=idle_s)
    return [serde.decode(v) for _, v in records]


def _comparable(e: TraceEvent) -> tuple[Any, ...]:
    return (
        e.type,
        e.seq,
        e.timestamp_ms,
        e.call_id,
        e.tool_name,
        e.input,
        e.output,
        e.is_error,
        e.error_message,
        e.input_tokens,
        e.output_tokens,
        e.latency_ms,
    )


# -- the agent ------------------------------------------------------------------------


def looping_agent(exporter: Any, conversation: str, loops: int = 8) -> list[Any]:
    """A Pydantic-AI-shaped agent run (GenAI conventions) that retries a failing tool.

    Exports through *exporter* (real BatchSpanProcessor) and returns the finished
    spans as the SDK saw them (an in-memory copy, to write the same spans to a file).
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "looper"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("looping-agent")
    conv = {"gen_ai.conversation.id": conversation}
    with tracer.start_as_current_span(
        "invoke_agent looper", attributes={"gen_ai.operation.name": "invoke_agent", **conv}
    ):
        for i in range(loops):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 900 + i,
                    "gen_ai.usage.output_tokens": 40,
                    **conv,
                },
            ):
                time.sleep(0.002)
            with tracer.start_as_current_span(
                "execute_tool run_tests",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "run_tests",
                    "gen_ai.tool.call.id": f"call_{i}",
                    "gen_ai.tool.call.arguments": json.dumps({"cmd": "pytest tests/test_api.py"}),
                    "gen_ai.tool.call.result": "FAILED tests/test_api.py::test_get",
                    **conv,
                },
            ) as span:
                time.sleep(0.002)
                span.set_attribute("error.type", "AssertionError")
                span.set_status(Status(StatusCode.ERROR, "AssertionError: 404 != 200"))
    assert provider.force_flush(30_000)
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return spans


def _exporter(kind: str, url: str) -> Any:
    if kind == "protobuf":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as Json

    return Json(endpoint=url + "/v1/traces")


def _assessments_by_seq(records: list[dict[str, Any]]) -> dict[int, set[tuple[str, str]]]:
    out: dict[int, set[tuple[str, str]]] = {}
    for r in records:
        out.setdefault(int(r["seq"]), set()).add((r["observer"], r["severity"]))
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_otel_sdk_looping_agent_gets_the_warning_analyze_gives(
    settings: Settings, tmp_path: Path, receiver: ReceiverProc, encoding: str
) -> None:
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

    sid = f"conv-loop-{encoding}"
    worker = WorkerProc(settings, tmp_path / "data")
    router = RouterProc(settings, tmp_path / "router.log")
    try:
        spans = looping_agent(_exporter(encoding, receiver.url), sid)
        # the same spans as an OTLP JSON file, analyzed offline
        path = tmp_path / "spans.json"
        path.write_text(encode_spans(spans).to_json())
        offline = list(read_events(path))
        assert [e.session_id for e in offline][:1] == [sid]
        analyzed = subprocess.run(
            [sys.executable, "-m", "streams", "analyze", "--json", str(path)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
        records = [json.loads(line) for line in analyzed.stdout.splitlines()]
        want = _assessments_by_seq([r for r in records if r["kind"] == "assessment"])
        assert any(sev in ("warning", "critical") for v in want.values() for _, sev in v), records

        # the events on the session topic are the file importer's (live has no session_end)
        live = session_events(settings, sid)
        assert [_comparable(e) for e in live] == [_comparable(e) for e in offline[:-1]]
        assert offline[-1].type == "session_end"

        worker.wait_state({sid: {"last_seq": live[-1].seq}}, timeout_s=150)
        history = [a for a in live_history(settings) if a.session_id == sid]
        got: dict[int, set[tuple[str, str]]] = {}
        rendered: dict[int, str] = {}
        for a in history:
            if a.trigger != "event":
                continue
            rendered[a.seq] = a.rendered
            for item in a.assessments or []:
                got.setdefault(a.seq, set()).add((item["observer"], item["severity"]))
        assert got == want
        # and the words: each offline assessment's text is in the live rendering
        for r in records:
            if r["kind"] == "assessment":
                assert r["text"] in rendered[r["seq"]], (r, rendered[r["seq"]])
        assert any(a.max_severity in ("warning", "critical") for a in history)
    finally:
        router.stop()
        assert worker.stop() == 0, worker.log_tail()


# -- other shapes -------------------------------------------------------------------------


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def openinference_request(session: str, loops: int) -> dict[str, Any]:
    base = 1_760_000_000_000_000_000
    spans = []
    for i in range(loops):
        start = base + i * 1_000_000_000
        spans.append(
            {
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": f"{i + 1:016x}",
                "name": "search",
                "kind": 1,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + 200_000_000),
                "attributes": [
                    _kv("openinference.span.kind", "TOOL"),
                    _kv("tool.name", "web_search"),
                    _kv("tool.parameters", json.dumps({"query": "same query"})),
                    _kv("output.value", "no results"),
                    _kv("session.id", session),
                ],
                "status": {"code": 2, "message": "no results"},
                "futureField": {"ignored": True},
            }
        )
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}


def claude_code_request(session: str) -> dict[str, Any]:
    t = 1_760_000_000_000_000_000
    records = []
    for i in range(3):
        records.append(
            {
                "timeUnixNano": str(t + i * 2_000_000_000),
                "body": {"stringValue": "claude_code.tool_result"},
                "attributes": [
                    _kv("event.name", "tool_result"),
                    _kv("session.id", session),
                    _kv("tool_name", "Bash"),
                    _kv("success", "false" if i < 2 else "true"),
                    _kv("duration_ms", 150),
                    _kv("error", "exit code 1" if i < 2 else ""),
                    _kv("tool_parameters", json.dumps({"command": "npm test"})),
                ],
            }
        )
    records.append(
        {
            "timeUnixNano": str(t + 7_000_000_000),
            "body": {"stringValue": "claude_code.api_request"},
            "attributes": [
                _kv("event.name", "api_request"),
                _kv("session.id", session),
                _kv("model", "claude-sonnet-4-5"),
                _kv("input_tokens", 1200),
                _kv("output_tokens", 80),
                _kv("duration_ms", 900),
            ],
        }
    )
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": [_kv("service.name", "claude-code")]},
                "scopeLogs": [
                    {"scope": {"name": "com.anthropic.claude_code"}, "logRecords": records}
                ],
            }
        ]
    }


@pytest.mark.timeout(240)
def test_openinference_spans_and_claude_code_logs_land_as_sessions(
    settings: Settings, receiver: ReceiverProc
) -> None:
    status, body, _ = receiver.post(
        "/v1/traces", json.dumps(openinference_request("oi-session", 4)).encode()
    )
    assert status == 200, body
    assert json.loads(body) == {}
    gz = gzip.compress(json.dumps(claude_code_request("cc-session")).encode())
    status, body, _ = receiver.post("/v1/logs", gz, headers={"Content-Encoding": "gzip"})
    assert status == 200, body

    oi = session_events(settings, "oi-session")
    assert [e.type for e in oi] == ["session_start"] + ["tool_call", "tool_result"] * 4
    call, result = oi[1], oi[2]
    assert (call.tool_name, call.input, call.call_id) == (
        "web_search",
        {"query": "same query"},
        "0000000000000001",
    )
    assert (result.is_error, result.error_message, result.output) == (
        True,
        "no results",
        "no results",
    )

    cc = session_events(settings, "cc-session")
    assert [e.type for e in cc] == [
        "session_start",
        *["tool_call", "tool_result"] * 3,
        "model_step",
    ]
    assert [e.is_error for e in cc if e.type == "tool_result"] == [True, True, False]
    assert cc[1].input == {"command": "npm test"} and cc[2].latency_ms == 150
    assert (cc[-1].input_tokens, cc[-1].output_tokens) == (1200, 80)
    assert cc[1].timestamp_ms == 1_760_000_000_000 - 150


@pytest.mark.timeout(240)
def test_malformed_bodies_get_400_and_publish_nothing(
    settings: Settings, receiver: ReceiverProc, admin: Any
) -> None:
    cases = [
        (b"\x0a\xff\xff\xff", "application/x-protobuf", {}, "protobuf"),
        (b"{not json", "application/json", {}, "not JSON"),
        (b"[1, 2]", "application/json", {}, "expected an object"),
        (b'{"resourceSpans": 3}', "application/json", {}, "resourceSpans"),
        (b"\x1f\x8b\x08\x00garbage", "application/json", {"Content-Encoding": "gzip"}, "gzip"),
    ]
    for body, ctype, headers, reason in cases:
        status, answer, _ = receiver.post("/v1/traces", body, ctype, headers)
        assert status == 400, (body, answer)
        if ctype == "application/json":
            doc = json.loads(answer)
            assert doc["code"] == 3 and reason in doc["message"], doc
        else:
            from google.rpc.status_pb2 import Status  # type: ignore[import-untyped]

            msg = Status.FromString(answer)
            assert msg.code == 3 and reason in msg.message, msg
    status, _, _ = receiver.post("/v1/traces", b"x", "text/plain")
    assert status == 415
    # one good span with one bad one: 200, partial_success names the bad one
    doc = openinference_request("partly", 1)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[0], "spanId": "ff", "startTimeUnixNano": "soon"})
    bad_tool = {**spans[0], "spanId": "fe", "attributes": [_kv("openinference.span.kind", "TOOL")]}
    spans.append(bad_tool)
    status, answer, _ = receiver.post("/v1/traces", json.dumps(doc).encode())
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "spans[1].startTimeUnixNano" in partial["errorMessage"]
    assert "spans[2].attributes: execute_tool span without" in partial["errorMessage"]

    topics = admin.list_topics(timeout=10).topics
    mine = sorted(t for t in topics if t.startswith(settings.prefix + ".session."))
    assert mine == [settings.session_topic("partly")]
    assert [e.type for e in session_events(settings, "partly")] == [
        "session_start",
        "tool_call",
        "tool_result",
    ]
    metrics = receiver.metrics()
    assert 'trajectory_otlp_rejected_total{reason="undecodable",signal="traces"} 5.0' in metrics
    assert 'trajectory_otlp_rejected_total{reason="malformed",signal="traces"} 1.0' in metrics
    assert 'trajectory_otlp_rejected_total{reason="unmappable",signal="traces"} 1.0' in metrics


@pytest.mark.timeout(240)
def test_a_retried_export_does_not_duplicate_and_a_restart_continues_seq(
    settings: Settings, tmp_path: Path
) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # real SDK spans, encoded as the protobuf exporter encodes them
    spans = looping_agent(InMemorySpanExporter(), "retried", loops=3)
    body = encode_spans(spans).SerializeToString()
    first = ReceiverProc(settings, tmp_path / "otlp1.log")
    try:
        for _ in range(3):  # the exporter's retries after a lost answer
            status, _, _ = first.post("/v1/traces", body, "application/x-protobuf")
            assert status == 200
        assert 'trajectory_otlp_items_total{outcome="duplicate",signal="traces"} 12.0' in (
            first.metrics()
        )
    finally:
        first.stop()
    # a new receiver process: the same request again is not recognized as a duplicate
    # (dedup memory is per process), but new spans continue the session's seq
    second = ReceiverProc(settings, tmp_path / "otlp2.log")
    try:
        more = looping_agent(InMemorySpanExporter(), "retried", loops=1)
        status, _, _ = second.post(
            "/v1/traces", encode_spans(more).SerializeToString(), "application/x-protobuf"
        )
        assert status == 200
    finally:
        second.stop()
    events = session_events(settings, "retried")
    assert [e.seq for e in events] == list(range(len(events)))
    # one start, 4 model steps and 4 calls with their results: nothing twice
    # (order within a millisecond follows the file importer's tie-break)
    assert sorted(e.type for e in events) == sorted(
        ["session_start", *["model_step", "tool_call", "tool_result"] * 4]
    )


# -- security and limits -----------------------------------------------------------------


def _certificates(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed: cannot make test certificates")
    ca, ca_key = tmp_path / "ca.pem", tmp_path / "ca-key.pem"
    cert, key, csr = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "cert.csr"
    ext = tmp_path / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    for cmd in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
         "-keyout", str(ca_key), "-out", str(ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", "1", "-extfile", str(ext), "-out", str(cert)],
    ):  # fmt: skip
        subprocess.run(["openssl", *cmd], check=True, capture_output=True)
    return ca, cert, key


@pytest.mark.timeout(240)
def test_token_tls_and_size_limit(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    ca, cert, key = _certificates(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    proc = ReceiverProc.__new__(ReceiverProc)
    port = free_port()
    proc.port, proc.log_path, proc.url = port, tmp_path / "otlp.log", f"https://127.0.0.1:{port}"
    proc.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streams.commands.otlp",
            "--bootstrap",
            settings.bootstrap,
            "--prefix",
            settings.prefix,
            "--port",
            str(port),
            "--token-file",
            str(token_file),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--max-body-bytes",
            "65536",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=proc.log_path.open("ab"),
        stderr=subprocess.STDOUT,
    )
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.proc.poll() is None, proc.log_tail()
            try:
                with urllib.request.urlopen(proc.url + "/healthz", timeout=2, context=ctx):
                    break
            except OSError:
                assert time.monotonic() < deadline, proc.log_tail()
                time.sleep(0.2)

        def post(body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
            req = urllib.request.Request(
                proc.url + "/v1/traces",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json", **headers},
            )
            try:
                with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        good = json.dumps(openinference_request("secured", 1)).encode()
        assert post(good, {})[0] == 401
        assert post(good, {"Authorization": "Bearer wrong"})[0] == 401
        auth = {"Authorization": "Bearer s3cret"}
        too_big = json.dumps({"resourceSpans": [], "pad": "x" * 70_000}).encode()
        status, answer = post(too_big, auth)
        assert status == 413, answer
        bomb = gzip.compress(json.dumps({"resourceSpans": [], "pad": "x" * 200_000}).encode())
        assert len(bomb) < 65_536
        status, answer = post(bomb, {**auth, "Content-Encoding": "gzip"})
        assert status == 413 and b"65536-byte limit" in answer, answer
        assert post(good, auth)[0] == 200
        # the real exporter, with TLS and the token header as a user configures them
        # (requests lets $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE override the exporter's
        # certificate_file: unset them so the test CA is the one used)
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        spans = looping_agent(
            OTLPSpanExporter(
                endpoint=proc.url + "/v1/traces",
                certificate_file=str(ca),
                headers={"Authorization": "Bearer s3cret"},
            ),
            "secured-sdk",
            loops=2,
        )
        assert len(spans) == 5
        # /metrics is behind the token too (as the worker's view with tokens)
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(proc.url + "/metrics", timeout=5, context=ctx)
        assert anonymous.value.code == 401
        scrape = urllib.request.Request(proc.url + "/metrics", headers=auth)
        with urllib.request.urlopen(scrape, timeout=5, context=ctx) as resp:
            metrics = resp.read().decode()
        assert 'trajectory_otlp_rejected_total{reason="unauthenticated",signal="traces"} 2.0' in (
            metrics
        )
        assert 'trajectory_otlp_rejected_total{reason="too_large",signal="traces"} 2.0' in metrics
    finally:
        assert proc.stop() == 0, proc.log_tail()
    assert [e.type for e in session_events(settings, "secured")] == [
        "session_start",
        "tool_call",
        "tool_result",
    ]
    assert len(session_events(settings, "secured-sdk")) == 1 + 2 * 3
