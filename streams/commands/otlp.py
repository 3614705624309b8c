"""Receive OpenTelemetry traces and logs over OTLP/HTTP and publish them as sessions.

Point an agent's exporter here and its trajectory is observed like any session
published through the SDK: the receiver maps GenAI spans (current and pre-1.37
names), OpenInference spans and Claude Code / Codex log events to events, one
session per gen_ai.conversation.id / session.id / conversation.id (else the trace
id), and publishes them to the per-session topics the router reads.

  POST /v1/traces, /v1/logs   application/x-protobuf or application/json, gzip ok
  GET  /metrics               Prometheus text (requests, items by outcome,
                              rejected items by reason, events, latency);
                              with --token-file it needs the token too
  GET  /healthz

Answers: 200 (with partial_success naming rejected items), 400 undecodable body
(not retried), 401 bad token, 413 too large, 415 other content type, 429/503 with
Retry-After (retried; redeliveries are not published twice).

For an agent:
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf       (or http/json)

Examples:
  trajectory otlp                                  # 127.0.0.1:4318, broker from KAFKA_BOOTSTRAP
  trajectory otlp --host 0.0.0.0 --tls-cert c.pem --tls-key k.pem
  TRAJECTORY_OTLP_TOKEN=s3cret trajectory otlp     # clients send Authorization: Bearer s3cret
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

TOKEN_ENV = "TRAJECTORY_OTLP_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streams.otlp.server import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT

    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP)")
    parser.add_argument("--prefix", help="topic prefix (default: $TRAJECTORY_PREFIX or traj)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="listen port (4318)")
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"require 'Authorization: Bearer <token>' with the token in FILE (or ${TOKEN_ENV})",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body, as sent and gunzipped (default 16 MiB)",
    )
    parser.add_argument(
        "--max-queued",
        type=int,
        default=16,
        help="requests waiting for the ingest thread before 429 (default 16)",
    )


def _token(args: argparse.Namespace) -> str | None:
    from streams.errors import ConfigError

    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ConfigError("--token-file", f"cannot read {args.token_file}: {exc}") from exc
    return os.environ.get(TOKEN_ENV) or None


def run(args: argparse.Namespace) -> int:
    from aiohttp import web

    from streams.otlp.ingest import Ingest
    from streams.otlp.server import Receiver, ReceiverConfig
    from streams.sdk import Publisher
    from streams.settings import Settings

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings().with_(bootstrap=args.bootstrap, prefix=args.prefix)
    config = ReceiverConfig(
        host=args.host,
        port=args.port,
        token=_token(args),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        max_body_bytes=args.max_body_bytes,
        max_queued=args.max_queued,
    )
    ssl_context = config.ssl_context()
    with Publisher(settings) as publisher:
        ingest = Ingest(publisher)
        receiver = Receiver(config, ingest)
        scheme = "https" if ssl_context else "http"
        print(
            f"trajectory otlp: listening on {scheme}://{config.host}:{config.port} "
            f"(broker {settings.bootstrap}, prefix {settings.prefix}, "
            f"auth {'bearer token' if config.token else 'none'})",
            file=sys.stderr,
            flush=True,
        )
        try:
            web.run_app(
                receiver.app(),
                host=config.host,
                port=config.port,
                ssl_context=ssl_context,
                print=None,
                access_log=None,
            )
        finally:
            ingest.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    from streams.errors import TrajectoryError, exit_code

    parser = argparse.ArgumentParser(prog="trajectory otlp", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except TrajectoryError as exc:
        print(f"trajectory otlp: error: {exc}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    raise SystemExit(main())
