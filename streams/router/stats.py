"""Router counters and the one-line status the router logs periodically.

:class:`RouterStats` is a frozen snapshot; the router keeps its own mutable
counters and hands out snapshots, so a reader never sees a half-updated value.
Time is passed in by the caller (monotonic seconds).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RouterStats:
    """Totals since the router started.  Invariant: every field only grows.

    ``routed`` and ``dead_lettered`` count messages inside *committed*
    transactions only (exactly-once), or messages whose delivery a producer flush
    confirmed (at-least-once); ``aborted_messages`` counts those rolled back (they
    are consumed again, so they may be routed later).  ``unknown_commits`` counts
    exactly-once commits given up with their outcome unknown (wedged, or timing
    out for ``TXN_STUCK_S``), ``unknown_messages`` their messages: committed or
    aborted, the router resumes from the group's committed offsets, so each is
    routed exactly once, but it is in ``routed`` only if it was aborted and routed
    again.  ``transactions`` /
    ``aborts`` move in exactly-once mode only, ``offset_commits`` /
    ``failed_commits`` in at-least-once mode only.
    """

    routed: int = 0
    dead_lettered: int = 0
    announcements: int = 0
    transactions: int = 0
    aborts: int = 0
    aborted_messages: int = 0
    rebalances: int = 0
    #: Wall seconds spent blocked committing (broker round trips while the router
    #: routes nothing): send_offsets/commit_transaction (exactly-once), or the
    #: producer flush (at-least-once: its offset commit is asynchronous).
    commit_s: float = 0.0
    #: At-least-once: offset commits done, and those the broker refused (e.g. during
    #: a rebalance; the messages were delivered, a restart would route them again).
    offset_commits: int = 0
    failed_commits: int = 0
    #: Exactly-once: transactions closed before their window because the router had
    #: caught up (``RouterConfig.batch_idle_ms``); counted when the commit starts.
    idle_closes: int = 0
    unknown_commits: int = 0
    unknown_messages: int = 0
    at_s: float = 0.0


def format_status(
    prev: RouterStats,
    cur: RouterStats,
    assigned_partitions: int,
    guarantee: str = "exactly-once",
) -> str:
    """``router: routed 1200 (+240.0/s) dlq 3 (+0.0/s) ...`` — one line, grep-friendly."""
    dt = cur.at_s - prev.at_s
    rate = (lambda a, b: (b - a) / dt) if dt > 0 else (lambda a, b: 0.0)
    commits = (
        f"txns {cur.transactions} aborts {cur.aborts} "
        if guarantee == "exactly-once"
        else f"offset-commits {cur.offset_commits} failed {cur.failed_commits} "
    )
    return (
        f"router: routed {cur.routed} (+{rate(prev.routed, cur.routed):.1f}/s) "
        f"dlq {cur.dead_lettered} (+{rate(prev.dead_lettered, cur.dead_lettered):.1f}/s) "
        f"{commits}"
        f"commit-wait {cur.commit_s - prev.commit_s:.2f}s "
        f"announcements {cur.announcements} rebalances {cur.rebalances} "
        f"partitions {assigned_partitions}"
    )


__all__ = ["RouterStats", "format_status"]
