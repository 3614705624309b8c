"""Pure parts of the snapshot contract: keys, headers, ids, the stored value and
what a restore brings back (engine-level, no Kafka)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.engine import EngineOutput, SessionEngine
from streams.core.events import Budget, TraceEvent
from streams.core.statecodec import decode_state, encode_state
from streams.errors import InvalidEventError
from streams.snapshots import (
    check_snapshot_id,
    decode_snapshot,
    parse_snapshot_key,
    restore_point,
    snapshot_headers,
    snapshot_key,
    snapshot_value,
    state_summary,
)

T0 = 1_700_000_000_000

session_ids = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True)
snapshot_ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Co", "Cn", "Cf")),
    min_size=1,
    max_size=60,
).filter(str.isprintable)


@given(session_ids, snapshot_ids)
def test_key_round_trip(session_id: str, snapshot_id: str) -> None:
    key = snapshot_key(session_id, snapshot_id)
    assert key == f"{session_id}/{snapshot_id}".encode()
    assert parse_snapshot_key(key) == (session_id, snapshot_id)
    assert parse_snapshot_key(key.decode()) == (session_id, snapshot_id)


def test_key_splits_at_first_slash() -> None:
    assert parse_snapshot_key(b"run-1/a/b") == ("run-1", "a/b")


@pytest.mark.parametrize(
    "key", [b"no-slash", b"/snap", b"run-1/", b"bad id/snap", b"\xff\xfe/x", b"run/\x00"]
)
def test_bad_keys_name_the_key(key: bytes) -> None:
    with pytest.raises(InvalidEventError) as info:
        parse_snapshot_key(key)
    assert info.value.field == "key"


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 201, None, 3])
def test_snapshot_id_validation(bad: Any) -> None:
    with pytest.raises(InvalidEventError) as info:
        check_snapshot_id(bad)
    assert info.value.field == "metadata.snapshot_id"


def test_headers_of_a_snapshot_event() -> None:
    ev = TraceEvent("snapshot", "run-1", 17, T0 + 5, metadata={"snapshot_id": "before-edit"})
    assert snapshot_headers(ev) == [
        ("session_id", b"run-1"),
        ("snapshot_id", b"before-edit"),
        ("seq", b"17"),
        ("timestamp_ms", str(T0 + 5).encode()),
    ]
    with pytest.raises(InvalidEventError):
        snapshot_headers(replace(ev, type="restore"))
    with pytest.raises(InvalidEventError) as info:
        snapshot_headers(replace(ev, metadata={}))
    assert info.value.field == "metadata.snapshot_id"


# ----------------------------------------------------------------- engine level


class Trace:
    """One session's events with increasing seq and timestamps."""

    def __init__(self, sid: str = "s1") -> None:
        self.sid = sid
        self.seq = 0
        self.t = T0
        self.events: list[TraceEvent] = []

    def add(self, type: str, **kw: Any) -> TraceEvent:
        ev = TraceEvent(type=type, session_id=self.sid, seq=self.seq, timestamp_ms=self.t, **kw)  # type: ignore[arg-type]
        self.events.append(ev)
        self.seq += 1
        self.t += 1000
        return ev

    def call(self, tool: str, inp: Any, *, ok: bool = True, err: str | None = None) -> None:
        cid = f"c{self.seq}"
        self.add("tool_call", call_id=cid, tool_name=tool, input=inp)
        self.add(
            "tool_result",
            call_id=cid,
            tool_name=tool,
            is_error=not ok,
            error_message=err,
            output="ok" if ok else "FAILED",
        )

    def failing_loop(self, n: int) -> None:
        for _ in range(n):
            self.add("model_step", input_tokens=1000, output_tokens=200)
            self.call(
                "bash",
                {"command": "pytest tests/test_app.py -x"},
                ok=False,
                err="E   AssertionError: assert 1 == 2",
            )
            self.call("edit_file", {"path": "src/app.py", "content": "x"})

    def healthy(self, n: int) -> None:
        for i in range(n):
            self.add("model_step", input_tokens=300, output_tokens=50)
            self.call("read_file", {"path": f"src/mod{i}.py"})


def run(eng: SessionEngine, events: list[TraceEvent]) -> list[EngineOutput]:
    return [eng.on_event(ev) for ev in events]


