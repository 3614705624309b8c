"""Re-publish recorded sessions into another prefix at a chosen speed.

Why: a sandbox pipeline (router + worker with other detector settings) under
``--to-prefix`` can then run on old traffic without touching the live one.

Events of all sessions are merged in event-time order (``timestamp_ms``; ties
keep the order they were read in, so each session's own order is kept) and
sent through the publisher SDK: event ``i`` leaves at
``start + (t_i - t_0) / speed`` of wall time (``speed`` 0: as fast as possible).
Events keep their original ``timestamp_ms`` (the sandbox sees the same event
times, hence the same detections); the SDK renumbers ``seq`` from 0 per session
and folds the recorded ``session_start`` / ``session_end`` into its own (their
metadata kept), exactly like ``trajectory publish --time original``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streams.core.events import TraceEvent
from streams.errors import ConfigError
from streams.security import SecurityConfig


@dataclass(frozen=True, slots=True)
class RepublishStats:
    sessions: int
    events: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0


def event_time_order(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """Stable sort by event time; a session's events are clamped to their read order.

    A session whose timestamps go backwards keeps its own order (its later events
    are scheduled no earlier than its previous one), so per-session order is
    never changed by the merge.
    """
    last: dict[str, int] = {}
    keyed: list[tuple[int, int, TraceEvent]] = []
    for i, ev in enumerate(events):
        t = max(ev.timestamp_ms, last.get(ev.session_id, ev.timestamp_ms))
        last[ev.session_id] = t
        keyed.append((t, i, ev))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [k[2] for k in keyed]


def republish(
    events: Sequence[TraceEvent],
    *,
    bootstrap: str,
    to_prefix: str,
    speed: float,
    on_event: Callable[[], None] | None = None,
    security: SecurityConfig | None = None,
) -> RepublishStats:
    """Send ``events`` to ``<to_prefix>.session.<id>`` (see the module docstring)."""
    from streams.sdk.publisher import Publisher, Session
    from streams.settings import Settings

    if speed < 0:
        raise ConfigError("--speed", f"{speed}: use 0 (as fast as possible) or a factor > 0")
    settings = Settings(bootstrap=bootstrap, prefix=to_prefix)
    if security is not None:  # None: the process-wide setting (Settings' default)
        settings = settings.with_(security=security)
    ordered = event_time_order(events)
    if not ordered:
        return RepublishStats(0, 0, 0.0)
    t0 = ordered[0].timestamp_ms
    sessions: dict[str, Session] = {}
    sent = 0
    with Publisher(settings) as pub:
        pub.ensure_session_topics(sorted({ev.session_id for ev in ordered}))
        began = time.monotonic()
        last_t: dict[str, int] = {}
        for ev in ordered:
            sid = ev.session_id
            t = max(ev.timestamp_ms, last_t.get(sid, ev.timestamp_ms))
            last_t[sid] = t
            if speed > 0:
                delay = began + (t - t0) / 1000.0 / speed - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            session = sessions.get(sid)
            if session is None:
                session = pub.session(
                    sid,
                    agent_id=ev.agent_id,
                    parent_session_id=ev.parent_session_id,
                    metadata=dict(ev.metadata) if ev.type == "session_start" else {},
                    timestamp_ms=ev.timestamp_ms,
                    flush_on_exit=False,
                )
                session.start()
                sessions[sid] = session
                sent += 1
                if ev.type == "session_start":
                    if on_event is not None:
                        on_event()
                    continue
            if ev.type == "session_end":
                session.end(
                    metadata=dict(ev.metadata),
                    error_message=ev.error_message,
                    timestamp_ms=ev.timestamp_ms,
                )
            else:  # a second session_start of a session is sent as a plain event
                session.emit(ev)
            sent += 1
            if on_event is not None:
                on_event()
        pub.flush()
        elapsed = time.monotonic() - began
    return RepublishStats(len(sessions), sent, elapsed)


__all__ = ["RepublishStats", "event_time_order", "republish"]
