"""The publisher SDK against a real Kafka broker: order, topics, announcements, failures."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import ConfigResource
from kafka_io import consume

from streams.core.events import TraceEvent
from streams.errors import (
    DeliveryError,
    InvalidEventError,
    OversizedMessageError,
    UnserializableError,
)
from streams.sdk import Publisher
from streams.serde import EventSerde
from streams.settings import Settings
from streams.topics import SESSION_SEGMENT_INDEX_BYTES


def decode_all(messages: list[Message]) -> list[TraceEvent]:
    serde = EventSerde()
    return [serde.decode(m.value()) for m in messages]


def test_session_events_arrive_in_order_with_seq_and_announcement(
    settings: Settings, admin: Any
) -> None:
    settings = settings.with_(session_retention_ms=3_600_000)
    with (
        Publisher(settings) as pub,
        pub.session("sess-1", agent_id="coder", task="fix the bug", observer_profile="strict") as s,
    ):
        s.budget(max_tokens=1000, max_tool_calls=20, deadline_ms=1_900_000_000_000)
        cid = s.tool_call("bash", {"command": "pytest -x tests/", "timeout": 60})
        s.tool_result(cid, {"exit_code": 1, "stdout": "1 failed ✗"}, latency_ms=1200)
        cid2 = s.tool_call("read_file", {"path": "src/app.py"}, call_id="c-2")
        s.error("file not found", call_id=cid2)
        s.model_step("Let me look", input_tokens=900, output_tokens=40)
        s.message("done")
    topic = settings.session_topic("sess-1")
    messages = consume(settings.bootstrap, topic, 9)
    events = decode_all(messages)
    assert [e.seq for e in events] == list(range(9))
    assert [e.type for e in events] == [
        "session_start",
        "budget",
        "tool_call",
        "tool_result",
        "tool_call",
        "error",
        "model_step",
        "message",
        "session_end",
    ]
    assert all(m.key() == b"sess-1" for m in messages)
    assert all(e.session_id == "sess-1" and e.agent_id == "coder" for e in events)
    assert events[0].metadata == {"task": "fix the bug", "observer_profile": "strict"}
    assert events[1].budget is not None and events[1].budget.max_tokens == 1000
    assert events[2].call_id == events[3].call_id == cid
    assert events[2].params_summary == "pytest -x tests/"
    assert events[3].tool_name == "bash" and events[3].output == {
        "exit_code": 1,
        "stdout": "1 failed ✗",
    }
    assert (events[5].call_id, events[5].tool_name, events[5].is_error) == (
        "c-2",
        "read_file",
        True,
    )
    stamps = [e.timestamp_ms for e in events]
    assert stamps == sorted(stamps) and abs(stamps[0] - time.time() * 1000) < 120_000

    # The topic: one partition, the configured retention.
    md = admin.list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    # small index files: a topic per session must not preallocate 20 MiB of mmapped index
    assert configs["segment.index.bytes"].value == str(SESSION_SEGMENT_INDEX_BYTES)

    # The announcement on the control topic.
    (ann,) = consume(settings.bootstrap, settings.control_topic, 1)
    assert ann.key() == b"sess-1"
    body = json.loads(ann.value())
    assert body["topic"] == topic and body["session_id"] == "sess-1"
    assert body["agent_id"] == "coder"


def test_unencodable_value_fails_with_path_and_consumes_no_seq(settings: Settings) -> None:
    with Publisher(settings) as pub, pub.session("sess-v") as s:
        with pytest.raises(UnserializableError) as info:
            s.tool_call("bash", {"args": ["ls", "-l", {"a", "b"}]})
        assert info.value.field == "input.args[2]"
        with pytest.raises(UnserializableError) as info:
            s.tool_result("c", {"f": print})
        assert info.value.field == "output.f"
        with pytest.raises(UnserializableError, match="NaN"):
            s.tool_result("c", [1.0, float("nan")])
        s.message("still fine")
    events = decode_all(consume(settings.bootstrap, settings.session_topic("sess-v"), 3))
    assert [(e.seq, e.type) for e in events] == [
        (0, "session_start"),
        (1, "message"),
        (2, "session_end"),
    ]


def test_oversized_payload_is_truncated_or_raises(settings: Settings) -> None:
    settings = settings.with_(max_payload_bytes=512)
    big = {"stdout": "é" * 5000, "lines": list(range(100))}
    with Publisher(settings) as pub, pub.session("sess-big") as s:
        cid = s.tool_call("bash", {"command": "cat big.log"})
        s.tool_result(cid, big)
    with Publisher(settings, on_oversize="raise") as pub, pub.session("sess-big2") as s:
        oversized = pytest.raises(OversizedMessageError, match=r"output: .* max_payload_bytes=512")
        with oversized:
            s.tool_result("c", big)
    events = decode_all(consume(settings.bootstrap, settings.session_topic("sess-big"), 4))
    result = events[2]
    assert result.metadata == {"output_truncated": "true"}
    assert isinstance(result.output, dict) and result.output["_truncated"] is True
    assert result.output["original_type"] == "object"
    assert result.output["original_bytes"] == len(
        json.dumps(big, ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert str(result.output["preview"]).startswith('{"stdout":"éé')
    size = len(json.dumps(result.output, ensure_ascii=False, separators=(",", ":")).encode())
    assert size <= 512
    assert (
        events[1].input == {"command": "cat big.log"}
        and "input_truncated" not in events[1].metadata
    )


def test_summary_privacy_keeps_only_params_summary(settings: Settings) -> None:
    settings = settings.with_(privacy="summary")
    long_cmd = "grep -rn 'secret-token' " + "/very/long/path/" * 10
    with Publisher(settings) as pub, pub.session("sess-p") as s:
        cid = s.tool_call("bash", {"command": long_cmd, "env": {"TOKEN": "hunter2"}})
        s.tool_result(cid, {"stdout": "hunter2"})
    events = decode_all(consume(settings.bootstrap, settings.session_topic("sess-p"), 4))
    call, result = events[1], events[2]
    assert call.input is None and result.output is None
    assert call.params_summary is not None and len(call.params_summary) == 80
    assert call.params_summary.startswith("grep -rn 'secret-token'")
    assert call.params_summary.endswith("…")
    assert all(b"hunter2" not in EventSerde().encode(e) for e in events)


def test_delivery_failure_surfaces_as_delivery_error(
    settings: Settings, create_topics: Any
) -> None:
    # The broker rejects records above the topic's max.message.bytes; the SDK must
    # not lose that: flush/close raise DeliveryError naming every rejected message.
    create_topics(settings.session_topic("sess-x"), config={"max.message.bytes": "2048"})
    pub = Publisher(settings, producer_config={"message.timeout.ms": 20000})
    with pub.session("sess-x", flush_on_exit=False) as s:
        s.message("small")
        pub.flush()  # seq 0-1 delivered in their own batch
        s.message(secrets.token_urlsafe(6000))  # incompressible (lz4)
        with pytest.raises(DeliveryError) as info:
            pub.flush()
        assert "1 message(s) were not delivered" in str(info.value)
        assert "sess-x seq 2: " in str(info.value) and "MSG_SIZE_TOO_LARGE" in str(info.value)
    pub.close()  # session_end went through; nothing else is pending or failed
    events = decode_all(consume(settings.bootstrap, settings.session_topic("sess-x"), 3))
    assert [e.seq for e in events] == [0, 1, 3]  # seq 2 is the rejected one: a visible gap


def test_batch_failure_names_every_lost_message(settings: Settings, create_topics: Any) -> None:
    # A rejected batch takes its neighbours down with it: each one is reported.
    create_topics(settings.session_topic("sess-y"), config={"max.message.bytes": "2048"})
    pub = Publisher(settings, producer_config={"linger.ms": 200})
    s = pub.session("sess-y", flush_on_exit=False)
    s.start()
    s.message("small")
    s.message(secrets.token_urlsafe(6000))
    with pytest.raises(DeliveryError) as info:
        pub.flush()
    pub.close()  # the failures were reported once; nothing is pending
    text = str(info.value)
    failed = {seq for seq in range(3) if f"sess-y seq {seq}: " in text}
    assert 2 in failed
    delivered = 3 - len(failed)
    if delivered:
        got = decode_all(consume(settings.bootstrap, settings.session_topic("sess-y"), delivered))
        assert {e.seq for e in got} == set(range(3)) - failed
    assert f"{len(failed)} message(s) were not delivered" in text


def test_unreachable_broker_fails_loudly(topic_prefix: str) -> None:
    settings = Settings(bootstrap="127.0.0.1:1", prefix=topic_prefix)
    pub = Publisher(settings, admin_timeout_s=3.0)
    with pytest.raises(DeliveryError, match=r"creating topic .* (timed out|failed)"):
        pub.session("sess-z").start()
    pub.close(timeout_s=1.0)  # nothing was queued


def test_threads_share_a_session_without_gaps_or_reordering(settings: Settings) -> None:
    import threading

    per_thread, threads = 50, 4
    with Publisher(settings) as pub, pub.session("sess-t") as s:

        def work(t: int) -> None:
            for i in range(per_thread):
                s.message(f"{t}:{i}")

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    total = per_thread * threads + 2
    events = decode_all(consume(settings.bootstrap, settings.session_topic("sess-t"), total))
    assert [e.seq for e in events] == list(range(total))  # topic order == seq order
    for t in range(threads):  # each thread's own messages stay in its order
        mine = [e.text for e in events if e.text and e.text.startswith(f"{t}:")]
        assert mine == [f"{t}:{i}" for i in range(per_thread)]
    stamps = [e.timestamp_ms for e in events]
    assert stamps == sorted(stamps)


def test_ended_session_rejects_events(settings: Settings) -> None:
    with Publisher(settings) as pub:
        with pub.session("sess-e") as s:
            s.message("hi")
        with pytest.raises(InvalidEventError, match="has ended"):
            s.message("late")


def test_delivery_failure_raises_on_the_next_call(settings: Settings, create_topics: Any) -> None:
    create_topics(settings.session_topic("sess-n"), config={"max.message.bytes": "2048"})
    pub = Publisher(settings, producer_config={"linger.ms": 0})
    s = pub.session("sess-n", flush_on_exit=False)
    s.start()
    pub.flush()
    s.message(secrets.token_urlsafe(6000))
    deadline = time.monotonic() + 20
    with pytest.raises(DeliveryError, match=r"sess-n seq 1: .*MSG_SIZE_TOO_LARGE"):
        while time.monotonic() < deadline:
            s.message("next")  # each call first reports earlier delivery failures
            time.sleep(0.05)
    pub.close()
