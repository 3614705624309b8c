"""Issue #15, defects 2 and 3 (router side), on a real broker with a router subprocess.

* A valid Avro event whose ``input_json`` is JSON nested 200,000 deep crashed the
  router with an uncaught ``RecursionError`` on every restart: nothing behind it
  was routed.
* ``{"x": NaN}`` in ``input_json`` passed the router (Python's ``json.loads``
  accepts NaN) and later crashed the worker when it encoded its state.

Now each such record goes to the DLQ with a reason naming the field, the router
keeps running, and every valid event behind it is routed exactly once.
"""

from __future__ import annotations

import io
import signal
import struct
import time
from pathlib import Path
from typing import Any

import fastavro
import pytest
from procs import RouterProc
from router_io import headers_of, publish, read_topic

from streams.core.events import TraceEvent
from streams.router.validate import DLQ_ERROR_CLASS, DLQ_REASON
from streams.serde import EventSerde, fingerprint
from streams.serde.schemas import codec_schema
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SERDE = EventSerde()


def valid(sid: str, seq: int) -> bytes:
    return SERDE.encode(TraceEvent(type="message", session_id=sid, seq=seq, timestamp_ms=seq))


def with_json(sid: str, seq: int, field: str, text: str) -> bytes:
    """A schema-valid Avro TraceEvent whose ``field`` (input_json ...) is ``text``:
    what any non-SDK producer can write."""
    record = {
        "type": "tool_call",
        "session_id": sid,
        "seq": seq,
        "timestamp_ms": seq,
        "call_id": f"c{seq}",
        "tool_name": "bash",
        "metadata": {},
        field: text,
    }
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + struct.pack("<Q", fingerprint("trace_event")))
    fastavro.schemaless_writer(buf, codec_schema("trace_event"), record)
    return buf.getvalue()


POISON = [
    ("input_json", "[" * 200_000 + "]" * 200_000, "input_json: nested deeper than 64 levels"),
    ("input_json", '{"x": NaN}', "input_json is not valid JSON text: NaN"),
    ("output_json", '{"x": [1e999]}', "output_json is not valid JSON text: number 1e999"),
    ("input_json", '{"s": "\\udcff"}', "input_json: a \\u escape is a lone UTF-16 surrogate"),
]


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_poison_json_is_dead_lettered_and_ingest_goes_on(
    settings: Settings, create_topics: Any, tmp_path: Path, guarantee: str
) -> None:
    sid = "poison1"
    topic = settings.session_topic(sid)
    create_topics(topic)
    items: list[tuple[str, bytes | None, bytes, Any]] = [
        (topic, sid.encode(), valid(sid, seq), None) for seq in range(5)
    ]
    for i, (field, text, _) in enumerate(POISON):
        items.append((topic, sid.encode(), with_json(sid, 100 + i, field, text), None))
    items += [(topic, sid.encode(), valid(sid, seq), None) for seq in range(5, 10)]
    # The deep one is ~400 KB: raise the caps so only the JSON rule can reject it.
    settings = settings.with_(max_message_bytes=1_000_000)
    publish(settings.bootstrap, items)

    router = RouterProc(
        settings,
        tmp_path / "router.log",
        "--guarantee",
        guarantee,
        "--max-message-bytes",
        str(settings.max_message_bytes),
        "--status-every",
        "1",
        "--validation",
        "full",  # the router decodes (default "framing": the worker refuses these)
    )
    try:
        deadline = time.monotonic() + 90
        dlq: list[Any] = []
        while len(dlq) < len(POISON):
            assert time.monotonic() < deadline, router.log_tail()
            assert router.proc.poll() is None, router.log_tail()
            # (the DLQ topic exists once the router has started)
            try:
                dlq = read_topic(
                    settings.bootstrap, settings.dlq_topic, len(POISON), timeout_s=3.0, idle_s=0.5
                )
            except KeyError:
                time.sleep(0.5)
        routed = read_topic(settings.bootstrap, settings.events_topic, 10)
        assert router.proc.poll() is None, router.log_tail()
        assert router.stop(signal.SIGTERM) == 0, router.log_tail()
    finally:
        router.stop(signal.SIGKILL)
    seqs = [SERDE.decode(m.value()).seq for m in routed]
    assert sorted(seqs) == list(range(10)), seqs
    assert len(dlq) == len(POISON)
    for msg, (_, _, reason) in zip(dlq, POISON, strict=True):
        headers = headers_of(msg)
        assert reason in headers[DLQ_REASON].decode(), headers[DLQ_REASON]
        assert headers[DLQ_ERROR_CLASS] == b"MalformedMessageError"
