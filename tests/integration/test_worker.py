"""The Faust worker against a real broker: exactly-once tables, restarts, SIGKILL.

Each test runs ``python -m streams.commands.worker`` as a subprocess (the way it
is deployed), produces Avro events straight into ``<prefix>.events`` with the
serde, and reads table state through the worker's HTTP view
(``GET /sessions/{id}/state`` and ``/minutes``).  Why the HTTP view and not the
changelog topic: it shows what the worker's *tables* hold after recovery, which
is what restarts must preserve; the fresh-data-dir restart then proves the
changelog alone carries the state.

Expected values are computed here from the produced events, independently of
``streams.worker.state``.
"""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kafka_io import SteadyEventProducer, produce, read_dlq
from procs import WorkerProc
from workloads import T0, check_tables, expected_of, make_session, state_any, wait_all

from streams.core.events import TraceEvent
from streams.settings import Settings


@pytest.mark.timeout(240)
def test_exactly_once_tables_dlq_and_http_view(settings: Settings, tmp_path: Path) -> None:
    events = [e for i in range(4) for e in make_session(f"s{i}", 40)]
    dups = [e for e in events if e.seq % 3 == 0]  # redelivered copies, same seq
    worker = WorkerProc(settings, tmp_path / "data")
    try:
        # the engine rejects a restore of a snapshot never taken: DLQ, no table changes
        from streams.core.events import META_SNAPSHOT_ID
        from streams.serde import EventSerde

        bad_restore = TraceEvent(
            "restore", "s1", 1000, T0 + 999_000, metadata={META_SNAPSHOT_ID: "never-taken"}
        )
        produce(
            settings,
            events + dups,
            extra=[(b"s0", b"not avro at all"), (b"s1", EventSerde().encode(bad_restore))],
        )
        exp = expected_of(events)
        worker.wait_state(exp)
        check_tables(worker, exp)
        # unknown and malformed ids
        status, body = worker.get("/sessions/nope/state")
        assert status == 404 and body["error"] == "unknown session"
        status, body = worker.get("/sessions/bad%20id/state")
        assert status == 400 and "malformed" in body["error"]
        stats = worker.get("/stats")[1]
        assert stats["applied"] == len(events)
        assert stats["duplicates"] == len(dups)
        dlq = read_dlq(settings, want=2)
        assert len(dlq) == 2
        by_key = {m.key(): (dict(m.headers()), m.value()) for m in dlq}
        headers, value = by_key[b"s0"]
        assert headers["dlq.source.topic"].decode() == settings.events_topic
        assert headers["dlq.stage"] == b"worker"
        assert headers["dlq.error_class"] in (b"MalformedMessageError", b"UnknownSchemaError")
        assert headers["dlq.reason"], headers
        assert value == b"not avro at all"
        headers, _ = by_key[b"s1"]
        assert headers["dlq.error_class"] == b"InvalidEventError"
        assert b"never-taken" in headers["dlq.reason"]
    finally:
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.timeout(420)
def test_restart_same_and_fresh_data_dir_continues_from_changelog(
    settings: Settings, tmp_path: Path
) -> None:
    sids = ["a", "b", "c"]
    batch1 = [e for s in sids for e in make_session(s, 30)]
    batch2 = [e for s in sids for e in make_session(s, 30, start_seq=30)]
    batch3 = [e for s in sids for e in make_session(s, 30, start_seq=60)]
    w = WorkerProc(settings, tmp_path / "d1")
    try:
        produce(settings, batch1)
        w.wait_state(expected_of(batch1))
        check_tables(w, expected_of(batch1))
    finally:
        assert w.stop() == 0, w.log_tail()

    # same data dir: rocksdb files + changelog tail; old events redelivered are ignored
    w = WorkerProc(settings, tmp_path / "d1")
    try:
        produce(settings, batch1[::5] + batch2)
        w.wait_state(expected_of(batch1 + batch2))
        check_tables(w, expected_of(batch1 + batch2))
    finally:
        assert w.stop() == 0, w.log_tail()

    # fresh data dir: everything must come back from the changelog topics
    w = WorkerProc(settings, tmp_path / "d2")
    try:
        produce(settings, batch2[::4] + batch3)
        every = batch1 + batch2 + batch3
        w.wait_state(expected_of(every))
        check_tables(w, expected_of(every))
    finally:
        assert w.stop() == 0, w.log_tail()


