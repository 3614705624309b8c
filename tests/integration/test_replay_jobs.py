"""``trajectory replay --jobs N`` over topics that hold bad records: the same report,
outputs and failures as one process, whatever the batch (and so chunk) size."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer
from kafka_io import publish
from workloads import session_events

from streams.cli import main
from streams.core.events import TraceEvent
from streams.replay.parallel import ParallelReplay
from streams.replay.reader import open_event_reader
from streams.replay.replay import replay_events
from streams.serde import EventSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T0 = 1_700_000_000_000
SESSIONS = ("j-a", "j-b", "j-c", "j-d", "j-e")


@pytest.fixture
def bad_topics(settings: Settings) -> list[TraceEvent]:
    """Five session topics; in the middle of four of them a record live ingest
    would dead-letter: junk bytes, a truncated Avro body, a tombstone, and an event
    naming another session.  Returns the valid events."""
    evs = {
        sid: session_events(sid, T0 + 10 * k, calls=12, fail_every=1 + k % 3)
        for k, sid in enumerate(SESSIONS)
    }
    publish(settings, [e for sid in SESSIONS for e in evs[sid][: len(evs[sid]) // 2]])
    serde = EventSerde()
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    topic = settings.session_topic
    producer.produce(topic("j-b"), b"\x07junk", b"j-b")
    producer.produce(topic("j-a"), serde.encode(evs["j-a"][3])[:-3], b"j-a")
    producer.produce(topic("j-c"), None, b"j-c")
    producer.produce(topic("j-d"), serde.encode(evs["j-a"][4]), b"j-d")
    assert producer.flush(30) == 0
    publish(settings, [e for sid in SESSIONS for e in evs[sid][len(evs[sid]) // 2 :]])
    return [e for sid in SESSIONS for e in evs[sid]]


def test_jobs_1_and_2_agree_over_topics_with_bad_records(
    settings: Settings, bad_topics: list[TraceEvent], tmp_path: Path, capsys
) -> None:
    common = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    out: dict[tuple[str, str], bytes] = {}
    reported: dict[str, list[str]] = {}
    for jobs in ("1", "2"):
        for fmt in ("jsonl", "avro", "terminal"):
            path = tmp_path / f"{jobs}.{fmt}"
            argv = ["replay", "--sessions", "j-*", *common, "--jobs", jobs]
            assert main([*argv, "--output", fmt, "--out", str(path)]) == 1  # bad records
            err = capsys.readouterr().err
            out[jobs, fmt] = path.read_bytes()
            lines = [line for line in err.splitlines() if line.startswith("  ")]
            reported.setdefault(jobs, lines)
            assert reported[jobs] == lines  # the same report for every output
    assert reported["1"] == reported["2"]
    assert len(reported["1"]) == 4, reported["1"]
    assert [line.split("[")[0].strip() for line in reported["1"]] == [
        settings.session_topic(sid) for sid in ("j-a", "j-b", "j-c", "j-d")
    ]
    assert "refused as live ingest does" in reported["1"][3]
    assert out["1", "jsonl"] == out["2", "jsonl"] and out["1", "jsonl"]
    assert out["1", "terminal"] == out["2", "terminal"] and b"j-e" in out["1", "terminal"]
    avro = {j: list(fastavro.reader(io.BytesIO(out[j, "avro"]))) for j in ("1", "2")}
    assert avro["1"] == avro["2"] and avro["1"]
    assert main(["replay", "--sessions", "j-*", *common, "--jobs", "2", "--strict"]) == 2


@pytest.mark.parametrize("batch_size", [3, 10_000])
def test_parallel_result_equals_one_process_whatever_the_batch_size(
    settings: Settings, bad_topics: list[TraceEvent], batch_size: int
) -> None:
    """Small batches make each worker ship its outputs in many chunks: the merge
    is still the one-process result (every session, output, count and failure)."""
    reader = open_event_reader(settings.bootstrap, settings.prefix, sessions="j-*")
    expected = replay_events(reader)
    run = ParallelReplay(
        settings.bootstrap, reader.plan(), jobs=2, check=reader.check, batch_size=batch_size
    )
    run.start()
    merged, stats, _ = run.wait()
    assert sorted(merged.sessions) == list(SESSIONS)
    assert merged.sessions == expected.sessions
    assert merged.events == expected.events == len(bad_topics)
    assert stats.failures == reader.stats.failures and len(stats.failures) == 4
    assert (stats.records, stats.decoded) == (reader.stats.records, reader.stats.decoded)
