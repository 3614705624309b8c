"""The Faust worker against a real broker: exactly-once tables, restarts, SIGKILL.

Each test runs ``python -m streams.commands.worker`` as a subprocess (the way it
is deployed), produces Avro events straight into ``<prefix>.events`` with the
serde, and reads table state through the worker's HTTP view
(``GET /sessions/{id}/state`` and ``/minutes``).  Why the HTTP view and not the
changelog topic: it shows what the worker's *tables* hold after recovery, which
is what restarts must preserve; the fresh-data-dir restart then proves the
changelog alone carries the state.

Expected values are computed here from the produced events, independently of
``streams.app.state``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streams.core.events import Budget, TraceEvent
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProc:
    """One ``trajectory worker`` subprocess and its HTTP view."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        store: str = "rocksdb",
        extra: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        from streams.app.topics import ensure_topics

        # Create <prefix>.events (settings.events_partitions) before anything produces:
        # on a broker with auto-creation a first produce would make a 1-partition topic.
        assert ensure_topics(settings) == settings.events_partitions
        self.port = port or free_port()
        self.log_path = data_dir.parent / f"worker-{self.port}.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streams.commands.worker",
                "--bootstrap",
                settings.bootstrap,
                "--prefix",
                settings.prefix,
                "--store",
                store,
                "--data-dir",
                str(data_dir),
                "--web-port",
                str(self.port),
                "--loglevel",
                "info",
                *extra,
            ],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-4000:].decode("utf-8", "replace")

    def wait_state(self, expected: dict[str, dict[str, Any]], timeout_s: float = 90.0) -> None:
        """Poll until every session's state has ``last_seq`` as expected (or fail)."""
        deadline = time.monotonic() + timeout_s
        pending = dict(expected)
        while pending and time.monotonic() < deadline:
            assert self.proc.poll() is None, f"worker exited:\n{self.log_tail()}"
            for sid in list(pending):
                try:
                    status, body = self.get(f"/sessions/{sid}/state")
                except (urllib.error.URLError, ConnectionError, OSError):
                    break
                if status == 200 and body["state"]["last_seq"] >= pending[sid]["last_seq"]:
                    del pending[sid]
            time.sleep(0.3)
        assert not pending, f"sessions not caught up: {sorted(pending)}\n{self.log_tail()}"

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code


def make_session(sid: str, n: int, start_seq: int = 0, seed: int = 0) -> list[TraceEvent]:
    """``n`` events: budget, then tool call/result pairs (some failing) and model steps."""
    rng = random.Random(f"{sid}:{seed}")
    out: list[TraceEvent] = []
    for seq in range(start_seq, start_seq + n):
        ts = T0 + seq * 7_000  # ~8.5 events per event-time minute
        kind = seq % 4
        if seq == 0:
            ev = TraceEvent(
                "budget", sid, seq, ts, budget=Budget(max_tokens=100_000, tokens_used=100)
            )
        elif kind == 1:
            ev = TraceEvent(
                "tool_call",
                sid,
                seq,
                ts,
                call_id=f"c{seq}",
                tool_name="read_file",
                input={"path": f"src/m{seq % 5}.py"},
            )
        elif kind == 2:
            failed = rng.random() < 0.3
            ev = TraceEvent(
                "tool_result",
                sid,
                seq,
                ts,
                call_id=f"c{seq - 1}",
                tool_name="read_file",
                output="x" * 10,
                is_error=failed,
                error_message="ENOENT" if failed else None,
            )
        else:
            ev = TraceEvent(
                "model_step",
                sid,
                seq,
                ts,
                text="thinking",
                input_tokens=rng.randint(10, 500),
                output_tokens=rng.randint(1, 90),
            )
        out.append(ev)
    return out


def expected_of(events: list[TraceEvent]) -> dict[str, dict[str, Any]]:
    """Counts per session computed from unique (session, seq) events."""
    unique = {(e.session_id, e.seq): e for e in events}
    exp: dict[str, dict[str, Any]] = {}
    for (sid, _), e in sorted(unique.items()):
        d = exp.setdefault(
            sid,
            {
                "events": 0,
                "tool_calls": 0,
                "errors": 0,
                "tokens": 0,
                "last_seq": -1,
                "budget_tokens": 0,
                "minutes": Counter(),
                "minute_errors": Counter(),
            },
        )
        d["events"] += 1
        d["last_seq"] = max(d["last_seq"], e.seq)
        minute = e.timestamp_ms - e.timestamp_ms % 60_000
        if e.type == "tool_call":
            d["tool_calls"] += 1
            d["minutes"][minute] += 1
        if e.is_error:
            d["errors"] += 1
            d["minute_errors"][minute] += 1
        d["tokens"] += e.total_tokens
        if e.type == "budget" and e.budget is not None:
            d["budget_tokens"] = e.budget.tokens_used or 0
        elif e.type == "model_step":
            d["budget_tokens"] += e.total_tokens
    return exp