@pytest.mark.timeout(420)
def test_sigkill_mid_stream_loses_nothing_and_applies_nothing_twice(
    settings: Settings, tmp_path: Path
) -> None:
    sids = [f"k{i}" for i in range(6)]
    all_events = [e for s in sids for e in make_session(s, 400)]
    # interleave sessions the way a fleet would
    all_events.sort(key=lambda e: (e.seq, e.session_id))
    w = WorkerProc(settings, tmp_path / "d1")
    # one producer, 40 events every 0.25 s from when the worker is up (a new producer
    # per chunk spent ~0.5 s each in its handshake: 24 s for the stream)
    stream = SteadyEventProducer(settings, all_events, chunk=40, pause_s=0.25)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if w.get("/stats")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            assert w.proc.poll() is None, w.log_tail()
            time.sleep(0.1)
        stream.start()
        # kill once the worker has applied part of the stream
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status, body = w.get("/stats")
            except (urllib.error.URLError, ConnectionError, OSError):
                status, body = 0, {}
            # mid-stream AND after a flush: part of the state is committed, part not
            if status == 200 and body["applied"] >= 300 and body["flushes"] >= 1:
                break
            time.sleep(0.1)
        else:
            pytest.fail("worker never applied 300 events and flushed:\n" + w.log_tail())
        assert w.stop(signal.SIGKILL) == -signal.SIGKILL
        assert stream.chunks_sent < len(stream.chunks), "killed after the stream ended"
        stream.hurry()  # the rest while no worker runs, at once
        stream.result(120)
        w = WorkerProc(settings, tmp_path / "d1")
        exp = expected_of(all_events)
        w.wait_state(exp, timeout_s=150)
        check_tables(w, exp)
        stats = w.get("/stats")[1]
        # informational: how many redelivered events the restarted worker ignored
        print(f"after SIGKILL restart: applied={stats['applied']} duplicates={stats['duplicates']}")
    finally:
        stream.hurry()
        assert w.stop() == 0, w.log_tail()
    # and the changelog alone (fresh dir) holds the same state
    w = WorkerProc(settings, tmp_path / "d2")
    try:
        w.wait_state(exp, timeout_s=150)
        check_tables(w, exp)
    finally:
        assert w.stop() == 0, w.log_tail()


@pytest.mark.timeout(180)
def test_worker_ignores_aborted_transactions(settings: Settings, tmp_path: Path) -> None:
    """The router writes <prefix>.events transactionally: aborted writes must not count."""
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    worker = WorkerProc(settings, tmp_path / "data")  # creates the topics
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if worker.get("/stats")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)
        p = Producer(
            {"bootstrap.servers": settings.bootstrap, "transactional.id": f"{settings.prefix}-tx"}
        )
        p.init_transactions(30)
        p.begin_transaction()
        aborted = TraceEvent("tool_call", "x", 1, T0, call_id="c1", tool_name="never")
        p.produce(settings.events_topic, key=b"x", value=serde.encode(aborted))
        p.flush(30)
        p.abort_transaction(30)
        p.begin_transaction()
        committed = TraceEvent("tool_call", "x", 2, T0 + 1, call_id="c2", tool_name="kept")
        p.produce(settings.events_topic, key=b"x", value=serde.encode(committed))
        p.commit_transaction(30)
        worker.wait_state({"x": {"last_seq": 2}})
        state = worker.get("/sessions/x/state")[1]["state"]
        assert state["events"] == 1, state
        assert [r["name"] for r in state["recent"]] == ["kept"]
        assert state["seq_gaps"] == 1
    finally:
        assert worker.stop() == 0, worker.log_tail()


@pytest.mark.timeout(240)
def test_memory_store_rebuilds_from_changelog_on_restart(
    settings: Settings, tmp_path: Path
) -> None:
    """``--store memory`` keeps nothing on disk: every start replays the changelogs."""
    batch1 = [e for s in ("m1", "m2") for e in make_session(s, 25)]
    batch2 = [e for s in ("m1", "m2") for e in make_session(s, 25, start_seq=25)]
    w = WorkerProc(settings, tmp_path / "d", store="memory")
    try:
        produce(settings, batch1)
        w.wait_state(expected_of(batch1))
    finally:
        assert w.stop() == 0, w.log_tail()
    w = WorkerProc(settings, tmp_path / "d", store="memory")
    try:
        produce(settings, batch1[::3] + batch2)
        w.wait_state(expected_of(batch1 + batch2))
        check_tables(w, expected_of(batch1 + batch2))
    finally:
        assert w.stop() == 0, w.log_tail()


@pytest.mark.timeout(420)
def test_partitions_move_between_two_workers_and_back(settings: Settings, tmp_path: Path) -> None:
    """Scale out to two workers, then back to one: state follows the partitions.

    When a partition comes back to the first worker its in-memory caches must not
    be used (they are stale: the second worker advanced those sessions).
    """
    sids = [f"r{i}" for i in range(9)]
    b1 = [e for s in sids for e in make_session(s, 20)]
    b2 = [e for s in sids for e in make_session(s, 20, start_seq=20)]
    b3 = [e for s in sids for e in make_session(s, 20, start_seq=40)]
    a = WorkerProc(settings, tmp_path / "a")
    b: WorkerProc | None = None
    try:
        produce(settings, b1)
        a.wait_state(expected_of(b1))
        b = WorkerProc(settings, tmp_path / "b")
        # wait until the group rebalanced: b owns some partition (serves some session)
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline
            and state_any([b], sids[0]) is None
            and not any(state_any([b], s) is not None for s in sids)
        ):
            time.sleep(0.5)
        assert any(state_any([b], s) is not None for s in sids), b.log_tail()
        produce(settings, b2)
        wait_all([a, b], expected_of(b1 + b2), 150)
        for sid, d in expected_of(b1 + b2).items():
            body = state_any([a, b], sid)
            assert body is not None and body["state"]["events"] == d["events"], (sid, body)
        assert b.stop() == 0, b.log_tail()
        b = None
        produce(settings, b3)
        exp = expected_of(b1 + b2 + b3)
        wait_all([a], exp, 150)
        check_tables(a, exp)
    finally:
        if b is not None:
            b.stop()
        assert a.stop() == 0, a.log_tail()
