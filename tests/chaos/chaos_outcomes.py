"""The correctness outcomes issue #15 requires of a chaos run, as named checks.

Shared by the pytest tests (one assertion each) and bench_chaos.py (its exit
status), so both judge a run the same way.  Recovery *times* are figures, never
asserted (house rule: no timed assertions); only "it recovered at all" is.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos_driver import ChaosResult

Check = Callable[[ChaosResult], str | None]


def no_valid_event_lost(r: ChaosResult) -> str | None:
    if r.valid_published == 0:
        return "no valid event was published"
    return None if r.events_lost == 0 else f"{r.events_lost} valid events lost"


def no_session_regressed(r: ChaosResult) -> str | None:
    n = len(r.sessions_regressed)
    return (
        None if n == 0 else f"{n} sessions with regressed/short state: {r.sessions_regressed[:5]}"
    )


def no_conflicting_duplicates(r: ChaosResult) -> str | None:
    n = r.output_conflicting_duplicates
    return None if n == 0 else f"{n} repeated outputs whose content differs"


def every_malformed_input_dead_lettered(r: ChaosResult) -> str | None:
    if r.dlq_expected == 0:
        return "no input that must be dead-lettered was produced"
    if r.dlq_matched_with_reason == r.dlq_expected and r.dlq_conflicting_duplicates == 0:
        return None  # identical repeats (same dlq.source.*) are told apart: allowed
    return (
        f"{r.dlq_matched_with_reason}/{r.dlq_expected} in the DLQ with a reason "
        f"({100 * r.dlq_share:.1f}%), missing by class {r.dlq_missing_by_class}, "
        f"{r.dlq_conflicting_duplicates} inputs dead-lettered twice with differing content"
        + "".join(f"\n  {example}" for example in r.dlq_conflict_examples)
    )


def abuse_sessions_as_expected(r: ChaosResult) -> str | None:
    n = len(r.abuse_sessions_wrong)
    return None if n == 0 else f"{n} ooo/skew sessions wrong: {r.abuse_sessions_wrong[:4]}"


def processes_stay_up(r: ChaosResult) -> str | None:
    down = [k for k, up in r.processes_up_at_end.items() if not up]
    if not r.unexpected_exits and not down:
        return None
    return f"down at end: {down}; unexpected exits: {r.unexpected_exits[:4]}"


def every_kill_recovered(r: ChaosResult) -> str | None:
    bad = [f"#{k.index + 1} {k.target}" for k in r.kills if k.recovery_s is None]
    if r.config.broker_restart and r.router_recovery_after_broker_s is None:
        bad.append("router after the broker restart")
    if r.config.broker_restart and r.worker_recovery_after_broker_s is None:
        bad.append("worker after the broker restart")
    limit = r.config.recovery_timeout_s
    after_broker = r.config.broker_recovery_timeout_s
    return (
        None
        if not bad
        else f"no recovery within {limit:.0f}s ({after_broker:.0f}s after the broker): {bad}"
    )


def routing_never_stalled(r: ChaosResult) -> str | None:
    """Every kill's recovery is bounded, and so is every stretch without a routed event
    while the load ran (the broker outage aside): a router that lives but routes
    nothing is a failure too (2026-12-07: 57 s after it replaced its consumer)."""
    gap = r.longest_routing_gap
    limit = r.config.recovery_timeout_s
    if gap is None or gap[0] <= limit:
        return None
    return f"no routed event for {gap[0]:.0f}s from run second {gap[1]:.0f} (bound {limit:.0f}s)"


def compare_live_clean(r: ChaosResult) -> str | None:
    if r.compare_live_rc == 0:
        return None
    return f"replay --compare-live: {r.compare_live_verdict}"


def no_publish_errors(r: ChaosResult) -> str | None:
    return None if not r.publish_failures else f"publish errors: {r.publish_failures[:3]}"


OUTCOMES: dict[str, Check] = {
    "no_publish_errors": no_publish_errors,
    "no_valid_event_lost": no_valid_event_lost,
    "no_session_regressed": no_session_regressed,
    "no_conflicting_duplicates": no_conflicting_duplicates,
    "every_malformed_input_dead_lettered": every_malformed_input_dead_lettered,
    "abuse_sessions_as_expected": abuse_sessions_as_expected,
    "processes_stay_up": processes_stay_up,
    "every_kill_recovered": every_kill_recovered,
    "routing_never_stalled": routing_never_stalled,
    "compare_live_clean": compare_live_clean,
}


def failed_outcomes(r: ChaosResult) -> list[str]:
    return [f"{name}: {msg}" for name, check in OUTCOMES.items() if (msg := check(r))]
