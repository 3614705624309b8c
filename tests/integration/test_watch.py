"""``trajectory watch`` as a subprocess against the real broker (records produced here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.serde.avro import AssessmentSerde, AssessmentWire, PatternRecord, PatternSerde
from streams.settings import Settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def topics(settings: Settings, create_topics: Any) -> Settings:
    create_topics(settings.assessments_topic, partitions=3, config={"cleanup.policy": "compact"})
    create_topics(settings.patterns_topic, partitions=3)
    return settings


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[Producer]:
    p = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    yield p
    p.flush(10)


def publish(p: Producer, s: Settings, records: list[AssessmentWire | PatternRecord]) -> None:
    for r in records:
        if isinstance(r, AssessmentWire):
            p.produce(
                s.assessments_topic, key=r.session_id.encode(), value=AssessmentSerde().encode(r)
            )
        else:
            p.produce(s.patterns_topic, key=r.session_id.encode(), value=PatternSerde().encode(r))
    assert p.flush(30) == 0


def wire(sid: str, seq: int, severity: str, parent: str | None = None) -> AssessmentWire:
    return AssessmentWire(
        sid,
        seq,
        1_700_000_000_000 + seq,
        "event",
        call_index=seq,
        max_severity=severity,
        rendered=f"## Trajectory Assessment of {sid}",
        parent_session_id=parent,
        agent_id="coder",
    )


def watch(s: Settings, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streams.cli",
        "watch",
        "--bootstrap",
        s.bootstrap,
        "--prefix",
        s.prefix,
        *args,
    ]


def test_plain_from_beginning_with_filters(topics: Settings, producer: Producer) -> None:
    publish(
        producer,
        topics,
        [
            wire("root", 1, "caution"),
            wire("kid", 2, "warning", parent="root"),
            wire("stranger", 3, "warning"),
            wire("kid", 4, "info", parent="root"),
            PatternRecord(
                "kid",
                2,
                1,
                "doom_loop",
                severity="warning",
                confidence=0.75,
                parent_session_id="root",
            ),
        ],
    )
    proc = subprocess.run(
        [
            *watch(topics, "--plain", "--from-beginning", "--patterns", "--tree", "root"),
            *("--min-severity", "caution", "--duration", "6"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == [
        "assessment session=kid seq=2 call=2 severity=warning trigger=event trend=steady "
        "parent=root agent=coder",
        "assessment session=root seq=1 call=1 severity=caution trigger=event trend=steady "
        "parent=- agent=coder",
        "pattern session=kid seq=2 call=0 type=doom_loop severity=warning confidence=0.75 "
        "occurrences=1 parent=root agent=-",
    ]
    assert "below_severity=1" in proc.stderr and "delivered=3" in proc.stderr


def test_plain_latest_follows_live_records_and_ctrl_c_exits_zero(
    topics: Settings, producer: Producer
) -> None:
    publish(producer, topics, [wire("old", 1, "warning")])
    proc = subprocess.Popen(
        watch(topics, "--plain", "--session", "live-*"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # (PYTHONFAULTHANDLER: a SIGABRT below prints where it hangs)
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        started = proc.stderr.readline()  # printed once the partitions are assigned
        assert started.startswith("# watching"), started
        publish(
            producer,
            topics,
            [wire("live-1", 1, "info"), wire("live-1", 2, "warning"), wire("other", 1, "info")],
        )
        got: list[str] = []
        reader = threading.Thread(
            target=lambda: got.extend(proc.stdout.readline() for _ in range(2))
        )
        reader.start()
        reader.join(30)
        assert [line.split(" trigger")[0] for line in got] == [
            "assessment session=live-1 seq=1 call=1 severity=info",
            "assessment session=live-1 seq=2 call=2 severity=warning",
        ]
        assert "trend=escalating" in got[1]
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            # seen twice in loaded CI runs, before Ctrl-C became a flag the loop
            # checks (streams/commands/watch.py); not reproduced alone: show where
            proc.send_signal(signal.SIGABRT)
            err = proc.communicate(timeout=10)[1]
            raise AssertionError(f"no exit 30 s after Ctrl-C; its threads:\n{err}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""  # nothing from before the watch started, nothing from "other"
    assert "# watch ended:" in err and "delivered=2" in err and "not_selected=1" in err
    assert "Traceback" not in err


def test_live_view_renders_table_and_latest_assessment(
    topics: Settings, producer: Producer
) -> None:
    publish(producer, topics, [wire("alpha", 3, "warning"), wire("beta", 5, "caution")])
    proc = subprocess.run(
        watch(topics, "--from-beginning", "--duration", "5", "--select", "alpha"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "alpha" in proc.stdout and "beta" in proc.stdout
    assert "warning" in proc.stdout and "caution" in proc.stdout
    assert "Trajectory Assessment of alpha" in proc.stdout
    assert "latest assessment of alpha" in proc.stdout
