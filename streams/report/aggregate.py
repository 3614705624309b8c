"""Pure aggregation for analyst reports: events and detections in, plain data out.

:func:`aggregate` takes :class:`~streams.core.events.TraceEvent` values (any
number of sessions, interleaved or not) and the detection records of
:class:`~streams.importers.offline.OfflineAnalyzer` (``kind`` = ``pattern`` |
``assessment``) and returns one JSON-ready ``dict``: what ``--json`` writes and
what :mod:`streams.report.html` draws.  No I/O, no clock: the same input gives
the same output.

Definitions (the tests compute these by hand):

* A *tool call* is a ``tool_call`` event.  Its result is the ``tool_result`` (or
  ``error``) with the same ``call_id``; a result without ``call_id`` completes
  the session's most recent open call.  A call never answered counts as a
  success with no latency (the core's rule).  ``success`` is ``not is_error``
  (an ``error`` event as result is a failure).
* *Latency* of a call: the result's ``latency_ms`` when given, else result time
  minus call time.  ``p95`` is the nearest-rank percentile: the
  ``ceil(0.95 * n)``-th smallest value.
* *Error signatures*: :func:`streams.core.similarity.normalize_error` of the
  error message of every failed result and every agent-level ``error`` event.
* *N-grams*: contiguous runs of ``n`` tool names within one session (n = 2..4),
  counted over all sessions; the top :data:`TOP_NGRAMS` per n, ties broken by
  the sequence's text so the order is stable.
* *Budget burn*: per session, cumulative ``input_tokens + output_tokens`` of
  the events over event time; a ``budget`` event's ``tokens_used`` raises the
  running total when it is higher (the agent's own accounting wins).
* *Severity over time*: per session, the severity of each event-made
  assessment at its time (the fleet view's swimlanes).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from streams.core.assessment import SEVERITIES
from streams.core.events import TraceEvent
from streams.core.similarity import normalize_error

TOP_NGRAMS: Final = 10
TOP_ERRORS: Final = 20
NGRAM_SIZES: Final[tuple[int, ...]] = (2, 3, 4)
#: Buckets of the patterns-over-time histogram.
TIME_BUCKETS: Final = 24


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (``ceil(0.95 n)``-th smallest); needs values."""
    ordered = sorted(values)
    rank = math.ceil(0.95 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass
class _Call:
    call_index: int
    tool: str
    timestamp_ms: int
    call_id: str | None
    success: bool = True
    latency_ms: int | None = None
    error: str | None = None
    answered: bool = False


@dataclass
class _Session:
    session_id: str
    first_ms: int
    last_ms: int
    agent_id: str | None = None
    events: int = 0
    calls: list[_Call] = field(default_factory=list)
    open_calls: dict[str, _Call] = field(default_factory=dict)
    last_open: list[_Call] = field(default_factory=list)
    agent_errors: list[str] = field(default_factory=list)
    tokens: int = 0
    burn: list[tuple[int, int]] = field(default_factory=list)
    max_tokens: int | None = None


def _result(sess: _Session, ev: TraceEvent) -> _Call | None:
    call = sess.open_calls.pop(ev.call_id, None) if ev.call_id is not None else None
    if call is None and ev.call_id is None:
        while sess.last_open and sess.last_open[-1].answered:
            sess.last_open.pop()
        call = sess.last_open.pop() if sess.last_open else None
        if call is not None and call.call_id is not None:
            sess.open_calls.pop(call.call_id, None)
    if call is None or call.answered:
        return None
    call.answered = True
    call.success = not (ev.is_error or ev.type == "error")
    call.error = ev.error_message if not call.success else None
    call.latency_ms = (
        ev.latency_ms if ev.latency_ms is not None else max(0, ev.timestamp_ms - call.timestamp_ms)
    )
    return call


def _sessions(events: Iterable[TraceEvent]) -> dict[str, _Session]:
    sessions: dict[str, _Session] = {}
    for ev in events:
        sess = sessions.get(ev.session_id)
        if sess is None:
            sess = sessions[ev.session_id] = _Session(
                ev.session_id, ev.timestamp_ms, ev.timestamp_ms
            )
        sess.events += 1
        sess.first_ms = min(sess.first_ms, ev.timestamp_ms)
        sess.last_ms = max(sess.last_ms, ev.timestamp_ms)
        if sess.agent_id is None and ev.agent_id:
            sess.agent_id = ev.agent_id
        if ev.type == "tool_call":
            call = _Call(len(sess.calls) + 1, ev.tool_name or "?", ev.timestamp_ms, ev.call_id)
            sess.calls.append(call)
            if ev.call_id is not None:
                sess.open_calls[ev.call_id] = call
            sess.last_open.append(call)
        elif ev.type == "tool_result":
            _result(sess, ev)
        elif ev.type == "error":
            done = _result(sess, ev) if ev.call_id is not None else None
            if done is None:  # agent-level, or the failed result of an unknown call
                sess.agent_errors.append(ev.error_message or ev.text or "")
        tokens = ev.total_tokens
        reported = ev.budget.tokens_used if ev.budget is not None else None
        if ev.budget is not None and ev.budget.max_tokens is not None:
            sess.max_tokens = ev.budget.max_tokens
        if tokens or (reported is not None and reported > sess.tokens):
            sess.tokens += tokens
            if reported is not None and reported > sess.tokens:
                sess.tokens = reported
            sess.burn.append((ev.timestamp_ms, sess.tokens))
    return sessions


def _ngrams(sessions: Mapping[str, _Session]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for n in NGRAM_SIZES:
        counts: Counter[tuple[str, ...]] = Counter()
        for sess in sessions.values():
            tools = [c.tool for c in sess.calls]
            for i in range(len(tools) - n + 1):
                counts[tuple(tools[i : i + n])] += 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], " > ".join(kv[0])))[:TOP_NGRAMS]
        out[str(n)] = [{"sequence": list(seq), "count": c} for seq, c in top]
    return out


