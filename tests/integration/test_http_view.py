"""The worker's HTTP view against a real broker: one worker, then two workers.

What must hold:

* ``/sessions/{id}/assessment`` serves exactly the bytes ``trajectory analyze``
  renders offline for the same events (same core), as ``text/markdown``; JSON
  on ``Accept: application/json`` with severity / call_index / seq / trigger;
* 404 says *which* (unknown session vs no assessment yet), 400 for malformed ids
  and bad query parameters;
* ``/sessions`` filters by ``min_severity`` and ``glob``;
* ``/metrics`` counts what the worker processed;
* with two workers on different ports, a request to either one for any session
  is answered by the partition owner (forwarded when needed).

Events are produced keyed by session id with librdkafka's ``murmur2_random``
partitioner -- what the router uses -- so they land where Faust's routing looks.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from procs import WorkerProc

from streams.core.events import TraceEvent
from streams.settings import Settings

T0 = 1_767_225_600_000


class Worker(WorkerProc):
    """The shared worker launcher (memory store), asking for JSON by default."""

    def __init__(self, settings: Settings, data_dir: Path, extra: tuple[str, ...] = ()) -> None:
        super().__init__(settings, data_dir, store="memory", extra=extra)

    def raw(self, path: str, accept: str | None = None) -> tuple[int, str, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read()

    def get(self, path: str) -> tuple[int, Any]:
        status, _, body = self.raw(path, accept="application/json")
        return status, json.loads(body or b"null")


def looping(sid: str, n: int = 12) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    seq = 0
    for i in range(n):
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                seq,
                T0 + seq * 1000,
                call_id=f"c{i}",
                tool_name="bash",
                input={"cmd": "pytest tests/test_x.py"},
            )
        )
        seq += 1
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                seq,
                T0 + seq * 1000,
                call_id=f"c{i}",
                tool_name="bash",
                output="FAILED test_x - AssertionError",
                is_error=True,
                error_message="exit 1",
            )
        )
        seq += 1
    return out


def healthy(sid: str, n: int = 3) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    seq = 0
    for i in range(n):
        out.append(
            TraceEvent(
                "tool_call",
                sid,
                seq,
                T0 + seq * 1000,
                call_id=f"c{i}",
                tool_name="read_file",
                input={"path": f"src/f{i}.py"},
            )
        )
        seq += 1
        out.append(
            TraceEvent(
                "tool_result",
                sid,
                seq,
                T0 + seq * 1000,
                call_id=f"c{i}",
                tool_name="read_file",
                output=f"content {i}",
            )
        )
        seq += 1
    return out


def produce(settings: Settings, events: list[TraceEvent]) -> None:
    from confluent_kafka import Producer

    from streams.serde import EventSerde

    serde = EventSerde()
    p = Producer(
        {
            "bootstrap.servers": settings.bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",  # as the router: where Faust looks for keys
        }
    )
    for ev in events:
        p.produce(settings.events_topic, key=ev.session_id.encode(), value=serde.encode(ev))
    assert p.flush(30) == 0


def offline(events: list[TraceEvent]) -> Any:
    from streams.importers.offline import OfflineAnalyzer

    analyzer = OfflineAnalyzer()
    for ev in events:
        analyzer.feed(ev)
    return analyzer


def wait_caught_up(workers: list[Worker], last_seq: dict[str, int], timeout_s: float = 90) -> None:
    """Until every session's state (asked of the first worker) shows its last seq."""
    deadline = time.monotonic() + timeout_s
    pending = dict(last_seq)
    while pending and time.monotonic() < deadline:
        for w in workers:
            assert w.proc.poll() is None, f"worker exited:\n{w.log_tail()}"
        for sid in list(pending):
            try:
                status, body = workers[0].get(f"/sessions/{sid}/state")
            except (urllib.error.URLError, ConnectionError, OSError):
                break
            if status == 200 and body["state"]["last_seq"] >= pending[sid]:
                del pending[sid]
        time.sleep(0.3)
    assert not pending, f"not caught up: {sorted(pending)}\n{workers[0].log_tail()}"


