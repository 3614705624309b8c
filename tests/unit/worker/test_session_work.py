"""``SessionWork``: a session's counters applied in place, frozen only at a flush.

The worker used to build a new :class:`SessionCounters` per event; it now changes a
:class:`SessionWork` and freezes it when a flush takes it.  The table bytes must not
change: after any events, ``freeze()`` equals :meth:`SessionCounters.apply` (the
reference) and encodes to the same bytes, and a frozen value never changes after it
was taken (the flush encodes it while later events are applied).
"""

from __future__ import annotations

from typing import Any

from counters_reference import reference_apply, reference_with_patterns
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.events import TraceEvent
from streams.sim.events import fleet_events
from streams.worker.processor import EventProcessor, storable_json
from streams.worker.state import RECENT_LIMIT, SessionCounters, SessionWork

T0 = 1_767_225_600_000

steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["tool_call", "tool_result", "model_step", "error", "session_end", "budget"]
        ),
        st.integers(-2, 3),  # seq step: <= 0 is a redelivery, > 1 a gap
        st.integers(-500, 500),  # timestamp step: events out of time order too
        st.booleans(),  # is_error
        st.one_of(st.none(), st.integers(0, 50)),  # tokens
        st.sampled_from(["texts", "no text", "reload"]),  # how the value is carried on
        st.lists(st.sampled_from(["doom_loop", "stall", "burn"]), max_size=2),
    ),
    min_size=1,
    max_size=RECENT_LIMIT + 15,
)


@settings(max_examples=200, deadline=None)
@given(
    patterns=st.dictionaries(st.sampled_from(["doom_loop", "x"]), st.integers(0, 3)), steps=steps
)
def test_work_freezes_to_what_session_counters_apply_gives(
    patterns: dict[str, int], steps: list[tuple[Any, ...]]
) -> None:
    ref = SessionCounters("s1", patterns_fired=patterns)
    work = SessionWork(ref)
    taken: list[tuple[SessionCounters, bytes, SessionCounters]] = []
    seq, ts = 0, T0
    for etype, sstep, tstep, is_error, tokens, how, fired in steps:
        seq, ts = max(0, seq + sstep), max(0, ts + tstep)
        event = TraceEvent(
            etype,
            "s1",
            seq,
            ts,
            is_error=is_error,
            input_tokens=tokens,
            output_tokens=tokens,
        )
        as_json, as_text = storable_json(event)
        text = None if how == "no text" else as_text
        nxt = reference_apply(ref, event, as_json, text)
        applied = work.apply(event, as_json, text)
        assert applied == (nxt is not None)
        if nxt is not None:
            ref = reference_with_patterns(nxt, tuple(fired))
            work.add_patterns(fired)
        frozen = work.freeze()
        assert frozen == ref
        assert frozen.encode() == ref.encode()
        assert len(frozen.recent_text) in (0, len(frozen.recent))  # the fast path's texts
        taken.append((frozen, frozen.encode(), ref))
        if how == "reload":  # evicted and read back from the table: texts unknown
            ref = SessionCounters.decode(ref.encode())
            work = SessionWork(SessionCounters.decode(frozen.encode()))
    # values taken earlier did not change with the later events
    for frozen, data, at_the_time in taken:
        assert frozen == at_the_time and frozen.encode() == data


def test_freeze_is_cached_until_a_change() -> None:
    work = SessionWork(SessionCounters("s1"))
    e0, e1 = (TraceEvent("tool_call", "s1", s, T0 + s) for s in (0, 1))
    work.apply(e0, *storable_json(e0))
    first = work.freeze()
    assert work.freeze() is first
    assert not work.apply(e0, *storable_json(e0))  # redelivery: nothing changed
    assert work.freeze() is first
    work.apply(e1, *storable_json(e1))
    assert work.freeze() is not first and first.events == 1 and work.freeze().events == 2
    second = work.freeze()
    work.add_patterns(["doom_loop"])
    assert work.freeze().patterns_fired == {"doom_loop": 1} and second.patterns_fired == {}


def test_processor_tables_are_the_reference_bytes_across_flushes() -> None:
    """A generated fleet through the processor (flushes, eviction, redeliveries): every
    session row is byte for byte what SessionCounters.apply gives."""
    events = fleet_events(3_000, 60, seed=5, prefix="work")
    events = events + events[::7]  # redeliveries
    tables: dict[str, dict[bytes, bytes]] = {k: {} for k in ("s", "b", "m")}
    processor = EventProcessor(tables["s"], tables["b"], tables["m"], max_sessions=20)
    ref: dict[str, SessionCounters] = {}
    for i, event in enumerate(events):
        processor.apply(event, 0)
        sid = event.session_id
        before = ref.get(sid, SessionCounters(sid))
        ref[sid] = reference_apply(before, event) or before
        if i % 400 == 399:
            processor.flush()
            processor.evict()
    for sid in processor.sessions_in_memory():
        held = processor.counters(sid)
        assert held is not None and len(held.recent_text) in (0, len(held.recent))
    processor.flush()
    assert {k.decode() for k in tables["s"]} == set(ref)
    for sid, value in ref.items():
        assert tables["s"][sid.encode()] == value.encode()


def test_a_long_session_keeps_the_last_window_and_its_texts() -> None:
    events = [TraceEvent("tool_call", "s1", s, T0 + s, input={"n": s}) for s in range(45)]
    work = SessionWork(SessionCounters("s1"))
    for e in events:
        work.apply(e, *storable_json(e))
    frozen = work.freeze()
    assert [r["seq"] for r in frozen.recent] == list(range(45 - RECENT_LIMIT, 45))
    assert list(frozen.recent_text) == [storable_json(e)[1] for e in events[-RECENT_LIMIT:]]
