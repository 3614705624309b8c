"""Spans per second through ``trajectory otlp`` into the per-session topics, and its CPU.

A script, not a test (prints figures, asserts nothing).  It

1. uses the broker at ``$KAFKA_BOOTSTRAP``, or starts one of its own on free ports;
2. starts ``python -m streams.commands.otlp`` on a fresh topic prefix;
3. builds ``--requests`` OTLP/HTTP export requests of ``--batch`` GenAI spans each
   (the SDK's BatchSpanProcessor sends 512 per request), spread over
   ``--sessions`` conversations, half ``chat`` spans and half ``execute_tool``
   spans (a tool span gives two events), encoded as protobuf (``--encoding json``:
   OTLP JSON) and gzipped as exporters do (``--no-gzip`` to send them raw);
4. sends one warm-up request per session (it creates the session topics), then
   posts the rest from ``--clients`` threads (keep-alive connections) and prints
   spans/s, events/s and the receiver's CPU per span over that part.  A 200 means
   the receiver flushed the request's events to the broker, so the time includes
   getting them onto the session topics;
5. stops the receiver and deletes the prefix's topics.

Example::

    python tests/bench/bench_otlp.py --requests 200 --sessions 50
    python tests/bench/bench_otlp.py --encoding json
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_latency import delete_prefix_topics  # noqa: E402
from procs import cpu_seconds, spawn, stop  # noqa: E402

from streams.broker import LocalBroker, free_port, free_ports, kafka_ready, parse_bootstrap  # noqa: E402

BASE_NS = 1_760_000_000_000_000_000


def _attrs(pairs: dict[str, object]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for key, value in pairs.items():
        if isinstance(value, int):
            out.append({"key": key, "value": {"intValue": str(value)}})
        else:
            out.append({"key": key, "value": {"stringValue": str(value)}})
    return out


def request_json(n: int, batch: int, sessions: list[str]) -> dict[str, object]:
    """Request ``n``: ``batch`` spans, the conversations taking turns."""
    spans = []
    for k in range(batch):
        i = n * batch + k
        sid = sessions[i % len(sessions)]
        start = BASE_NS + i * 1_000_000
        common = {"gen_ai.conversation.id": sid}
        if k % 2 == 0:
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 900,
                "gen_ai.usage.output_tokens": 40,
                **common,
            }
            name = "chat gpt-4o"
        else:
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_tests",
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": json.dumps({"cmd": f"pytest tests/t{i % 7}.py"}),
                "gen_ai.tool.call.result": "1 failed, 12 passed",
                **common,
            }
            name = "execute_tool run_tests"
        spans.append(
            {
                "traceId": f"{i // 64 + 1:032x}",
                "spanId": f"{i + 1:016x}",
                "parentSpanId": f"{i // 64 + 1:016x}",
                "name": name,
                "kind": 1,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + 400_000),
                "attributes": _attrs(attrs),
                "status": {},
            }
        )
    resource = {"attributes": _attrs({"service.name": "bench-agent"})}
    scope = {"scope": {"name": "bench"}, "spans": spans}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def encode(doc: dict[str, object], encoding: str) -> bytes:
    if encoding == "json":
        return json.dumps(doc).encode("utf-8")
    # OTLP/JSON ids are hex, protobuf JSON bytes are base64: convert the ids.
    import base64

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    for rs in doc["resourceSpans"]:  # type: ignore[attr-defined]
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()  # type: ignore[no-any-return]


def wait_healthy(url: str, proc: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the receiver did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=100, help="measured requests (100)")
    ap.add_argument("--batch", type=int, default=512, help="spans per request (512)")
    ap.add_argument("--sessions", type=int, default=20, help="conversations (20)")
    ap.add_argument("--clients", type=int, default=2, help="sending threads (2)")
    ap.add_argument("--encoding", choices=("protobuf", "json"), default="protobuf")
    ap.add_argument("--no-gzip", action="store_true", help="send bodies uncompressed")
    args = ap.parse_args()

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    broker = None
    if bootstrap is None:
        port, controller = free_ports(2)
        bootstrap = f"127.0.0.1:{port}"
        broker = LocalBroker(
            Path(tempfile.mkdtemp(prefix="bench-otlp-broker-")),
            port=port,
            controller_port=controller,
        )
        print(f"starting a local broker on {bootstrap}", flush=True)
        broker.start()
    else:
        host, port = parse_bootstrap(bootstrap)
        if not kafka_ready(host, port):
            raise SystemExit(f"KAFKA_BOOTSTRAP={bootstrap}: no broker answers")
    prefix = "bo" + uuid.uuid4().hex[:10]
    work = Path(tempfile.mkdtemp(prefix=f"bench-otlp-{prefix}-"))
    rport = free_port()
    proc = spawn(
        [
            "streams.commands.otlp",
            "--bootstrap",
            bootstrap,
            "--prefix",
            prefix,
            "--port",
            str(rport),
        ],
        work / "otlp.log",
    )
    try:
        url = f"http://127.0.0.1:{rport}"
        wait_healthy(url, proc)
        sessions = [f"bench-{k:04d}" for k in range(args.sessions)]
        ctype = "application/json" if args.encoding == "json" else "application/x-protobuf"
        print(f"encoding {args.requests} requests of {args.batch} spans ...", flush=True)
        warm = encode(request_json(0, max(args.sessions, 2), sessions), args.encoding)
        bodies = [
            encode(request_json(n + 1, args.batch, sessions), args.encoding)
            for n in range(args.requests)
        ]
        if not args.no_gzip:
            warm = gzip.compress(warm, 1)
            bodies = [gzip.compress(b, 1) for b in bodies]
        headers = {"Content-Type": ctype}
        if not args.no_gzip:
            headers["Content-Encoding"] = "gzip"

        def post(conn: http.client.HTTPConnection, body: bytes) -> None:
            conn.request("POST", "/v1/traces", body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200 or answer not in (b"", b"{}"):
                raise SystemExit(f"receiver answered {resp.status}: {answer[:300]!r}")

        conn = http.client.HTTPConnection("127.0.0.1", rport, timeout=120)
        post(conn, warm)  # creates every session topic
        conn.close()
        queue = list(range(len(bodies)))
        lock = threading.Lock()

        def client() -> None:
            c = http.client.HTTPConnection("127.0.0.1", rport, timeout=120)
            while True:
                with lock:
                    if not queue:
                        break
                    n = queue.pop()
                post(c, bodies[n])
            c.close()

        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(proc.pid) - cpu0
        spans = args.requests * args.batch
        events = spans * 3 // 2
        sent_kib = sum(len(b) for b in bodies) / len(bodies) / 1024
        print(
            f"otlp receiver ({args.encoding}{'' if args.no_gzip else '+gzip'}, "
            f"{args.requests} requests x {args.batch} spans, {args.sessions} sessions, "
            f"{args.clients} clients, {sent_kib:.0f} KiB/request): "
            f"{spans / elapsed:,.0f} spans/s ({events / elapsed:,.0f} events/s) into the "
            f"session topics; receiver CPU {cpu / spans * 1e6:.0f} us/span "
            f"({cpu / elapsed:.2f} cores)",
            flush=True,
        )
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(("trajectory_otlp_events_total", "trajectory_otlp_items_total")):
                    print("  " + line)
    finally:
        stop(proc)
        delete_prefix_topics(bootstrap, prefix)
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