def metric(text: str, name: str, labels: str = "") -> float:
    """The value of one sample line ``name{labels} value`` (0 when absent)."""
    pat = re.compile(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", re.M)
    m = pat.search(text)
    return float(m.group(1)) if m else 0.0


@pytest.mark.timeout(240)
def test_views_of_one_worker(settings: Settings, tmp_path: Path) -> None:
    from streams.topics import ensure_worker_topics

    assert ensure_worker_topics(settings) == settings.events_partitions
    loop_ev = looping("ci-loop-1")
    ok_ev = healthy("ci-ok-1")
    other_ev = healthy("other-1")
    events = loop_ev + ok_ev + other_ev
    expected = offline(events)
    want = expected.final("ci-loop-1")
    assert want is not None and want.assessments and want.severity == "warning"
    assert expected.final("ci-ok-1") is None or not expected.final("ci-ok-1").assessments

    w = Worker(settings, tmp_path / "w")
    try:
        produce(settings, events)
        wait_caught_up([w], {"ci-loop-1": loop_ev[-1].seq, "ci-ok-1": ok_ev[-1].seq})

        # markdown, byte-identical to the offline rendering
        status, ctype, body = w.raw("/sessions/ci-loop-1/assessment")
        assert status == 200, body
        assert ctype.startswith("text/markdown")
        assert body == want.render().encode("utf-8")

        status, ctype, body = w.raw("/sessions/ci-loop-1/assessment", accept="application/json")
        assert status == 200 and ctype.startswith("application/json")
        doc = json.loads(body)
        assert (doc["severity"], doc["call_index"], doc["seq"], doc["trigger"]) == (
            want.severity,
            want.call_index,
            want.seq,
            want.trigger,
        )
        assert doc["rendered"] == want.render()

        # 404: known session without assessment vs unknown session, in both formats
        status, body = w.get("/sessions/ci-ok-1/assessment")
        assert status == 404 and body["error"] == "no assessment yet", body
        status, body = w.get("/sessions/nobody-here/assessment")
        assert status == 404 and body["error"] == "unknown session", body
        status, ctype, raw = w.raw("/sessions/nobody-here/assessment")
        assert status == 404 and ctype.startswith("text/markdown")
        assert raw.startswith(b"# 404: unknown session")
        # 400: malformed id (a space), bad parameter
        status, body = w.get("/sessions/bad%20id/assessment")
        assert status == 400 and body["error"] == "malformed session id", body
        status, body = w.get("/sessions/bad%20id/state")
        assert status == 400, body
        status, body = w.get("/sessions?min_severity=loud")
        assert status == 400 and body["parameter"] == "min_severity", body

        # the list and its filters
        status, body = w.get("/sessions")
        assert status == 200
        rows = {r["session_id"]: r for r in body["sessions"]}
        assert set(rows) == {"ci-loop-1", "ci-ok-1", "other-1"}
        assert rows["ci-loop-1"]["severity"] == "warning"
        assert rows["ci-loop-1"]["call_index"] == want.call_index
        assert rows["ci-loop-1"]["last_seq"] == loop_ev[-1].seq
        assert rows["ci-loop-1"]["last_event_ms"] == loop_ev[-1].timestamp_ms
        assert rows["ci-ok-1"]["severity"] is None
        _, body = w.get("/sessions?min_severity=caution")
        assert [r["session_id"] for r in body["sessions"]] == ["ci-loop-1"]
        _, body = w.get("/sessions?glob=ci-*")
        assert [r["session_id"] for r in body["sessions"]] == ["ci-loop-1", "ci-ok-1"]
        _, body = w.get("/sessions?glob=other-*&min_severity=info")
        assert body["sessions"] == []

        # state view still there, with the engine's assessment
        status, body = w.get("/sessions/ci-loop-1/state")
        assert status == 200 and body["engine"]["assessment"]["rendered"] == want.render()

        # /metrics counts what was processed
        status, ctype, raw = w.raw("/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        text = raw.decode()
        n_calls = sum(e.type == "tool_call" for e in events)
        n_results = sum(e.type == "tool_result" for e in events)
        assert metric(text, "trajectory_worker_events_total", '{type="tool_call"}') == n_calls
        assert metric(text, "trajectory_worker_events_total", '{type="tool_result"}') == n_results
        assert metric(text, "trajectory_worker_event_processing_seconds_count") == len(events)
        assert metric(text, "trajectory_worker_event_time_lag_seconds_count") == len(events)
        n_assess = _assessments_published(events)
        got = sum(
            metric(text, "trajectory_worker_assessments_total", f'{{severity="{s}"}}')
            for s in ("info", "caution", "warning")
        )
        assert got == n_assess and n_assess > 0
        assert metric(text, "trajectory_worker_detections_total", '{pattern_type="doom_loop"}') >= 1
        assert "trajectory_worker_consumer_lag_messages" in text
    finally:
        assert w.stop() == 0, w.log_tail()


def _assessments_published(events: list[TraceEvent]) -> int:
    """How many assessments the core produces (the worker publishes and counts each)."""
    from streams.core.engine import SessionEngine

    engines: dict[str, SessionEngine] = {}
    n = 0
    for ev in events:
        eng = engines.setdefault(ev.session_id, SessionEngine.create(ev.session_id))
        out = eng.on_event(ev)
        n += out.assessment is not None and bool(out.assessment.assessments)
    return n


@pytest.mark.timeout(240)
def test_the_views_show_an_engine_that_waits_for_its_flush(
    settings: Settings, tmp_path: Path
) -> None:
    """Engines wait for their flush (``--engine-flush-interval``; docs/guarantees.md
    "Engines wait for their flush"): the assessment, the list and the state view show
    the worker's in-memory values, not the older tables."""
    import dataclasses

    from streams.core.statecodec import decode_state
    from streams.replay.state import read_changelogs
    from streams.worker.state import SessionCounters

    sid = "wait-1"
    head, tail = healthy(sid, n=2), looping(sid, n=8)
    tail = [
        dataclasses.replace(e, seq=e.seq + len(head), timestamp_ms=e.timestamp_ms + 60_000)
        for e in tail
    ]
    events = head + tail
    want = offline(events).final(sid)
    assert want is not None and want.assessments and want.severity == "warning"
    assert offline(head).final(sid) is None or not offline(head).final(sid).assessments
    w = Worker(settings, tmp_path / "w", extra=("--engine-flush-interval", "600"))
    try:
        produce(settings, head)
        wait_caught_up([w], {sid: head[-1].seq})
        time.sleep(2.5)  # the new engine's own flush (due at once) is behind us
        produce(settings, tail)
        wait_caught_up([w], {sid: tail[-1].seq})
        # the premise: the engines changelog is still behind the counters
        tables, missing = read_changelogs(settings.bootstrap, settings.prefix, session_ids=[sid])
        assert not missing and sid.encode() in tables["engines"], missing
        stored = decode_state(tables["engines"][sid.encode()])
        assert stored.last_seq < tail[-1].seq, "the engine did not wait: nothing tested"
        counters = SessionCounters.decode(tables["sessions"][sid.encode()])
        assert counters.last_seq < tail[-1].seq, "the counters did not wait: nothing tested"
        _, stats = w.get("/stats")
        assert stats["engines_waiting"] >= 1 and stats["offsets_held"] >= 1, stats

        status, _, body = w.raw(f"/sessions/{sid}/assessment")
        assert status == 200 and body == want.render().encode("utf-8"), body
        _, rows = w.get("/sessions")
        (row,) = [r for r in rows["sessions"] if r["session_id"] == sid]
        assert (row["severity"], row["assessment_seq"]) == (want.severity, want.seq), row
        status, state = w.get(f"/sessions/{sid}/state")
        assert status == 200 and state["engine"]["last_seq"] == tail[-1].seq, state
        assert (state["state"]["last_seq"], state["state"]["events"]) == (
            tail[-1].seq,
            len(events),
        )
        assert row["last_seq"] == tail[-1].seq and row["events"] == len(events), row
        status, mins = w.get(f"/sessions/{sid}/minutes")
        calls = sum(m["tool_calls"] for m in mins["minutes"])
        assert status == 200 and calls == sum(e.type == "tool_call" for e in events), mins
        assert state["engine"]["assessment"]["rendered"] == want.render()
    finally:
        assert w.stop() == 0, w.log_tail()
    # a clean stop flushes the waiting engine
    tables, _ = read_changelogs(settings.bootstrap, settings.prefix, session_ids=[sid])
    assert decode_state(tables["engines"][sid.encode()]).last_seq == tail[-1].seq


@pytest.mark.timeout(360)
def test_two_workers_forward_to_the_partition_owner(settings: Settings, tmp_path: Path) -> None:
    from streams.topics import ensure_worker_topics

    assert ensure_worker_topics(settings) == settings.events_partitions == 3
    sids = [f"fw-{i}" for i in range(12)]
    events = [e for s in sids for e in looping(s, n=4)]
    expected = offline(events)
    a = Worker(settings, tmp_path / "a")
    b: Worker | None = None
    try:
        produce(settings, events)
        wait_caught_up([a], {s: 7 for s in sids})
        b = Worker(settings, tmp_path / "b")
        # wait until the group rebalanced and both serve a share of the sessions
        deadline = time.monotonic() + 120
        local: dict[str, set[str]] = {}
        while time.monotonic() < deadline:
            assert b.proc.poll() is None, b.log_tail()
            try:
                local = {
                    "a": {r["session_id"] for r in a.get("/sessions")[1]["sessions"]},
                    "b": {r["session_id"] for r in b.get("/sessions")[1]["sessions"]},
                }
            except (urllib.error.URLError, ConnectionError, OSError, TypeError):
                time.sleep(0.5)
                continue
            if local["a"] and local["b"] and local["a"] | local["b"] == set(sids):
                break
            time.sleep(0.5)
        assert local["a"] and local["b"], (local, b.log_tail())
        assert not local["a"] & local["b"]
        time.sleep(2)  # both have the same assignment (same generation) by now
        for sid in sids:
            want = expected.final(sid).render().encode()
            for w in (a, b):
                status, ctype, body = w.raw(f"/sessions/{sid}/assessment")
                assert status == 200, (sid, w.port, body)
                assert body == want, (sid, w.port)
                assert ctype.startswith("text/markdown")
                status, jbody = w.get(f"/sessions/{sid}/state")
                assert status == 200 and jbody["state"]["last_seq"] == 7, (sid, jbody)
        # unknown sessions: 404 from whichever owner, asked through either worker
        for w in (a, b):
            status, body = w.get("/sessions/no-such-session/assessment")
            assert status == 404 and body["error"] == "unknown session"
    finally:
        if b is not None:
            assert b.stop() == 0, b.log_tail()
        assert a.stop() == 0, a.log_tail()
