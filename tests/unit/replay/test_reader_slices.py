"""TopicReader decodes a slice of a consumed batch before handing its events on
(``DECODE_AHEAD``); what it yields, reports and raises stays in record order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streams.core.events import TraceEvent
from streams.errors import UndecodableRecordError
from streams.replay.reader import IngestCheck, TopicReader
from streams.serde import EventSerde

CHECK = IngestCheck("p", max_message_bytes=1000)

TOPIC = "p.session.s1"


class _Msg:
    """The parts of a confluent_kafka.Message the reader reads."""

    def __init__(self, offset: int, value: bytes | None) -> None:
        self._offset, self._value = offset, value

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"s1"

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> None:
        return None

    def error(self) -> None:
        return None


def _reader(values: list[bytes | None], *, strict: bool, ahead: int) -> TopicReader[Any]:
    reader = TopicReader("127.0.0.1:1", [TOPIC], EventSerde().decode, strict=strict, check=CHECK)
    reader.DECODE_AHEAD = ahead
    msgs = [_Msg(i, v) for i, v in enumerate(values)]

    def batches() -> Iterator[list[Any]]:
        yield msgs[:5]
        yield msgs[5:]

    reader.batches = batches  # type: ignore[method-assign]
    return reader


def _event(session: str, seq: int) -> TraceEvent:
    return TraceEvent(type="tool_call", session_id=session, seq=seq, timestamp_ms=10 + seq)


def _values() -> list[bytes | None]:
    good = [EventSerde().encode(_event("s1", seq=i)) for i in range(6)]
    refused = EventSerde().encode(_event("other", seq=9))
    # offsets: 0 good, 1 junk, 2 good, 3 tombstone, 4 good, 5 other session, 6-8 good
    return [good[0], b"\x07junk", good[1], None, good[2], refused, good[3], good[4], good[5]]


@pytest.mark.parametrize("ahead", [1, 2, 3, 256])
def test_events_and_failures_keep_record_order_whatever_the_slice(ahead: int) -> None:
    reader = _reader(_values(), strict=False, ahead=ahead)
    seqs = [ev.seq for ev in reader]
    assert seqs == [0, 1, 2, 3, 4, 5]
    failures = [(f.offset, f.reason.split(":")[0]) for f in reader.stats.failures]
    assert failures == [
        (1, "MalformedMessageError"),
        (3, "no value (tombstone)"),
        (5, "refused as live ingest does"),
    ]
    assert (reader.stats.records, reader.stats.decoded) == (9, 6)


@pytest.mark.parametrize("ahead", [1, 3, 256])
def test_strict_raises_after_the_events_before_the_bad_record(ahead: int) -> None:
    reader = _reader(_values(), strict=True, ahead=ahead)
    got: list[int] = []
    with pytest.raises(UndecodableRecordError, match=r"p\.session\.s1\[0\]@1"):
        for ev in reader:
            got.append(ev.seq)
    assert got == [0]


def test_a_reader_stopped_early_counts_only_what_it_handed_on() -> None:
    reader = _reader(_values(), strict=False, ahead=256)
    it = iter(reader)
    assert [next(it).seq, next(it).seq] == [0, 1]  # offsets 0 and 2; junk at 1 between
    it.close()
    assert (reader.stats.records, reader.stats.decoded) == (3, 2)
    assert [f.offset for f in reader.stats.failures] == [1]
