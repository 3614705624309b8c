"""Pure parts of the worker: table values and the exactly-once processor (dict tables)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import Budget, TraceEvent
from streams.errors import InvalidEventError, StateDecodeError
from streams.worker.processor import EventProcessor
from streams.worker.state import (
    RECENT_LIMIT,
    BudgetState,
    MinuteCounts,
    SessionCounters,
    minute_key,
)

T0 = 1_767_225_600_000


def ev(seq: int, type_: str = "tool_call", ts: int | None = None, **kw: object) -> TraceEvent:
    return TraceEvent(type_, "s1", seq, T0 + seq * 1000 if ts is None else ts, **kw)  # type: ignore[arg-type]


def tables() -> tuple[dict[bytes, bytes], dict[bytes, bytes], dict[bytes, bytes], EventProcessor]:
    s: dict[bytes, bytes] = {}
    b: dict[bytes, bytes] = {}
    m: dict[bytes, bytes] = {}
    return s, b, m, EventProcessor(s, b, m)


def test_counters_count_and_skip_old_seq() -> None:
    c = SessionCounters("s1")
    c1 = c.apply(ev(0, "tool_call", call_id="a", tool_name="read"))
    assert c1 is not None and c1.events == 1 and c1.tool_calls == 1 and c1.last_seq == 0
    c2 = c1.apply(ev(1, "tool_result", call_id="a", is_error=True, error_message="boom"))
    assert c2 is not None and c2.errors == 1 and c2.tool_results == 1
    assert c2.apply(ev(1, "tool_call")) is None
    assert c2.apply(ev(0, "tool_call")) is None
    c3 = c2.apply(ev(5, "model_step", input_tokens=7, output_tokens=3))
    assert c3 is not None and c3.seq_gaps == 1 and c3.input_tokens == 7 and c3.output_tokens == 3
    assert c3.first_event_ms == T0 and c3.last_event_ms == T0 + 5000


def test_recent_window_is_bounded() -> None:
    c: SessionCounters | None = SessionCounters("s1")
    for i in range(RECENT_LIMIT + 7):
        assert c is not None
        c = c.apply(ev(i))
    assert c is not None
    assert len(c.recent) == RECENT_LIMIT
    assert c.recent[0]["seq"] == 7 and c.recent[-1]["seq"] == RECENT_LIMIT + 6


def test_counters_reuse_the_checked_json_and_equal_a_fresh_apply() -> None:
    """The processor hands ``check_storable``'s JSON to ``SessionCounters.apply`` (one
    ``event_to_json`` per event): the value, and its bytes, are what apply makes alone."""
    from streams.core.jsonl import event_to_json
    from streams.worker.processor import check_storable

    c = SessionCounters("s1", patterns_fired={"doom_loop": 2})
    for i, e in enumerate(
        [
            ev(0, "tool_call", call_id="a", tool_name="read", input={"p": "x"}),
            ev(1, "tool_result", call_id="a", is_error=True, error_message="boom"),
            ev(3, "error", error_message="bad", metadata={"k": "v"}),
            ev(4, "session_end", ts=T0 - 5),
        ]
    ):
        checked = check_storable(e)
        assert checked == event_to_json(e)
        alone, reused = c.apply(e), c.apply(e, checked)
        assert alone is not None and reused == alone and reused.encode() == alone.encode(), i
        c = reused
    assert c.ended and c.first_event_ms == T0 - 5 and c.patterns_fired == {"doom_loop": 2}


def test_encode_is_canonical_and_round_trips() -> None:
    c = SessionCounters("s1").apply(ev(0, "tool_call", input={"b": 1, "a": [1, 2]}))
    assert c is not None
    data = c.encode()
    assert SessionCounters.decode(data) == c
    assert SessionCounters.decode(data).encode() == data
    b = BudgetState("s1").apply(ev(0, "budget", budget=Budget(max_tokens=10)))
    assert b is not None and BudgetState.decode(b.encode()) == b
    m = MinuteCounts("s1", T0).apply(ev(0))
    assert m is not None and MinuteCounts.decode(m.encode()) == m


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xff", "not canonical JSON"),
        (b"[]", "expected a JSON object"),
        (b'{"v":99,"session_id":"s"}', "unknown state version"),
        (b'{"v":1,"session_id":"s","nope":1}', "fields do not match"),
    ],
)
def test_decode_errors_name_the_problem(data: bytes, fragment: str) -> None:
    with pytest.raises(StateDecodeError, match=fragment):
        SessionCounters.decode(data)


def test_budget_tokens_used_accumulates_after_report() -> None:
    b = BudgetState("s1")
    b1 = b.apply(ev(0, "model_step", input_tokens=50, output_tokens=50))
    assert b1 is not None and b1.tokens_used == 100 and b1.max_tokens is None
    b2 = b1.apply(ev(1, "budget", budget=Budget(max_tokens=1000, tokens_used=400)))
    assert b2 is not None and b2.tokens_used == 400 and b2.max_tokens == 1000
    b3 = b2.apply(ev(2, "model_step", input_tokens=10, output_tokens=5))
    assert b3 is not None and b3.tokens_used == 415
    b4 = b3.apply(ev(3, "budget", budget=Budget(max_tokens=2000)))  # no report: keep counting
    assert b4 is not None and b4.tokens_used == 415 and b4.max_tokens == 2000
    assert b4.apply(ev(2, "model_step", input_tokens=10)) is None
    assert b4.apply(ev(9, "tool_call")) is None


def test_processor_applies_once_and_writes_all_tables() -> None:
    s, b, m, p = tables()
    events = [
        ev(0, "budget", budget=Budget(max_tokens=500, tokens_used=0)),
        ev(1, "tool_call", call_id="c1", tool_name="run"),
        ev(2, "tool_result", call_id="c1", is_error=True, error_message="x"),
        ev(3, "model_step", input_tokens=20, output_tokens=5),
        ev(70, "tool_call", call_id="c2", tool_name="run"),  # next minute
    ]
    for e in events + events[1:3]:
        p.apply(e)
    assert p.applied == 5 and p.duplicates == 2
    assert (s, b, m) == ({}, {}, {})  # write-behind: nothing is written before a flush
    assert p.flush() == 4  # session, budget, two minutes: each once
    state = SessionCounters.decode(s[b"s1"])
    assert (state.events, state.tool_calls, state.errors, state.last_seq) == (5, 2, 1, 70)
    assert BudgetState.decode(b[b"s1"]).tokens_used == 25
    first = MinuteCounts.decode(m[minute_key("s1", T0).encode()])
    second = MinuteCounts.decode(m[minute_key("s1", T0 + 70_000).encode()])
    assert (first.tool_calls, first.errors) == (1, 1)
    assert (second.tool_calls, second.errors) == (1, 0)


def test_processor_reads_table_after_cache_drop() -> None:
    s, _b, _m, p = tables()
    p.apply(ev(0))
    with pytest.raises(RuntimeError, match="unflushed"):
        p.drop_caches()
    p.flush()
    # another owner advanced the table (e.g. recovered from the changelog after a rebalance)
    newer = SessionCounters.decode(s[b"s1"]).apply(ev(1))
    assert newer is not None
    s[b"s1"] = newer.encode()
    p.drop_caches()
    assert p.apply(ev(1)).applied is False
    assert p.apply(ev(2)).session.events == 3


def test_redelivery_rewrites_current_value() -> None:
    class Recording(dict[bytes, bytes]):
        writes = 0

        def __setitem__(self, key: bytes, value: bytes) -> None:
            Recording.writes += 1
            super().__setitem__(key, value)

    s = Recording()
    p = EventProcessor(s, {}, {})
    p.apply(ev(0))
    p.flush()
    before = s[b"s1"]
    assert p.flush() == 0  # nothing dirty: nothing written
    p.apply(ev(0))  # a redelivery marks the value dirty again
    p.flush()
    assert Recording.writes == 2 and s[b"s1"] == before


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=80))
def test_any_redelivery_pattern_equals_unique_application(seqs: list[int]) -> None:
    """Feed seqs with repeats (monotone redelivery prefix pattern) -> same as unique ones."""
    delivered = sorted(seqs)  # per-partition order: a replay never goes backwards past commits
    s, _b, _m, p = tables()
    for q in delivered:
        p.apply(ev(q, "tool_call" if q % 2 else "model_step", input_tokens=q))
        if q % 3 == 0:
            p.flush()
    p.flush()
    unique = sorted(set(seqs))
    state = SessionCounters.decode(s[b"s1"])
    assert state.events == len(unique)
    assert state.tool_calls == sum(1 for q in unique if q % 2)
    assert state.input_tokens == sum(unique)  # every event carried input_tokens=seq
    assert p.duplicates == len(delivered) - len(unique)


def _looping_events(n: int) -> list[TraceEvent]:
    out: list[TraceEvent] = []
    for i in range(n):
        q = 2 * i
        out.append(
            ev(q, "tool_call", call_id=f"c{i}", tool_name="run_tests", input={"cmd": "pytest"})
        )
        out.append(
            ev(
                q + 1,
                "tool_result",
                call_id=f"c{i}",
                tool_name="run_tests",
                is_error=True,
                error_message="AssertionError: assert 404 == 200",
            )
        )
    return out


def test_engine_table_counts_fired_patterns_once() -> None:
    s: dict[bytes, bytes] = {}
    e: dict[bytes, bytes] = {}
    p = EventProcessor(s, {}, {}, e)
    events = _looping_events(8)
    for x in events + events[:6]:
        p.apply(x)
    p.flush()
    state = SessionCounters.decode(s[b"s1"])
    assert state.events == 16 and p.duplicates == 6
    assert state.patterns_fired.get("doom_loop", 0) >= 1
    assert b"s1" in e
    # a fresh processor over the same tables resumes the engine from its stored state
    before = dict(state.patterns_fired)
    p2 = EventProcessor(s, {}, {}, e)
    assert p2.apply(events[-1]).applied is False
    out = p2.apply(
        ev(16, "tool_call", call_id="c9", tool_name="run_tests", input={"cmd": "pytest"})
    )
    assert out.applied and out.engine is not None and out.engine.applied
    p2.flush()
    assert SessionCounters.decode(s[b"s1"]).events == 17
    assert SessionCounters.decode(s[b"s1"]).patterns_fired.keys() >= before.keys()


def test_engine_rejection_changes_no_table() -> None:
    s: dict[bytes, bytes] = {}
    b: dict[bytes, bytes] = {}
    e: dict[bytes, bytes] = {}
    p = EventProcessor(s, b, {}, e)
    p.apply(ev(0, "tool_call", call_id="a", tool_name="read"))
    p.flush()
    snapshot = (dict(s), dict(b), dict(e))
    with pytest.raises(InvalidEventError, match="budget"):
        p.apply(ev(1, "budget"))  # a budget event without a budget
    assert p.dirty == 0
    p.flush()
    assert (s, b, e) == snapshot
    assert p.apply(ev(1, "tool_call", call_id="b", tool_name="read")).applied


def test_collect_encodes_each_dirty_value_once_as_of_the_call() -> None:
    _s, _b, _m, p = tables()
    for q in range(5):
        p.apply(ev(q, "tool_call", call_id=f"c{q}", tool_name="run"), partition=2)
    writes = p.collect()
    assert sorted(w.table for w in writes) == ["minutes", "sessions"]
    assert all(w.partition == 2 for w in writes)
    assert p.dirty == 0 and p.collect() == []
    p.apply(ev(5, "tool_call", call_id="c5", tool_name="run"))  # after the collect
    first = {w.table: w.value for w in writes}
    assert SessionCounters.decode(first["sessions"]).last_seq == 4  # not 5: taken at the call
    assert p.dirty == 2


def test_older_minute_values_survive_until_the_flush() -> None:
    _s, _b, m, p = tables()
    p.apply(ev(0, "tool_call", ts=T0, call_id="a", tool_name="run"))
    p.apply(ev(1, "tool_call", ts=T0 + 61_000, call_id="b", tool_name="run"))  # next minute
    p.apply(ev(2, "tool_call", ts=T0 + 1_000, call_id="c", tool_name="run"))  # back to the first
    p.flush()
    assert MinuteCounts.decode(m[minute_key("s1", T0).encode()]).tool_calls == 2
    assert MinuteCounts.decode(m[minute_key("s1", T0 + 61_000).encode()]).tool_calls == 1


def test_timer_assesses_a_quiet_session_once_past_its_deadline() -> None:
    s: dict[bytes, bytes] = {}
    e: dict[bytes, bytes] = {}
    p = EventProcessor(s, {}, {}, e)
    p.apply(ev(0, "session_start", agent_id="ag"))
    p.apply(ev(1, "budget", budget=Budget(deadline_ms=T0 + 10_000, max_tokens=1000)))
    p.apply(ev(2, "tool_call", call_id="a", tool_name="read"))
    p.flush()
    assert p.on_timer(T0 + 5_000) == []  # before the deadline: nothing, nothing dirty
    assert p.dirty == 0
    made = p.on_timer(T0 + 11_000)
    assert len(made) == 1 and made[0].assessment.trigger == "timer"
    assert made[0].lineage.agent_id == "ag"
    assert p.dirty == 1  # the engine state changed: flushed with the next commit
    assert p.on_timer(T0 + 12_000) == []  # a deadline is reported once
    p.flush()
    # a processor restarted from the tables does not report it again
    p2 = EventProcessor(s, {}, {}, e)
    p2.apply(ev(2, "tool_call", call_id="a", tool_name="read"))  # redelivery loads the engine
    assert p2.on_timer(T0 + 13_000) == []


def test_timer_skips_ended_sessions() -> None:
    p = EventProcessor({}, {}, {}, {})
    p.apply(ev(0, "budget", budget=Budget(deadline_ms=T0 + 1_000, max_tokens=1000)))
    p.apply(ev(1, "session_end"))
    assert p.on_timer(T0 + 60_000) == []


def _sev(sid: str, seq: int, type_: str = "tool_call") -> TraceEvent:
    return TraceEvent(type_, sid, seq, T0 + seq * 1000, tool_name="t", call_id=f"c{seq}")  # type: ignore[arg-type]


def test_evict_forgets_clean_ended_and_least_recent_sessions_only() -> None:
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs, max_sessions=2)
    for sid in ("a", "b", "c", "d"):
        p.apply(_sev(sid, 0))
    p.apply(_sev("a", 1))  # a is now the most recent
    p.apply(_sev("b", 1, "session_end"))
    assert p.evict() == 0  # everything is dirty: nothing may go
    p.flush()
    p.apply(_sev("d", 1))  # d dirty again
    # b ended -> out; then 3 left (c, a, d) over max 2 -> the least recent clean one: c
    assert p.evict() == 2
    assert set(p.sessions_in_memory()) == {"a", "d"}
    assert p.evicted == 2
    # an evicted session is read back from its table and carries on exactly
    out = p.apply(_sev("c", 1))
    assert out.applied and out.session.events == 2
    assert p.apply(_sev("c", 1)).applied is False
    # its engine state too: same as a processor that never evicted
    q = EventProcessor({}, {}, {}, {})
    for e in (_sev("c", 0), _sev("c", 1)):
        q.apply(e)
    assert p.engine_state("c") == q.engine_state("c")


def test_each_session_keeps_one_codec_memo_until_it_is_forgotten() -> None:
    """Engine states are encoded with the session's memo (the next flush re-writes
    only what changed), the same bytes as without, and the memo goes with the session."""
    import zlib

    from streams.core.statecodec import decode_state, encode_state

    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs, max_sessions=1)
    events = _looping_events(6)
    for x in events[:6]:
        p.apply(x)
    p.flush()
    memo = p._memos["s1"]
    assert len(memo) > 5
    for x in events[6:]:
        p.apply(x)
    pending = p.take_engines(p.dirty_engine_ids())
    assert [w.memo for w in pending if w.table == "engines"] == [memo]
    p.untake(pending)  # dirty again: the flush writes them
    assert p.flush() >= 1
    stored = zlib.decompress(tabs[3][b"s1"][1:])
    assert decode_state(stored).last_seq == len(events) - 1
    assert stored == encode_state(decode_state(stored))  # a memo-less encode agrees
    p.apply(_sev("other", 0))
    p.flush()
    assert p.evict() == 1 and set(p._memos) == {"other"}


def test_max_sessions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_sessions=0"):
        EventProcessor({}, {}, {}, max_sessions=0)


def test_adopt_loads_open_sessions_for_the_timer_only() -> None:
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    first = EventProcessor(*tabs)
    now = T0
    deadline = Budget(deadline_ms=now + 10_000, max_tokens=10**5)
    first.apply(TraceEvent("session_start", "open", 0, now))
    first.apply(TraceEvent("budget", "open", 1, now, budget=deadline))
    first.apply(TraceEvent("session_start", "done", 0, now))
    first.apply(TraceEvent("session_end", "done", 1, now))
    first.flush()
    # a restarted worker: same tables, nothing in memory
    p = EventProcessor(*tabs)
    assert p.on_timer(now + 20_000) == []  # knows nobody yet
    assert p.adopt("open", 2) is True
    assert p.adopt("open", 2) is False  # already in memory
    assert p.adopt("done", 2) is False  # ended
    assert p.adopt("nobody", 2) is False
    made = p.on_timer(now + 20_000)
    assert [m.lineage.session_id for m in made] == ["open"]
    assert "deadline" in made[0].assessment.render()
    assert made[0].assessment.trigger == "timer"
    writes = p.collect()
    assert {(w.table, w.partition) for w in writes} == {("engines", 2)}


def test_taken_values_encode_as_of_the_take_whatever_happens_next() -> None:
    """The worker encodes taken values while later batches run: they must not change."""
    from streams.sim.events import fleet_events  # every detector fires in this fleet

    events = fleet_events(3_000, 40, seed=7)
    twin_tables: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor({}, {}, {}, {})
    twin = EventProcessor(*twin_tables)
    cut = len(events) // 2
    for e in events[:cut]:
        p.apply(e)
        twin.apply(e)
    taken = p.take_dirty()
    expected = {(w.table, w.key): w.value for w in twin.collect()}
    for e in events[cut:]:
        p.apply(e)  # the sessions go on while the taken values wait to be encoded
    got = {(w.table, w.key): w.value for w in (t.encode() for t in taken)}
    assert got == expected
    assert any(t == "engines" for t, _ in got)


def test_deferred_engines_are_taken_later_with_their_counters() -> None:
    """The worker takes engine snapshots a slice at a time: an engine (and the counters
    carrying its pattern tallies) taken after more events covers those events too,
    and nothing dirty is skipped or taken twice."""
    from streams.sim.events import fleet_events

    events = fleet_events(2_000, 30, seed=3)
    p = EventProcessor({}, {}, {}, {})
    twin = EventProcessor({}, {}, {}, {})
    cut = len(events) // 2
    for e in events[:cut]:
        p.apply(e)
        twin.apply(e)
    early = p.take_dirty(engines=False)
    assert {w.table for w in early} == {"budgets", "minutes"}  # counters wait for engines
    ids = p.dirty_engine_ids()
    assert sorted(ids) == sorted({e.session_id for e in events[:cut]})
    first, rest = ids[:10], ids[10:]
    taken = p.take_engines(first)
    assert p.take_engines(first) == []  # clean until their next change
    assert {(w.table, w.key.decode()) for w in taken} == {
        (t, sid) for sid in first for t in ("engines", "sessions")
    }
    for e in events[cut:]:  # batches run between slices
        p.apply(e)
        twin.apply(e)
    taken += p.take_engines(rest)
    later = {(w.table, w.key): w.encode().value for w in taken if w.key.decode() in rest}
    expected = {
        (w.table, w.key): w.value
        for w in twin.collect()
        if w.table in ("engines", "sessions") and w.key.decode() in rest
    }
    assert later == expected  # taken later: as of the later events, engine and counters alike
    assert p.flushed_values == len(early) + len(taken)
    # what changed after being taken is dirty again for the next flush
    assert p.dirty == len(p.collect()) > 0


# ---------------------------------------------------------------- issue #15: the write gap


def _gap_write(p: EventProcessor, tabs: tuple[dict[bytes, bytes], ...], pending: list) -> None:  # type: ignore[type-arg]
    """What the worker does after ``await producer.flush()``: write the taken values."""
    names = ("sessions", "budgets", "minutes", "engines")
    for w in (t.encode() for t in pending):
        tabs[names.index(w.table)][w.key] = w.value
    p.written(pending)


def test_an_event_in_the_write_gap_never_reads_an_older_table_value() -> None:
    """Issue #15, defect 1: sessions were evicted after their values were taken but
    before they were written; an event in that gap loaded the older table value and
    the next flush wrote it over the newer one (state went backwards)."""
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs, max_sessions=1)
    for seq in range(3):
        p.apply(_sev("a", seq))
    p.apply(_sev("b", 0, "session_end"))  # ended: always evicted
    pending = p.take_dirty()  # taken under the lock ...
    p.evict()  # ... (the old commit evicted here) ...
    p.apply(_sev("a", 3))  # ... an event arrives while the producer flush is awaited
    p.apply(_sev("b", 1))
    _gap_write(p, tabs, pending)  # ... then the taken values are written
    p.evict()
    p.flush()  # the next commit
    for sid, events, last in (("a", 4, 3), ("b", 2, 1)):
        stored = SessionCounters.decode(tabs[0][sid.encode()])
        assert (stored.events, stored.last_seq) == (events, last), sid
    q = EventProcessor({}, {}, {}, {})
    for e in [_sev("a", s) for s in range(4)]:
        q.apply(e)
    assert p.engine_state("a") == q.engine_state("a")


def test_an_in_flight_value_is_what_a_load_reads_until_written() -> None:
    """The overlay itself: a session not in memory whose value is in flight (here an
    out-of-order event for a minute the session moved on from) reads the taken value."""
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    p.apply(ev(0, "tool_call", ts=T0))  # minute 0
    p.apply(ev(1, "tool_call", ts=T0 + 61_000))  # minute 1: minute 0 is no longer cached
    pending = p.take_dirty()
    assert p.in_flight == len(pending)
    p.apply(ev(2, "tool_call", ts=T0 + 1_000))  # late event for minute 0, in the gap
    _gap_write(p, tabs, pending)
    assert p.in_flight == 0
    p.flush()
    m0 = MinuteCounts.decode(tabs[2][minute_key("s1", T0).encode()])
    assert m0.tool_calls == 2
    p.apply(ev(3, "tool_call", ts=T0 + 2_000))
    assert p.take_dirty() and p.dirty == 0
    with pytest.raises(RuntimeError, match="taken-but-unwritten"):
        p.drop_caches()  # the revoke must write what it took first


def test_a_failed_flush_hands_its_values_back_dirty() -> None:
    """A flush that fails after the take (producer flush, store) must not lose them."""
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs, max_sessions=1)
    for sid in ("a", "b", "c"):
        p.apply(_sev(sid, 0))
        p.apply(TraceEvent("model_step", sid, 1, T0, input_tokens=5, output_tokens=1))
    pending = p.take_dirty()
    assert p.dirty == 0
    p.untake(pending)  # the flush failed
    assert p.in_flight == 0 and p.dirty == len(pending)
    p.evict()
    assert p.flush() == len(pending)
    for sid in ("a", "b", "c"):
        assert SessionCounters.decode(tabs[0][sid.encode()]).events == 2
        assert BudgetState.decode(tabs[1][sid.encode()]).tokens_used == 6


@pytest.mark.parametrize(
    "bad",
    [{"x": float("nan")}, {"x": float("inf")}, {"x": [float("-inf")]}, {"x": "\ud800"}],
)
def test_an_event_that_cannot_be_stored_is_rejected_before_anything_changed(bad: object) -> None:
    """Issue #15, defect 3 (worker side): ``{"x": NaN}`` used to crash the worker at the
    flush; now apply raises InvalidEventError (dead-lettered) and nothing changed."""
    tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    p.apply(_sev("a", 0))
    p.flush()
    bad_event = TraceEvent("tool_call", "a", 1, T0, tool_name="t", call_id="c1", input=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="cannot be stored as strict JSON"):
        p.apply(bad_event)
    assert p.dirty == 0
    out = p.apply(_sev("a", 1))  # the session carries on with the next valid event
    assert out.applied and out.session.events == 2
    assert p.flush() > 0


def test_a_worker_killed_mid_flush_never_loses_pattern_tallies() -> None:
    """A flush writes its values one after another; a SIGKILL can stop it after any
    of them.  The restarted worker re-applies the redelivered events to what was
    written.  Fails with the engine written before its counters (as take_engines
    did): a kill between the two left the engine ahead, it skipped the redelivered
    events and fired nothing, and the counters applied them without their patterns
    (a chaos run, 2026-11-29: ``sessions.patterns_fired: live {}, replay {...}``)."""
    from streams.sim.events import fleet_events

    names = ("sessions", "budgets", "minutes", "engines")
    events = fleet_events(400, 6, seed=5)
    ref = EventProcessor({}, {}, {}, {})
    for e in events:
        ref.apply(e)
    ref_tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
    for w in ref.collect():
        ref_tabs[names.index(w.table)][w.key] = w.value
    expected = {k: SessionCounters.decode(v).patterns_fired for k, v in ref_tabs[0].items()}
    assert sum(len(p) for p in expected.values()) > 0  # the fleet fires patterns

    p = EventProcessor({}, {}, {}, {})
    for e in events:
        p.apply(e)
    # the worker's flush: the small values, then the engines a slice at a time
    pending = p.take_dirty(engines=False)
    pending += p.take_engines(p.dirty_engine_ids())
    writes = [w.encode() for w in pending]
    for cut in range(len(writes) + 1):  # killed after `cut` writes
        tabs: tuple[dict[bytes, bytes], ...] = ({}, {}, {}, {})
        for w in writes[:cut]:
            tabs[names.index(w.table)][w.key] = w.value
        restarted = EventProcessor(*tabs)
        for e in events:  # nothing was committed: everything is redelivered
            restarted.apply(e)
        for w in restarted.collect():
            tabs[names.index(w.table)][w.key] = w.value
        got = {k: SessionCounters.decode(v).patterns_fired for k, v in tabs[0].items()}
        assert got == expected, f"killed after {cut} of {len(writes)} writes"
