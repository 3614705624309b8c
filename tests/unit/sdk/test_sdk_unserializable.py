"""The SDK's promise (issue #15): any value that cannot be sent raises
``UnserializableError`` naming its path -- cycles and over-deep nesting included,
never ``ValueError`` / ``RecursionError`` -- and consumes no ``seq``.

The session runs against a stand-in publisher that encodes with the real
``EventSerde`` (no broker: only the validation path is under test here).
"""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.events import TraceEvent
from streams.errors import UnserializableError
from streams.sdk import summarize_params
from streams.sdk._validate import cap_payload
from streams.sdk.publisher import Session
from streams.serde import EventSerde
from streams.serde.jsontext import MAX_JSON_DEPTH
from streams.settings import Settings


class _EncodingPublisher:
    """What ``Session`` uses of a ``Publisher``: settings, on_oversize, send ..."""

    def __init__(self) -> None:
        self.settings = Settings(prefix="t")
        self.on_oversize = "truncate"
        self.serde = EventSerde()
        self.sent: list[bytes] = []

    def ensure_session_topic(self, session_id: str) -> str:
        return self.settings.session_topic(session_id)

    def announce(self, session_id: str, topic: str, info: Any) -> None:
        pass

    def send(self, event: TraceEvent) -> None:
        self.sent.append(self.serde.encode(event))

    def flush(self, timeout_s: float = 30.0) -> None:
        pass


def _session() -> tuple[Session, _EncodingPublisher]:
    pub = _EncodingPublisher()
    session = Session(
        pub,  # type: ignore[arg-type]
        "s1",
        agent_id=None,
        parent_session_id=None,
        start_metadata={},
        start_timestamp_ms=1,
        flush_on_exit=False,
    )
    session.start()
    return session, pub


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def _cyclic() -> Any:
    args: list[Any] = [1, 2]
    args.append({"again": args})
    return {"args": args}


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        (_cyclic(), "input.args[2].again", "cycle"),
        ({"x": _deep(1000)}, "input.x" + ".k" * (MAX_JSON_DEPTH - 1), "nested deeper than 64"),
        ({"x": _deep(100_000)}, "input.x" + ".k" * (MAX_JSON_DEPTH - 1), "nested deeper than 64"),
        ({"x": float("nan")}, "input.x", "NaN"),
        ({"x": [float("inf")]}, "input.x[0]", "inf"),
        ({"x": {1, 2}}, "input.x", "set is not a JSON value"),
    ],
)
def test_tool_call_input_names_the_path(value: Any, path: str, reason: str) -> None:
    session, pub = _session()
    before = session.next_seq
    with pytest.raises(UnserializableError) as info:
        session.tool_call("bash", value)
    assert info.value.field == path
    assert reason in str(info.value)
    assert session.next_seq == before  # no seq consumed
    assert len(pub.sent) == 1  # session_start only


@pytest.mark.parametrize(
    "value", [_cyclic(), _deep(1000), {"x": float("nan")}], ids=["cycle", "deep", "nan"]
)
def test_tool_result_output_and_emit_name_the_path(value: Any) -> None:
    session, _ = _session()
    with pytest.raises(UnserializableError) as info:
        session.tool_result("c1", value)
    assert info.value.field.startswith("output")
    event = TraceEvent(type="tool_call", session_id="s1", seq=0, timestamp_ms=2, input=value)
    with pytest.raises(UnserializableError) as info:
        session.emit(event)
    assert info.value.field.startswith("input")


def test_a_value_at_the_depth_limit_is_sent_and_decodes() -> None:
    session, pub = _session()
    session.tool_call("bash", _deep(MAX_JSON_DEPTH), call_id="c1")
    decoded = EventSerde().decode(pub.sent[-1])
    assert decoded.input == _deep(MAX_JSON_DEPTH)


def test_summarize_params_and_cap_payload_raise_unserializable() -> None:
    for value in (_cyclic(), _deep(5000)):
        with pytest.raises(UnserializableError):
            summarize_params(value)
        with pytest.raises(UnserializableError):
            cap_payload(value, "input", 1_000_000, "truncate")
