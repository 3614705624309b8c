"""The worker's session-counter rules written plainly, one frozen value per event:
the reference the property tests hold ``SessionWork`` (streams/worker/state.py, the
worker's in-place path, which ``SessionCounters.apply`` also goes through) to.

Importable from any test (``tests/`` is on ``sys.path`` through ``tests/conftest.py``).
This was ``SessionCounters.apply`` / ``with_patterns`` before the in-place path; it is
kept here, not in the package, so the rules have one copy in the code and an
independent one in the tests.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from streams.core.events import TraceEvent
from streams.core.jsonl import event_to_json
from streams.worker.state import RECENT_LIMIT, SessionCounters


def reference_apply(
    c: SessionCounters,
    event: TraceEvent,
    event_json: dict[str, Any] | None = None,
    event_text: str | None = None,
) -> SessionCounters | None:
    """``c`` after ``event`` (None: its seq was already applied)."""
    last_seq = c.last_seq
    seq = event.seq
    if seq <= last_seq:
        return None
    etype = event.type
    ts = event.timestamp_ms
    is_error = (etype == "tool_result" and event.is_error) or etype == "error"
    recent = (
        *c.recent,
        event_to_json(event) if event_json is None else event_json,
    )[-RECENT_LIMIT:]
    texts = c.recent_text
    if event_text is not None and event_json is not None:
        if len(texts) != len(c.recent):
            texts = (None,) * len(c.recent)
        texts = (*texts, event_text)[-RECENT_LIMIT:]
    elif texts:
        texts = (*texts, None)[-RECENT_LIMIT:] if len(texts) == len(c.recent) else ()
    first = c.first_event_ms
    last = c.last_event_ms
    return SessionCounters(
        session_id=c.session_id,
        events=c.events + 1,
        tool_calls=c.tool_calls + (etype == "tool_call"),
        tool_results=c.tool_results + (etype == "tool_result"),
        errors=c.errors + is_error,
        model_steps=c.model_steps + (etype == "model_step"),
        input_tokens=c.input_tokens + (event.input_tokens or 0),
        output_tokens=c.output_tokens + (event.output_tokens or 0),
        last_seq=seq,
        seq_gaps=c.seq_gaps + (seq > last_seq + 1),
        first_event_ms=ts if first is None else min(first, ts),
        last_event_ms=ts if last is None else max(last, ts),
        ended=c.ended or etype == "session_end",
        recent=recent,
        patterns_fired=c.patterns_fired,
        recent_text=texts,
    )


def reference_with_patterns(c: SessionCounters, pattern_types: tuple[str, ...]) -> SessionCounters:
    """``c`` with the patterns fired on the event just applied counted."""
    if not pattern_types:
        return c
    counts = dict(c.patterns_fired)
    for name in pattern_types:
        counts[name] = counts.get(name, 0) + 1
    return replace(c, patterns_fired=counts)
