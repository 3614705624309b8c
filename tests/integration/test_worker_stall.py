"""A worker that stops handling events says so, with what it waits on.

Two fresh-clone CI runs (2026-12-03) ended with a restarted worker that applied
nothing more and logged nothing about it while its HTTP view answered.  Here a real
worker on the real broker is made to hang in its batch handler (test-only
``sitecustomize``: the handler waits while a file exists), and must name the stall
at WARNING within ``--stall-warn``, count it in /stats, log its fetch state and
every stack on SIGUSR1, and say when it moves again, losing nothing.

A seek to the committed offsets that does not end (the offset fetch held by a
test-only ``sitecustomize``) used to end Faust's recovery silently after its
``broker_request_timeout``, the worker then up and applying nothing for good; it
must stop the worker instead, non-zero and naming the seek, so that a restart
applies everything.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kafka_io import produce
from procs import WorkerProc
from workloads import check_tables, expected_of, make_session

from streams.core.events import TraceEvent
from streams.settings import Settings

_HANG_SITECUSTOMIZE = """\
import asyncio
import os

from streams.worker import batch as _batch

HOLD = os.environ["STALL_TEST_HOLD"]
_handle = _batch.EventBatchHandler.handle


async def _held_handle(self, records, current=None):
    while os.path.exists(HOLD):
        await asyncio.sleep(0.1)
    return await _handle(self, records, current=current)


_batch.EventBatchHandler.handle = _held_handle
print("test sitecustomize: the batch handler waits while", HOLD, "exists", flush=True)
"""


_SEEK_HOLD_SITECUSTOMIZE = """\
import asyncio
import os

from aiokafka.consumer import consumer as _consumer

HOLD = os.environ["SEEK_TEST_HOLD"]
_committed = _consumer.AIOKafkaConsumer.committed


async def _held_committed(self, tp):
    while os.path.exists(HOLD) and tp.topic.endswith(".events"):
        await asyncio.sleep(0.1)
    return await _committed(self, tp)


_consumer.AIOKafkaConsumer.committed = _held_committed
print("test sitecustomize: committed() of events partitions waits while", HOLD, flush=True)
"""


def _inject_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sitecustomize: str, env: str
) -> tuple[Path, Path]:
    """``(directory with the test-only sitecustomize, hold file)``: the injected
    code waits while the hold file (named by ``$env``) exists."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(sitecustomize)
    hold = tmp_path / "hold"
    hold.write_text("")
    monkeypatch.setenv(env, str(hold))
    return inject, hold


def _log(worker: WorkerProc) -> str:
    return worker.log_path.read_text(errors="replace")


