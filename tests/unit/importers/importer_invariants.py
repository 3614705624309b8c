"""Invariants every importer must keep (shared by the importer tests)."""

from __future__ import annotations

import re

from streams.core.events import TraceEvent

SID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def check_invariants(events: list[TraceEvent]) -> None:
    """Per session: valid id, seq 0..n-1, time never goes back, results answer calls."""
    by_session: dict[str, list[TraceEvent]] = {}
    for ev in events:
        by_session.setdefault(ev.session_id, []).append(ev)
    for sid, evs in by_session.items():
        assert SID.match(sid), sid
        assert [e.seq for e in evs] == list(range(len(evs))), sid
        times = [e.timestamp_ms for e in evs]
        assert times == sorted(times), sid
        calls: set[str] = set()
        for e in evs:
            if e.type == "tool_call":
                assert e.call_id and e.call_id not in calls, (sid, e.seq)
                assert e.tool_name
                calls.add(e.call_id)
            if e.type == "tool_result":
                assert e.call_id in calls, (sid, e.seq)
