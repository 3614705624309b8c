"""Engines wait for their flush (``EventProcessor.plan_engines``), and nothing is lost.

The worker writes a session's counters, budget and minutes at every commit but its
engine state (tens of KB) only once it has waited ``--engine-flush-interval``; the
commit then holds each events partition's offset back to the first event a waiting
engine has not written.  These tests drive the processor the way the worker's commit
does (``_ReadCommittedConsumer._commit_tps``), with dict tables, and crash it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from streams.core.events import Budget, TraceEvent
from streams.sim.events import fleet_events
from streams.worker.processor import EnginePlan, EventProcessor, PendingWrite
from streams.worker.state import BudgetState, MinuteCounts, SessionCounters

T0 = 1_767_225_600_000
NAMES = ("sessions", "budgets", "minutes", "engines")
Tables = tuple[dict[bytes, bytes], ...]


def _ev(sid: str, seq: int, type_: str = "tool_call") -> TraceEvent:
    return TraceEvent(type_, sid, seq, T0 + seq * 1000, tool_name="t", call_id=f"c{seq}")  # type: ignore[arg-type]


def _write(p: EventProcessor, tabs: Tables, pending: list[PendingWrite]) -> None:
    for w in (t.encode() for t in pending):
        tabs[NAMES.index(w.table)][w.key] = w.value
    p.written(pending)


def _commit(
    p: EventProcessor,
    tabs: Tables,
    now_s: float,
    wait_s: float,
    handled: dict[int, int],
    committed: dict[int, int],
    *,
    respect_hold: bool = True,
) -> EnginePlan:
    """One worker commit: plan, take (counters now, due engines with their counters),
    write, then commit each partition's offset, no further than the plan's hold."""
    plan = p.plan_engines(now_s, wait_s)
    offsets = dict(handled)
    if respect_hold:
        for part, limit in plan.hold.items():
            if part in offsets:
                offsets[part] = min(offsets[part], limit)
    pending = p.take_dirty(engines=False, later=plan.due, waiting=plan.waiting_ids)
    pending += p.take_engines(plan.due)
    _write(p, tabs, pending)
    for part, off in offsets.items():
        if off > committed.get(part, 0):
            committed[part] = off
    return plan


def test_a_waiting_session_keeps_its_values_and_holds_its_offset() -> None:
    tabs: Tables = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    handled: dict[int, int] = {}
    committed: dict[int, int] = {}
    for seq in range(3):
        p.apply(_ev("a", seq), 0, seq)
        handled[0] = seq + 1
    # t=0: a new session's engine is due at once (nothing stored yet)
    plan = _commit(p, tabs, 0.0, 5.0, handled, committed)
    assert plan.due == ("a",) and plan.hold == {} and plan.waiting == 0
    assert committed == {0: 3} and b"a" in tabs[3]
    stored_engine = tabs[3][b"a"]
    # t=1..4: events at offsets 3.. change the session; its values wait (engine,
    # counters, minute alike)
    stored_minutes = dict(tabs[2])
    for t in range(1, 5):
        seq = 2 + t
        p.apply(_ev("a", seq), 0, seq)
        handled[0] = seq + 1
        plan = _commit(p, tabs, float(t), 5.0, handled, committed)
        assert plan.due == () and plan.hold == {0: 3} and plan.waiting == 1
        assert plan.waiting_ids == {"a"}
        assert SessionCounters.decode(tabs[0][b"a"]).last_seq == 2
        assert tabs[3][b"a"] == stored_engine and tabs[2] == stored_minutes
        assert committed == {0: 3}  # held at the first event the stored values lack
        held = p.counters("a")
        assert held is not None and held.last_seq == seq  # in memory
    # t=5: the fifth fifth of the wait: its turn (one dirty engine, a 5th per second)
    plan = _commit(p, tabs, 5.0, 5.0, handled, committed)
    assert plan.due == ("a",) and plan.hold == {}
    assert tabs[3][b"a"] != stored_engine and committed == {0: 7}
    assert SessionCounters.decode(tabs[0][b"a"]).last_seq == 6 and tabs[2] != stored_minutes
    assert p.dirty == 0


def test_engine_flushes_are_spread_over_the_commits() -> None:
    """100 sessions, one event each per 1 s commit, 5 s wait: about a fifth of the
    engines per commit, oldest change first, none left waiting past 2 * wait (before
    the spreading every engine fell due at the same commit, 1,000 at once in the
    closed-loop bench)."""
    tabs: Tables = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    sids = [f"s{i}" for i in range(100)]
    handled: dict[int, int] = {}
    committed: dict[int, int] = {}
    offset = 0
    last_flush = dict.fromkeys(sids, 0.0)
    per_commit: list[int] = []
    for t in range(30):
        for seq_sid in sids:
            p.apply(_ev(seq_sid, t), 0, offset)
            offset += 1
            handled[0] = offset
        plan = _commit(p, tabs, float(t), 5.0, handled, committed)
        per_commit.append(len(plan.due))
        for sid in plan.due:
            last_flush[sid] = float(t)
        assert all(t - last_flush[sid] <= 10 for sid in sids), t
        assert committed[0] <= min(  # never past an event a waiting engine lacks
            (o for o in plan.hold.values()), default=handled[0]
        )
    assert per_commit[0] == 100  # new sessions: all at once
    assert max(per_commit[5:]) <= 21 and min(per_commit[5:]) >= 19, per_commit


def test_one_engine_gets_its_turn_after_the_whole_wait() -> None:
    """Fractions of a flush carry over: one dirty engine and plans a tenth of the wait
    apart make it due at the tenth plan, not at the first (rounding up) or never
    (rounding down)."""
    p = EventProcessor({}, {}, {}, {})
    for sid in ("a", "b", "c", "d"):
        p.apply(_ev(sid, 0), 0, 0)
    p.take_dirty()
    p.plan_engines(0.0, 10.0)
    p.apply(_ev("a", 1), 0, 1)
    due = {}
    for t in range(1, 22):
        plan = p.plan_engines(float(t), 10.0)
        if plan.due:
            due[t] = plan.due
            p.take_engines(plan.due)
    assert due == {10: ("a",)}


def test_wait_zero_ended_sessions_and_events_without_offsets_are_due_at_once() -> None:
    p = EventProcessor({}, {}, {}, {})
    for sid in ("a", "b", "c"):
        p.apply(_ev(sid, 0), 0, 0)
    p.take_dirty()  # all stored: no longer new
    p.plan_engines(0.0, 5.0)
    p.apply(_ev("a", 1), 0, 1)
    p.apply(_ev("b", 1, "session_end"), 0, 2)
    p.apply(_ev("c", 1))  # no partition/offset: nothing to hold back by
    assert sorted(p.plan_engines(1.0, 5.0).due) == ["b", "c"]
    assert p.plan_engines(1.0, 5.0).hold == {0: 1}
    assert sorted(p.plan_engines(1.0, 0.0).due) == ["a", "b", "c"]


def test_the_hold_is_the_lowest_waiting_offset_per_partition() -> None:
    p = EventProcessor({}, {}, {}, {})
    for i, (sid, part) in enumerate([("a", 0), ("b", 0), ("c", 1)]):
        p.apply(_ev(sid, 0), part, 10 * i)
    p.take_dirty()
    p.plan_engines(0.0, 5.0)
    p.apply(_ev("b", 1), 0, 40)  # first change of b since its take
    p.apply(_ev("a", 1), 0, 41)
    p.apply(_ev("b", 2), 0, 42)  # b is already dirty: its first offset stays 40
    p.apply(_ev("c", 1), 1, 7)
    plan = p.plan_engines(1.0, 5.0)  # 3 dirty engines, a fifth of the wait: 0.6 of one
    assert plan.due == () and plan.hold == {0: 40, 1: 7} and plan.waiting == 3
    p.take_engines(["b"])
    assert p.plan_engines(1.1, 5.0).hold == {0: 41, 1: 7}  # + 2 * 0.02: still none due


def test_a_timer_made_change_waits_without_holding_an_offset() -> None:
    p = EventProcessor({}, {}, {}, {})
    p.apply(TraceEvent("budget", "a", 0, T0, budget=Budget(deadline_ms=T0 + 10_000)), 0, 0)
    p.take_dirty()
    p.plan_engines(0.0, 5.0)
    (made,) = p.on_timer(T0 + 11_000)  # past the deadline: the quiet session is assessed
    assert made.assessment.trigger == "timer"
    plan = p.plan_engines(1.0, 5.0)
    assert plan.due == () and plan.hold == {} and plan.waiting == 1
    assert p.plan_engines(5.0, 5.0).due == ("a",)


def test_an_untaken_engine_is_due_at_the_next_plan() -> None:
    p = EventProcessor({}, {}, {}, {})
    p.apply(_ev("a", 0), 0, 0)
    p.take_dirty()
    p.plan_engines(0.0, 5.0)
    p.apply(_ev("a", 1), 0, 1)
    taken = p.take_engines(["a"])
    p.untake(taken)  # the flush failed: never written
    assert p.plan_engines(1.0, 5.0).due == ("a",)


def _run(
    events: Sequence[TraceEvent],
    crash_after: int | None,
    seed: int,
    *,
    respect_hold: bool = True,
    partitions: int = 3,
    wait_s: float = 5.0,
) -> Tables:
    """The worker over ``events`` (partitioned by session, offsets per partition),
    a commit every 40 events (1 s of a clock), a crash after ``crash_after`` events
    (a new processor over the same tables, each partition redelivered from its
    committed offset), and a final stop that flushes everything."""
    rng = random.Random(seed)
    log: dict[int, list[TraceEvent]] = {}
    for e in events:
        log.setdefault(hash(e.session_id) % partitions, []).append(e)
    order = [part for part in log for _ in log[part]]
    rng.shuffle(order)  # the partitions' records interleave as fetches do
    tabs: Tables = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    handled: dict[int, int] = {}
    committed: dict[int, int] = {}
    pos = dict.fromkeys(log, 0)
    clock = 0.0
    done = 0
    crashed = False
    while True:
        if crash_after is not None and not crashed and done >= crash_after:
            crashed = True
            p = EventProcessor(*tabs)  # the tables hold what was written
            pos = {part: committed.get(part, 0) for part in log}
            handled = {}
            order = [part for part in log for _ in range(len(log[part]) - pos[part])]
            rng.shuffle(order)
        if not order:
            break
        part = order.pop()
        off = pos[part]
        pos[part] = off + 1
        p.apply(log[part][off], part, off)
        handled[part] = off + 1
        done += 1
        if done % 40 == 0:
            clock += 1.0
            _commit(p, tabs, clock, wait_s, handled, committed, respect_hold=respect_hold)
    _commit(p, tabs, clock + 1, 0.0, handled, committed)  # the stop flushes every engine
    return tabs


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_at_any_point_loses_nothing_and_counts_every_pattern_once(seed: int) -> None:
    """The tables after a crash + redelivery from the committed offsets equal the
    tables of a run without crash, byte for byte: every event a waiting engine had
    not written is applied to it again, and the counters (flushed ahead) neither
    count it nor its patterns twice."""
    events = fleet_events(1_500, 12, seed=seed)
    expected = _run(events, None, seed)
    assert expected[3], "the fleet has engines"
    rng = random.Random(1000 + seed)
    for crash_after in sorted(rng.sample(range(41, len(events)), 4)):
        got = _run(events, crash_after, seed)
        for name, want, have in zip(NAMES, expected, got, strict=True):
            assert have == want, f"{name} differ after a crash at event {crash_after}"


def test_without_the_hold_a_crash_loses_engine_events() -> None:
    """The control for the test above: committing offsets past what waiting engines
    wrote loses those events for them (the tables differ), so the hold is what
    keeps the tables whole."""
    events = fleet_events(1_500, 12, seed=0)
    expected = _run(events, None, 0)
    lost = 0
    for crash_after in range(200, 1_400, 150):
        got = _run(events, crash_after, 0, respect_hold=False)
        lost += got[3] != expected[3]
    assert lost > 0


def test_what_a_waiting_session_holds_is_newer_than_its_tables() -> None:
    """The views read these while a session waits (``HeldSessions``): the counters,
    budget and minutes in memory, including a minute taken and not yet written."""
    tabs: Tables = ({}, {}, {}, {})
    p = EventProcessor(*tabs)
    p.apply(TraceEvent("budget", "a", 0, T0, budget=Budget(max_tokens=100)), 0, 0)
    p.apply(_ev("a", 1), 0, 1)
    _commit(p, tabs, 0.0, 5.0, {0: 2}, {})  # new: written at once
    assert p.held_minutes("a") == [MinuteCounts.decode(v) for v in tabs[2].values()]
    p.apply(TraceEvent("model_step", "a", 2, T0 + 1000, input_tokens=7), 0, 2)
    p.apply(_ev("a", 3, "tool_call"), 0, 3)  # same minute
    p.apply(TraceEvent("tool_call", "a", 4, T0 + 61_000, tool_name="t", call_id="c4"), 0, 4)
    plan = _commit(p, tabs, 1.0, 5.0, {0: 5}, {})
    assert plan.waiting_ids == {"a"}
    stored_budget = BudgetState.decode(tabs[1][b"a"])
    held_budget = p.held_budget("a")
    assert held_budget is not None and held_budget.last_seq == 2 > stored_budget.last_seq
    minutes = p.held_minutes("a")
    assert [(m.minute_start_ms, m.tool_calls) for m in minutes] == [(T0, 2), (T0 + 60_000, 1)]
    assert [MinuteCounts.decode(v).tool_calls for v in tabs[2].values()] == [1]
    # taken, not yet written: still what the views must show
    pending = p.take_dirty()
    assert [m.tool_calls for m in p.held_minutes("a")] == [2, 1]
    _write(p, tabs, pending)
    assert p.held_budget("b") is None and p.held_minutes("b") == [] and p.counters("b") is None