def _wait_log(worker: WorkerProc, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in _log(worker):
        assert worker.proc.poll() is None, worker.log_tail()
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{worker.warnings()}"
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_worker_hung_in_its_handler_names_the_stall_and_recovers(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams.topics import ensure_worker_topics

    ensure_worker_topics(settings)
    inject, hold = _inject_hold(tmp_path, monkeypatch, _HANG_SITECUSTOMIZE, "STALL_TEST_HOLD")
    worker = WorkerProc(
        settings, tmp_path / "data", extra=("--stall-warn", "4"), pythonpath=(inject,)
    )
    try:
        _wait_log(worker, "the batch handler waits while", 60)
        sessions = [make_session(f"stall-{i}", 30, seed=i) for i in range(6)]
        events = [s[j] for j in range(30) for s in sessions]
        produce(settings, events)
        exp = expected_of(events)

        _wait_log(worker, "no event handled for", 120)
        text = next(line for line in _log(worker).splitlines() if "no event handled for" in line)
        assert "[WARNING]" in text, text
        assert f"{settings.events_topic}[" in text, text
        assert "a batch has been in the handler for" in text, text
        assert "batch in the handler" in text and "seeked True" in text, text
        status, stats = worker.get("/stats")
        assert status == 200 and stats["stalls"] >= 1 and stats["stalled_partitions"], stats
        assert stats["applied"] == 0, stats  # (really stuck: nothing applied)

        worker.proc.send_signal(signal.SIGUSR1)
        _wait_log(worker, "SIGUSR1: the worker's fetch state: consumer generation", 30)
        _wait_log(worker, "_held_handle", 30)  # mode's stack of every task

        hold.unlink()
        worker.wait_state({sid: {"last_seq": d["last_seq"]} for sid, d in exp.items()}, 120)
        check_tables(worker, exp)
        _wait_log(worker, "handling again after a stall of", 30)
        status, stats = worker.get("/stats")
        assert stats["stalled_partitions"] == [], stats
    finally:
        if hold.exists():
            hold.unlink()
        code = worker.stop()
    assert code == 0, worker.log_tail()


@pytest.mark.timeout(300)
def test_a_seek_that_never_ends_stops_the_worker_and_a_restart_applies_everything(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduced before the fix: with the offset fetch held 130 s the worker stayed
    up and applied 0 of 60 events after the release (Faust's recovery had ended at
    its 90 s timeout, silently); held 40 s, it applied all 60."""
    from streams.topics import ensure_worker_topics

    ensure_worker_topics(settings)
    sessions = [make_session(f"seek-{i}", 10, seed=i) for i in range(6)]
    events = [s[j] for j in range(10) for s in sessions]
    produce(settings, events)
    exp = expected_of(events)
    inject, hold = _inject_hold(tmp_path, monkeypatch, _SEEK_HOLD_SITECUSTOMIZE, "SEEK_TEST_HOLD")
    worker = WorkerProc(
        settings,
        tmp_path / "data",
        extra=("--stall-warn", "3", "--seek-timeout", "10"),
        pythonpath=(inject,),
    )
    try:
        _wait_log(worker, "committed() of events partitions waits while", 60)
        # the stall watch names the seek first, then the seek gives up: exit 4 (Kafka
        # I/O), well before Faust's 90 s would have ended its recovery silently
        code = worker.proc.wait(90)
    finally:
        if worker.proc.poll() is None:
            worker.stop()
        hold.unlink()
    log = _log(worker)
    assert code == 4, worker.log_tail()
    assert "a seek to the committed offsets has run for" in log, worker.warnings()
    critical = [line for line in log.splitlines() if "[CRITICAL]" in line]
    assert any(
        "to the committed offsets has not ended after 1" in line
        and f"{settings.events_topic}[0,1,2]" in line
        and "--seek-timeout" in line
        for line in critical
    ), worker.warnings()
    worker.stop()

    restarted = WorkerProc(settings, tmp_path / "data")
    try:
        restarted.wait_state({sid: {"last_seq": d["last_seq"]} for sid, d in exp.items()}, 120)
        check_tables(restarted, exp)
        status, stats = restarted.get("/stats")
        assert status == 200 and stats["applied"] == len(events), stats  # none twice
    finally:
        code = restarted.stop()
    assert code == 0, restarted.log_tail()


def _produce_in_transactions(settings: Settings, events: list[TraceEvent]) -> None:
    """As the router writes ``<prefix>.events``: in transactions, so the last offset
    of each partition is a commit marker the worker never handles."""
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    p = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "partitioner": "murmur2_random",
            "transactional.id": f"{settings.prefix}-stall-test",
        }
    )
    p.init_transactions(30)
    for start in range(0, len(events), 20):
        p.begin_transaction()
        for ev in events[start : start + 20]:
            p.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))
        p.commit_transaction(30)


def test_an_idle_worker_names_no_stall(settings: Settings, tmp_path: Path) -> None:
    """Caught up and quiet for several stall periods (the last record of each
    partition is a transaction's commit marker): no stall line."""
    from streams.topics import ensure_worker_topics

    ensure_worker_topics(settings)
    worker = WorkerProc(settings, tmp_path / "data", extra=("--stall-warn", "2"))
    try:
        sessions = [make_session(f"idle-{i}", 10, seed=i) for i in range(6)]
        events = [s[j] for j in range(10) for s in sessions]
        _produce_in_transactions(settings, events)
        exp = expected_of(events)
        worker.wait_state({sid: {"last_seq": d["last_seq"]} for sid, d in exp.items()}, 120)
        time.sleep(10)  # five stall periods, the watch looking every second
        assert "no event handled for" not in _log(worker), worker.warnings()
        status, stats = worker.get("/stats")
        assert status == 200 and stats["stalls"] == 0, stats
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail()
