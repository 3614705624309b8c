"""Confluent wire format end to end: SDK with a (mock://) schema registry -> Kafka -> decode."""

from __future__ import annotations

import struct

import pytest
from kafka_io import consume

from streams.errors import UnknownSchemaError
from streams.sdk import Publisher
from streams.serde import EventSerde
from streams.settings import Settings


def test_sdk_publishes_confluent_framed_events(settings: Settings) -> None:
    settings = settings.with_(schema_registry_url=f"mock://{settings.prefix}")
    with Publisher(settings) as pub, pub.session("sess-c", agent_id="a") as s:
        cid = s.tool_call("bash", {"command": "ls ü"})
        s.tool_result(cid, {"stdout": "x"})
        registry = pub.serde.registry
    messages = consume(settings.bootstrap, settings.session_topic("sess-c"), 4)
    ids = {struct.unpack(">I", m.value()[1:5])[0] for m in messages}
    assert all(m.value()[0] == 0 for m in messages) and len(ids) == 1
    reader = EventSerde("confluent", registry=registry)
    events = [reader.decode(m.value()) for m in messages]
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert events[1].input == {"command": "ls ü"} and events[2].tool_name == "bash"
    subject = reader.subject
    assert subject == "io.trajectory.v1.TraceEvent"
    assert registry.get_latest_version(subject).schema_id == ids.pop()
    # A consumer without that registry cannot guess the schema: loud, not silent.
    with pytest.raises(UnknownSchemaError, match="schema id"):
        EventSerde().decode(messages[0].value())