def test_stored_value_is_the_engine_restore_point_after_the_event() -> None:
    tr = Trace()
    tr.add("session_start", metadata={"task": "fix login in src/app.py"})
    tr.failing_loop(3)
    eng = SessionEngine.create("s1")
    run(eng, tr.events)
    before = eng.snapshot()
    snap = tr.add("snapshot", metadata={"snapshot_id": "k"})
    assert eng.on_event(snap).applied
    value = snapshot_value(eng.snapshot(), "k")
    point = decode_snapshot(value)
    # after the event: its seq and clock, nothing else changed, no nested store
    assert point.last_seq == snap.seq and point.last_event_ms == snap.timestamp_ms
    assert point.snapshots == ()
    assert encode_state(
        replace(point, last_seq=before.last_seq, last_event_ms=before.last_event_ms)
    ) == encode_state(before)
    assert restore_point(eng.snapshot(), "k") == point
    with pytest.raises(InvalidEventError) as info:
        snapshot_value(eng.snapshot(), "nope")
    assert "known: k" in str(info.value)


def test_restore_brings_back_the_stored_bytes_and_continues_like_the_truncated_run() -> None:
    """Snapshot at event k, diverge (loop + budget), restore, continue: the state
    right after restore is the stored value byte for byte (but for the forward-moving
    seq and clock), and every later output equals the run that never diverged."""
    live = Trace()
    live.add("session_start", metadata={"task": "fix login in src/app.py"})
    live.healthy(4)
    live.failing_loop(1)
    k = len(live.events)
    live.add("snapshot", metadata={"snapshot_id": "k"})
    prefix = list(live.events)
    live.failing_loop(5)  # the branch we go back from
    live.add("budget", budget=Budget(max_tokens=10))
    restore_ev = live.add("restore", metadata={"snapshot_id": "k"})
    cont_start = len(live.events)
    live.failing_loop(4)  # what happens after the restore
    live.healthy(3)
    cont = live.events[cont_start:]

    eng = SessionEngine.create("s1")
    outs_before = run(eng, live.events[: k + 1])
    stored = snapshot_value(eng.snapshot(), "k")
    diverged = run(eng, live.events[k + 1 : cont_start - 1])
    assert any(o.assessment for o in diverged), "the diverging branch must change the assessment"
    assert eng.on_event(restore_ev).applied
    after = eng.snapshot()
    assert after.last_seq == restore_ev.seq
    assert after.last_event_ms == restore_ev.timestamp_ms
    assert (
        encode_state(
            replace(
                after,
                snapshots=(),
                last_seq=decode_state(stored).last_seq,
                last_event_ms=decode_state(stored).last_event_ms,
            )
        )
        == stored
    )
    live_outs = run(eng, cont)

    offline = SessionEngine.create("s1")
    assert run(offline, prefix) == outs_before
    offline_outs = run(offline, cont)
    assert live_outs == offline_outs
    assert any(o.assessment for o in live_outs), "the continuation must produce assessments"
    assert encode_state(eng.snapshot()) == encode_state(offline.snapshot())


def test_restore_of_unknown_id_is_rejected_and_changes_nothing() -> None:
    tr = Trace()
    tr.healthy(2)
    eng = SessionEngine.create("s1")
    run(eng, tr.events)
    before = encode_state(eng.snapshot())
    with pytest.raises(InvalidEventError) as info:
        eng.on_event(tr.add("restore", metadata={"snapshot_id": "never"}))
    assert info.value.field == "metadata.snapshot_id"
    assert encode_state(eng.snapshot()) == before


def test_state_summary_counts() -> None:
    tr = Trace()
    tr.add("session_start", metadata={"task": "fix login in src/app.py"})
    tr.failing_loop(4)
    tr.add("budget", budget=Budget(max_tokens=50_000, max_tool_calls=40))
    eng = SessionEngine.create("s1")
    run(eng, tr.events)
    s = state_summary(eng.snapshot())
    assert s["tool_calls"] == 8
    assert s["window_length"] == 8
    assert s["errors"] == 4
    assert s["budget"]["max_tokens"] == 50_000
    assert s["budget"]["tokens_used"] == 4 * 1200
    assert s["current_assessment"] == (eng.current.render() if eng.current else None)
    assert s["current_assessment"], "four identical failures must have produced an assessment"
