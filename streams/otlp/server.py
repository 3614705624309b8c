"""The OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (aiohttp).

Replies as the OTLP/HTTP specification says:

* **200** with an ``Export*ServiceResponse`` in the request's encoding; when some
  items were rejected, its ``partial_success`` has their count and the reasons
  (``rejected_spans`` / ``rejected_log_records``, ``error_message``).  Items that
  are not trajectory steps (HTTP spans, other log records) are accepted and ignored.
* **400** with a ``google.rpc.Status`` (``code`` 3, ``message`` = why) for a body
  that cannot be decoded: OTLP clients do not retry it.  415 for a content type
  other than protobuf / JSON, 413 for a body (or its gunzipped form) over
  ``max_body_bytes``, 401 for a missing or wrong bearer token.  Nothing of such a
  request is published.
* **429** with ``Retry-After`` when ``max_queued`` requests already wait for the
  ingest thread (the producer queue being full slows that thread, so Kafka
  back-pressure shows here too), **503** with ``Retry-After`` when publishing
  failed (broker unreachable): both are retried by OTLP clients, and duplicates
  of what was already published are dropped (:mod:`.ingest`).

Decoding, mapping and publishing run on one ingest thread (the event loop only
reads bodies and answers), so :class:`~streams.otlp.ingest.Ingest` needs no lock.
``GET /metrics`` is Prometheus' text format; when a token is set it needs the
same ``Authorization: Bearer <token>`` (401 otherwise), as the worker's HTTP view
puts its ``/metrics`` behind a token when it has tokens: with authentication on,
nothing but the liveness probe answers an anonymous caller (docs/security.md).
Prometheus then scrapes with ``authorization: {credentials_file: ...}``
(deploy/prometheus.yml).  ``GET /healthz`` answers 200 without a token (a
liveness probe carries none, and the answer says nothing).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from streams.errors import ConfigError, DeliveryError
from streams.otlp.decode import (
    JSON,
    PROTOBUF,
    BadRequest,
    BodyTooLarge,
    UnsupportedMediaType,
    decode_logs,
    decode_traces,
    decompress,
    media_type,
)
from streams.otlp.ingest import Ingest, IngestResult

log = logging.getLogger("streams.otlp")

DEFAULT_PORT: Final = 4318
DEFAULT_MAX_BODY_BYTES: Final = 16 * 1024 * 1024
REQUEST_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
_GRPC_INVALID_ARGUMENT: Final = 3
_GRPC_UNAUTHENTICATED: Final = 16
_GRPC_RESOURCE_EXHAUSTED: Final = 8
_GRPC_UNAVAILABLE: Final = 14


@dataclass(frozen=True)
class ReceiverConfig:
    """Where and how the receiver listens.

    ``token``: when set, every ``/v1/*`` request needs ``Authorization: Bearer
    <token>``.  ``tls_cert`` / ``tls_key``: PEM files; both or neither.
    ``max_body_bytes`` bounds the body both as sent and gunzipped.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_queued: int = 16
    retry_after_s: int = 1
    flush_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError(
                "tls_cert/tls_key", "give both the certificate and the key (PEM files), or neither"
            )
        if self.max_body_bytes < 1024:
            raise ConfigError("max_body_bytes", f"{self.max_body_bytes}: use at least 1024")
        if self.max_queued < 1:
            raise ConfigError("max_queued", "must be >= 1")
        if self.token is not None and not self.token.strip():
            raise ConfigError("token", "is empty: set a token or leave it unset")

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("tls_cert/tls_key", f"cannot load {self.tls_cert}: {exc}") from exc
        return ctx


class ReceiverMetrics:
    """Prometheus families of the receiver (own registry: tests run several)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "trajectory_otlp_requests",
            "OTLP export requests answered, by signal (traces|logs) and HTTP status",
            ["signal", "code"],
            registry=r,
        )
        self.items = Counter(
            "trajectory_otlp_items",
            "Spans / log records received, by signal and outcome "
            "(accepted | duplicate | ignored | rejected)",
            ["signal", "outcome"],
            registry=r,
        )
        self.rejected = Counter(
            "trajectory_otlp_rejected",
            "Rejected spans / log records (partial_success) and whole requests, by reason",
            ["signal", "reason"],
            registry=r,
        )
        self.events = Counter(
            "trajectory_otlp_events",
            "Trajectory events published to session topics",
            registry=r,
        )
        self.sessions = Gauge(
            "trajectory_otlp_sessions",
            "Sessions this receiver has published to since it started",
            registry=r,
        )
        self.queued = Gauge(
            "trajectory_otlp_queued_requests",
            "Requests waiting for or in the ingest thread",
            registry=r,
        )
        self.latency = Histogram(
            "trajectory_otlp_request_seconds",
            "Time from a request's body read to its answer (decode, map, publish)",
            ["signal"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


def encode_status(code: int, message: str, as_json: bool) -> bytes:
    """A ``google.rpc.Status`` (code, message) in protobuf or JSON."""
    if as_json:
        return json.dumps({"code": code, "message": message}).encode("utf-8")
    raw = message.encode("utf-8")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(raw)) + raw


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_response(signal: str, rejected: int, message: str, as_json: bool) -> bytes:
    """``Export{Trace,Logs}ServiceResponse``; ``partial_success`` only when something failed."""
    count_field = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
    if as_json:
        if not rejected and not message:
            return b"{}"
        body = {"partialSuccess": {count_field: str(rejected), "errorMessage": message}}
        return json.dumps(body).encode("utf-8")
    if signal == "traces":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        resp: Any = ExportTraceServiceResponse()
        if rejected or message:
            resp.partial_success.rejected_spans = rejected
            resp.partial_success.error_message = message
    else:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceResponse,
        )

        resp = ExportLogsServiceResponse()
        if rejected or message:
            resp.partial_success.rejected_log_records = rejected
            resp.partial_success.error_message = message
    return bytes(resp.SerializeToString())


class Receiver:
    """The aiohttp application around one :class:`Ingest` (see the module docstring)."""

    def __init__(
        self,
        config: ReceiverConfig,
        ingest: Ingest,
        metrics: ReceiverMetrics | None = None,
        *,
        on_result: Callable[[str, IngestResult], None] | None = None,
    ) -> None:
        self.config = config
        self.ingest = ingest
        self.metrics = metrics if metrics is not None else ReceiverMetrics()
        self.on_result = on_result
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otlp-ingest")
        self._queued = 0

    def app(self) -> web.Application:
        # aiohttp enforces the body limit on the wire (Content-Length or streamed); its
        # own gunzip is off so that decompress() bounds the gunzipped size too (a small
        # gzip bomb must not become gigabytes) and names a corrupt body in OTLP's terms.
        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            handler_args={"auto_decompress": False},
        )
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/logs", self._logs)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._health)
        app.on_shutdown.append(self._shutdown)
        return app

    async def _shutdown(self, _app: web.Application) -> None:
        self._executor.shutdown(wait=True)

    def _authorized(self, request: web.Request) -> bool:
        """No token configured, or the request carries it (compared in constant time)."""
        token = self.config.token
        if token is None:
            return True
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode("utf-8"), f"Bearer {token}".encode())

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.Response(
                status=401,
                text="missing or wrong bearer token: scrape /metrics with "
                "'Authorization: Bearer <token>' (the receiver's --token-file)\n",
                headers={"WWW-Authenticate": 'Bearer realm="otlp"'},
            )
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _traces(self, request: web.Request) -> web.Response:
        return await self._export(request, "traces")

    async def _logs(self, request: web.Request) -> web.Response:
        return await self._export(request, "logs")

    def _answer(
        self, signal: str, status: int, body: bytes, as_json: bool, headers: dict[str, str]
    ) -> web.Response:
        self.metrics.requests.labels(signal, str(status)).inc()
        headers = {"Content-Type": JSON if as_json else PROTOBUF, **headers}
        return web.Response(status=status, body=body, headers=headers)

    def _refuse(
        self, signal: str, status: int, reason: str, grpc: int, message: str, as_json: bool
    ) -> web.Response:
        self.metrics.rejected.labels(signal, reason).inc()
        headers: dict[str, str] = {}
        if status in (429, 503):
            headers["Retry-After"] = str(self.config.retry_after_s)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="otlp"'
        return self._answer(signal, status, encode_status(grpc, message, as_json), as_json, headers)

    async def _export(self, request: web.Request, signal: str) -> web.Response:
        began = time.perf_counter()
        try:
            as_json = media_type(request.content_type) == JSON
        except UnsupportedMediaType as exc:
            return self._refuse(signal, 415, "unsupported_media_type", 3, str(exc), True)
        if not self._authorized(request):
            return self._refuse(
                signal,
                401,
                "unauthenticated",
                _GRPC_UNAUTHENTICATED,
                "missing or wrong bearer token (set OTEL_EXPORTER_OTLP_HEADERS="
                "'Authorization=Bearer <token>')",
                as_json,
            )
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(
                signal,
                413,
                "too_large",
                _GRPC_INVALID_ARGUMENT,
                f"body is over the {self.config.max_body_bytes}-byte limit (--max-body-bytes)",
                as_json,
            )
        if self._queued >= self.config.max_queued:
            return self._refuse(
                signal,
                429,
                "backpressure",
                _GRPC_RESOURCE_EXHAUSTED,
                f"{self._queued} requests already queued; retry later",
                as_json,
            )
        self._queued += 1
        self.metrics.queued.set(self._queued)
        try:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(
                self._executor,
                self._process,
                signal,
                raw,
                request.content_type,
                request.headers.get("Content-Encoding"),
            )
        except BodyTooLarge as exc:
            return self._refuse(signal, 413, "too_large", _GRPC_INVALID_ARGUMENT, str(exc), as_json)
        except BadRequest as exc:
            return self._refuse(
                signal, 400, "undecodable", _GRPC_INVALID_ARGUMENT, str(exc), as_json
            )
        except DeliveryError as exc:
            # the exporter sees the reason too, but an operator must not need an
            # agent's log to learn that this receiver publishes nothing
            log.warning("%s export answered 503: cannot publish: %s", signal, exc)
            return self._refuse(
                signal, 503, "unavailable", _GRPC_UNAVAILABLE, f"cannot publish: {exc}", as_json
            )
        finally:
            self._queued -= 1
            self.metrics.queued.set(self._queued)
        m = self.metrics
        m.items.labels(signal, "accepted").inc(result.accepted)
        m.items.labels(signal, "duplicate").inc(result.duplicates)
        m.items.labels(signal, "ignored").inc(result.ignored)
        m.items.labels(signal, "rejected").inc(len(result.rejected))
        for reason, _ in result.rejected:
            m.rejected.labels(signal, reason).inc()
        m.events.inc(result.events)
        m.sessions.set(self.ingest.sessions)
        m.latency.labels(signal).observe(time.perf_counter() - began)
        if self.on_result is not None:
            self.on_result(signal, result)
        body = encode_response(signal, len(result.rejected), result.error_message(), as_json)
        return self._answer(signal, 200, body, as_json, {})

    def _process(
        self, signal: str, raw: bytes, content_type: str, encoding: str | None
    ) -> IngestResult:
        body = decompress(raw, encoding, self.config.max_body_bytes)
        items = (
            decode_traces(body, content_type)
            if signal == "traces"
            else decode_logs(body, content_type)
        )
        result = self.ingest.ingest(items)
        if result.events:
            # 200 means "stored": wait for the broker's acks; a failure is a 503 and the
            # items are not remembered, so the client's retry publishes them again.
            self.ingest.publisher.flush(self.config.flush_timeout_s)
        self.ingest.commit(result)
        return result


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "Receiver",
    "ReceiverConfig",
    "ReceiverMetrics",
    "encode_response",
    "encode_status",
]