def produce(
    settings: Settings, events: list[TraceEvent], extra: list[tuple[bytes, bytes]] = ()
) -> None:  # type: ignore[assignment]
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    # murmur2 like the router and Faust: the HTTP views route a session id to the
    # worker owning its murmur2 partition (confluent's default would be CRC32)
    p = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    for ev in events:
        p.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))
    for key, value in extra:
        p.produce(settings.events_topic, key=key, value=value)
    assert p.flush(30) == 0


def check_tables(worker: WorkerProc, exp: dict[str, dict[str, Any]]) -> None:
    for sid, d in exp.items():
        status, body = worker.get(f"/sessions/{sid}/state")
        assert status == 200, body
        st = body["state"]
        diag = {k: st[k] for k in ("events", "last_seq", "seq_gaps", "tool_calls")}
        diag["recent_seqs"] = [r.get("seq") for r in st["recent"]]
        assert st["events"] == d["events"], (sid, diag, d, worker.log_path)
        assert st["tool_calls"] == d["tool_calls"], sid
        assert st["errors"] == d["errors"], sid
        assert st["input_tokens"] + st["output_tokens"] == d["tokens"], sid
        assert st["last_seq"] == d["last_seq"], sid
        assert st["seq_gaps"] == 0, sid
        assert body["budget"]["max_tokens"] == 100_000
        assert body["budget"]["tokens_used"] == d["budget_tokens"], (sid, body["budget"])
        status, mbody = worker.get(f"/sessions/{sid}/minutes")
        assert status == 200, mbody
        got_calls = {
            r["minute_start_ms"]: r["tool_calls"] for r in mbody["minutes"] if r["tool_calls"]
        }
        got_errors = {r["minute_start_ms"]: r["errors"] for r in mbody["minutes"]}
        assert got_calls == {m: c for m, c in d["minutes"].items() if c}, sid
        assert {m: e for m, e in got_errors.items() if e} == dict(d["minute_errors"]), sid


def read_dlq(settings: Settings, want: int = 1, timeout_s: float = 20.0) -> list[Any]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": settings.bootstrap,
            "group.id": f"{settings.prefix}-dlqr",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([settings.dlq_topic])
    out = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(out) < want:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg)
    c.close()
    return out


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
    stop_producing = threading.Event()

    def producer() -> None:
        for i in range(0, len(all_events), 60):
            if stop_producing.is_set():
                return
            produce(settings, all_events[i : i + 60])
            time.sleep(0.1)

    t = threading.Thread(target=producer)
    try:
        t.start()
        # kill once the worker has applied part of the stream
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status, body = w.get("/stats")
            except (urllib.error.URLError, ConnectionError, OSError):
                status, body = 0, {}
            if status == 200 and body["applied"] >= 300:
                break
            time.sleep(0.1)
        else:
            pytest.fail("worker never applied 300 events:\n" + w.log_tail())
        assert w.stop(signal.SIGKILL) == -signal.SIGKILL
        t.join(120)
        w = WorkerProc(settings, tmp_path / "d1")
        exp = expected_of(all_events)
        w.wait_state(exp, timeout_s=150)
        check_tables(w, exp)
        stats = w.get("/stats")[1]
        # informational: how many redelivered events the restarted worker ignored
        print(f"after SIGKILL restart: applied={stats['applied']} duplicates={stats['duplicates']}")
    finally:
        stop_producing.set()
        t.join(10)
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


def _state_any(workers: list[WorkerProc], sid: str) -> dict[str, Any] | None:
    """The state of ``sid`` from whichever worker owns its partition."""
    for w in workers:
        try:
            status, body = w.get(f"/sessions/{sid}/state")
        except (urllib.error.URLError, ConnectionError, OSError):
            continue
        if status == 200:
            return body  # type: ignore[no-any-return]
    return None


def _wait_all(workers: list[WorkerProc], exp: dict[str, dict[str, Any]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(exp)
    while pending and time.monotonic() < deadline:
        for sid in list(pending):
            body = _state_any(workers, sid)
            if body is not None and body["state"]["last_seq"] >= exp[sid]["last_seq"]:
                pending.discard(sid)
        time.sleep(0.3)
    assert not pending, f"not caught up: {sorted(pending)}\n" + workers[-1].log_tail()


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
            and _state_any([b], sids[0]) is None
            and not any(_state_any([b], s) is not None for s in sids)
        ):
            time.sleep(0.5)
        assert any(_state_any([b], s) is not None for s in sids), b.log_tail()
        produce(settings, b2)
        _wait_all([a, b], expected_of(b1 + b2), 150)
        for sid, d in expected_of(b1 + b2).items():
            body = _state_any([a, b], sid)
            assert body is not None and body["state"]["events"] == d["events"], (sid, body)
        assert b.stop() == 0, b.log_tail()
        b = None
        produce(settings, b3)
        exp = expected_of(b1 + b2 + b3)
        _wait_all([a], exp, 150)
        check_tables(a, exp)
    finally:
        if b is not None:
            b.stop()
        assert a.stop() == 0, a.log_tail()
