"""The lineage a timer-made assessment carries (``EventProcessor._lineage``).

Rule (unchanged by issue #12, which builds a new ``Lineage`` only when it changes):
an event naming a parent or an agent sets the session's lineage to exactly what it
names (an absent one included); an event naming neither keeps the last lineage, or
sets ``Lineage(sid)`` for a session seen for the first time.
"""

from __future__ import annotations

from typing import Any

from streams.core.events import TraceEvent
from streams.worker.processor import EventProcessor, Lineage

T0 = 1_767_225_600_000


def ev(seq: int, **kw: Any) -> TraceEvent:
    return TraceEvent(type="message", session_id="s-1", seq=seq, timestamp_ms=T0 + seq, **kw)


def test_lineage_follows_the_last_event_that_names_one() -> None:
    p = EventProcessor({}, {}, {}, None)
    steps: list[tuple[dict[str, Any], Lineage]] = [
        ({}, Lineage("s-1")),
        ({"agent_id": "a"}, Lineage("s-1", None, "a")),
        ({}, Lineage("s-1", None, "a")),  # names neither: kept
        ({"agent_id": "a"}, Lineage("s-1", None, "a")),  # the same again
        ({"parent_session_id": "p"}, Lineage("s-1", "p", None)),  # the agent is dropped
        ({"parent_session_id": "p", "agent_id": "b"}, Lineage("s-1", "p", "b")),
        ({"agent_id": "b"}, Lineage("s-1", None, "b")),
    ]
    for seq, (kw, expected) in enumerate(steps):
        p.apply(ev(seq, **kw), 0)
        assert p._lineage["s-1"] == expected, (seq, kw)