def _buckets(lo: int, hi: int, detections: list[dict[str, Any]]) -> dict[str, Any]:
    span = max(1, hi - lo)
    width = max(1, math.ceil(span / TIME_BUCKETS))
    types = sorted({d["pattern_type"] for d in detections})
    rows = [
        {"start_ms": lo + i * width, "counts": dict.fromkeys(types, 0)} for i in range(TIME_BUCKETS)
    ]
    for d in detections:
        i = min(TIME_BUCKETS - 1, (d["timestamp_ms"] - lo) // width)
        rows[i]["counts"][d["pattern_type"]] += 1
    return {"bucket_ms": width, "pattern_types": types, "buckets": rows}


def aggregate(
    events: Iterable[TraceEvent], detections: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The report's data (see the module docstring for every definition)."""
    sessions = _sessions(events)
    patterns: list[dict[str, Any]] = []
    assessments: dict[str, list[dict[str, Any]]] = {}
    for r in detections:
        sid = r["session_id"]
        if r["kind"] == "pattern":
            patterns.append(
                {
                    "session_id": sid,
                    "timestamp_ms": r["timestamp_ms"],
                    "call_index": r["call_index"],
                    "pattern_type": r["pattern_type"],
                    "severity": r["severity"],
                    "confidence": r["confidence"],
                }
            )
        elif r["kind"] == "assessment":
            lane = assessments.setdefault(sid, [])
            point = {"timestamp_ms": r["timestamp_ms"], "severity": r["severity"]}
            if lane and lane[-1]["timestamp_ms"] == point["timestamp_ms"]:
                # several observers on one event: the lane shows the worst
                if SEVERITIES.index(point["severity"]) > SEVERITIES.index(lane[-1]["severity"]):
                    lane[-1] = point
            else:
                lane.append(point)

    calls = [c for s in sessions.values() for c in s.calls]
    tool_counts: Counter[str] = Counter(c.tool for c in calls)
    tool_errors: Counter[str] = Counter(c.tool for c in calls if not c.success)
    tool_frequency = [
        {
            "tool": tool,
            "calls": n,
            "errors": tool_errors[tool],
            "error_rate": tool_errors[tool] / n,
        }
        for tool, n in sorted(tool_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]

    sig_counts: Counter[str] = Counter()
    sig_tools: dict[str, set[str]] = {}
    sig_example: dict[str, str] = {}
    for s in sessions.values():
        failures = [(c.tool, c.error or "") for c in s.calls if not c.success]
        failures += [("(agent)", m) for m in s.agent_errors]
        for tool, message in failures:
            sig = normalize_error(message)
            sig_counts[sig] += 1
            sig_tools.setdefault(sig, set()).add(tool)
            sig_example.setdefault(sig, message)
    error_signatures = [
        {"signature": sig, "count": n, "tools": sorted(sig_tools[sig]), "example": sig_example[sig]}
        for sig, n in sorted(sig_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_ERRORS]
    ]

    lat: dict[str, list[int]] = {}
    for c in calls:
        if c.latency_ms is not None:
            lat.setdefault(c.tool, []).append(c.latency_ms)
    latency = [
        {
            "tool": tool,
            "count": len(vals),
            "mean_ms": sum(vals) / len(vals),
            "min_ms": min(vals),
            "max_ms": max(vals),
            "p95_ms": p95(vals),
        }
        for tool, vals in sorted(lat.items())
    ]

    lo = min((s.first_ms for s in sessions.values()), default=0)
    hi = max((s.last_ms for s in sessions.values()), default=0)
    patterns.sort(key=lambda p: (p["timestamp_ms"], p["session_id"]))
    session_rows = []
    for sid in sorted(sessions):
        s = sessions[sid]
        lane = assessments.get(sid, [])
        worst = "none"
        for point in lane:
            if worst == "none" or SEVERITIES.index(point["severity"]) > SEVERITIES.index(worst):
                worst = point["severity"]
        session_rows.append(
            {
                "session_id": sid,
                "agent_id": s.agent_id,
                "start_ms": s.first_ms,
                "end_ms": s.last_ms,
                "events": s.events,
                "tool_calls": [
                    {
                        "call_index": c.call_index,
                        "tool": c.tool,
                        "timestamp_ms": c.timestamp_ms,
                        "success": c.success,
                        "latency_ms": c.latency_ms,
                    }
                    for c in s.calls
                ],
                "detections": [p for p in patterns if p["session_id"] == sid],
                "severity_over_time": lane,
                "max_severity": worst,
                "tokens": s.tokens,
                "max_tokens": s.max_tokens,
                "budget_burn": [list(point) for point in s.burn],
            }
        )
    return {
        "summary": {
            "sessions": len(sessions),
            "events": sum(s.events for s in sessions.values()),
            "tool_calls": len(calls),
            "failed_tool_calls": sum(1 for c in calls if not c.success),
            "pattern_detections": len(patterns),
            "start_ms": lo,
            "end_ms": hi,
        },
        "tool_frequency": tool_frequency,
        "error_signatures": error_signatures,
        "ngrams": _ngrams(sessions),
        "latency": latency,
        "patterns": patterns,
        "patterns_over_time": _buckets(lo, hi, patterns),
        "sessions": session_rows,
    }


__all__ = ["NGRAM_SIZES", "SEVERITIES", "TIME_BUCKETS", "TOP_NGRAMS", "aggregate", "p95"]
