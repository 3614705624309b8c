"""``SessionCounters.encode`` with the recent entries' known texts (the flush's fast path).

The worker's flush writes each touched session's counters; the processor hands every
event's canonical text (made once, to check the event is storable) to the counters,
and :meth:`SessionCounters.encode` writes those texts instead of dumping the 20 recent
events again.  The bytes must be exactly the full dump's, whatever the content.
"""

from __future__ import annotations

from typing import Any

from counters_reference import reference_apply
from hypothesis import given, settings
from hypothesis import strategies as st
from json_strategies import json_values

from streams.core.events import TraceEvent
from streams.sim.events import fleet_events
from streams.worker.processor import EventProcessor, storable_json
from streams.worker.state import RECENT_LIMIT, STATE_VERSION, SessionCounters, canonical_bytes

T0 = 1_767_225_600_000


def full_dump(c: SessionCounters) -> bytes:
    """The encoding as it was before the texts were kept: one dump of everything."""
    return canonical_bytes({"v": STATE_VERSION, **c.to_json()})


def texts_known(c: SessionCounters) -> bool:
    return len(c.recent_text) == len(c.recent) and all(t is not None for t in c.recent_text)


# Text that tries to look like the marker the encoder looks for, plus anything else.
tricky = st.sampled_from(
    ['"recent":[],"seq_gaps":', '"recent":[]', "recent", "seq_gaps", '"', "\\", "é", "\u2028", ""]
)
text = st.one_of(tricky, st.text(st.characters(blacklist_categories=("Cs",)), max_size=12))
json_value = json_values(text=text, max_size=3, max_leaves=8)
steps = st.lists(
    st.tuples(
        st.sampled_from(["tool_call", "tool_result", "model_step", "error", "session_end"]),
        st.integers(-1, 2),  # seq step: <= 0 is a redelivery
        st.sampled_from(["texts", "no texts", "decode"]),  # how the value is carried on
        text,
        st.dictionaries(text, text, max_size=2),
        json_value,
    ),
    min_size=1,
    max_size=RECENT_LIMIT + 12,
)


@settings(max_examples=150, deadline=None)
@given(session_id=text, patterns=st.dictionaries(text, st.integers(0, 5)), steps=steps)
def test_counters_encode_like_a_full_dump_after_any_sequence(
    session_id: str, patterns: dict[str, int], steps: list[tuple[Any, ...]]
) -> None:
    """Texts known, unknown (apply without them) or lost (read back from the table),
    in any mix: the bytes are the full dump's and decode to the same value."""
    c = SessionCounters(session_id, patterns_fired=patterns)
    seq = 0
    for etype, step, how, name, metadata, value in steps:
        seq = max(0, seq + step)
        event = TraceEvent(
            etype,
            session_id,
            seq,
            T0 + seq,
            tool_name=name,
            error_message=name,
            metadata=metadata,
            input=value,
        )
        as_json, as_text = storable_json(event)
        nxt = c.apply(event) if how == "no texts" else c.apply(event, as_json, as_text)
        if nxt is not None:
            c = nxt.with_patterns((name,)) if etype == "tool_result" else nxt
        if how == "decode":
            c = SessionCounters.decode(c.encode())
            assert c.recent_text == ()
        data = c.encode()
        assert data == full_dump(c)
        assert SessionCounters.decode(data) == c


def test_the_processor_keeps_every_text_and_writes_the_full_dumps_bytes() -> None:
    """A generated fleet through the processor, flushed every 500 events: each session
    row is byte for byte what applying the events without texts gives, and the texts
    were known (the fast path ran, not the fallback)."""
    events = fleet_events(3_000, 40, seed=3, prefix="enc")
    tables: dict[str, dict[bytes, bytes]] = {k: {} for k in ("s", "b", "m")}
    processor = EventProcessor(tables["s"], tables["b"], tables["m"])
    plain: dict[str, SessionCounters] = {}
    for i, event in enumerate(events):
        result = processor.apply(event, 0)
        assert texts_known(result.session.freeze())
        sid = event.session_id
        before = plain.get(sid, SessionCounters(sid))
        plain[sid] = reference_apply(before, event) or before
        if i % 500 == 499:
            processor.flush()
    processor.flush()
    assert len(tables["s"]) == len(plain) > 1
    for sid, want in plain.items():
        assert want.recent_text == ()
        assert tables["s"][sid.encode()] == full_dump(want)
