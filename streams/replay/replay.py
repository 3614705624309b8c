"""Re-run the detector core over recorded events and compare with what went live.

:func:`replay_events` feeds events through
:class:`~streams.importers.offline.OfflineAnalyzer` (the one offline engine loop;
the live worker runs the same :class:`~streams.core.engine.SessionEngine`) and
keeps, per session, the plain records ``trajectory analyze --json`` prints and
the wire values (:class:`~streams.serde.PatternRecord`,
:class:`~streams.serde.AssessmentWire`) the worker writes to ``<prefix>.patterns``
and ``<prefix>.assessments``.

Output order is deterministic whatever topic the events came from: sessions in
sorted id order, each session's records in event order.  Reading per-session
topics or the partitioned ``<prefix>.events`` therefore gives the same lines.

Timer assessments (``trigger == "timer"``: every_n_seconds / deadline) depend on
when a wall-clock timer ran, not on the events, so they are never replayed and
:func:`compare_with_live` ignores them.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeVar

from streams.core.config import EngineConfig
from streams.core.events import TraceEvent
from streams.errors import ConfigError, InvalidEventError
from streams.importers.offline import OfflineAnalyzer
from streams.router.validate import event_error
from streams.security import SecurityConfig
from streams.serde import AssessmentSerde, AssessmentWire, PatternRecord, PatternSerde

if TYPE_CHECKING:
    from streams.replay.state import StateReplay


def pattern_wire(det: Any, severity: str | None, event: TraceEvent) -> PatternRecord:
    """The ``<prefix>.patterns`` value of one :class:`PatternDetection`.

    ``details`` is left empty: detector-specific fields are not part of the
    replay contract (the compared fields are listed in :data:`PATTERN_FIELDS`).
    """
    p = det.pattern
    return PatternRecord(
        session_id=det.session_id,
        seq=det.seq,
        timestamp_ms=det.timestamp_ms,
        pattern_type=str(p.pattern_type),
        call_index=det.call_index,
        confidence=float(p.confidence),
        severity=severity,
        evidence=tuple(p.evidence),
        occurrences=int(p.occurrences),
        first_seen_ms=getattr(p, "first_seen_ms", None),
        parent_session_id=event.parent_session_id,
        agent_id=event.agent_id,
    )


def assessment_wire(current: Any, event: TraceEvent) -> AssessmentWire:
    """The ``<prefix>.assessments`` value of an event-made :class:`CurrentAssessment`."""
    return AssessmentWire(
        session_id=current.session_id or event.session_id,
        seq=current.seq,
        timestamp_ms=current.generated_at_ms,
        trigger=current.trigger,
        call_index=current.call_index,
        max_severity=current.severity,
        rendered=current.render(),
        assessments=[
            {"observer": a.observer_name, "severity": a.severity, "summary": a.summary}
            for a in current.assessments
        ],
        parent_session_id=event.parent_session_id,
        agent_id=event.agent_id,
    )


#: PatternRecord fields a replay must reproduce exactly.
PATTERN_FIELDS: tuple[str, ...] = (
    "session_id",
    "seq",
    "call_index",
    "timestamp_ms",
    "pattern_type",
    "confidence",
    "severity",
    "evidence",
    "occurrences",
)


@dataclass
class SessionReplay:
    """Everything one session's replay produced, in event order."""

    session_id: str
    events: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    patterns: list[PatternRecord] = field(default_factory=list)
    assessments: list[AssessmentWire] = field(default_factory=list)
    #: Filled when the replay ends: tool calls seen, severity of the last assessment.
    tool_calls: int = 0
    final_severity: str | None = None


@dataclass
class ReplayResult:
    """A whole replay: per-session results, plus the analyzer (final engine states)
    when it ran in this process (None for a merged parallel replay)."""

    analyzer: OfflineAnalyzer | None
    sessions: dict[str, SessionReplay] = field(default_factory=dict)
    #: Events the engine rejected (``InvalidEventError``), skipped as the worker
    #: dead-letters them: (session id, seq, reason).
    rejected: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.sessions.values())

    def ordered(self) -> list[SessionReplay]:
        return [self.sessions[k] for k in sorted(self.sessions)]

    def records(self) -> Iterator[dict[str, Any]]:
        """``trajectory analyze --json`` records: sessions sorted, event order within."""
        for s in self.ordered():
            yield from s.records


def replay_events(
    events: Iterable[TraceEvent],
    config: EngineConfig | None = None,
    *,
    on_event: Any = None,
    state: StateReplay | None = None,
    keep_records: bool = True,
    into: ReplayResult | None = None,
    prechecked: bool = False,
) -> ReplayResult:
    """Run the core over ``events`` (sessions may interleave); see the module doc.

    ``on_event`` (optional) is called with no argument after each event: the
    progress bar's hook.  An event the engine rejects (``InvalidEventError``, e.g.
    a ``restore`` of an unknown snapshot) changes nothing and is recorded in
    ``result.rejected``: the worker dead-letters it and carries on, so does this.

    ``state`` (``--compare-live``): a :class:`~streams.replay.state.StateReplay`
    that rebuilds the worker's tables from the same events.  Its processor runs
    the one engine per session and the outputs are taken from that run, so the
    engine runs once per event, not twice.  Invariant: the outputs are the same as
    without ``state`` for every event the worker would apply; an event the worker
    dead-letters (refused by ``event_error``, or by the processor's
    ``check_storable`` / engine validation) changes neither the outputs nor the
    tables, exactly as live.

    ``keep_records=False`` leaves every ``SessionReplay.records`` empty (the
    ``analyze --json`` dicts: only ``--output jsonl`` prints them); patterns,
    assessments and everything else are unchanged.

    ``into`` (optional): an empty :class:`ReplayResult` to fill (and return)
    instead of a new one, so a hook called while the replay runs can read what is
    done so far (a parallel worker ships its outputs in chunks that way).  Between
    two events every session's lists hold exactly the outputs of the events seen;
    ``tool_calls`` and ``final_severity`` are filled at the end.

    ``prechecked=True``: every event already passed the router's ``event_error``
    against its own session id (the reader's :class:`~streams.replay.reader.IngestCheck`
    does that for a session topic or ``<prefix>.events``, see its ``covers``), so
    the same check is not run a second time (~0.3 us per event).
    """
    if into is not None and (into.sessions or into.rejected):
        raise ConfigError("into", "the result to fill must be empty: pass ReplayResult(None)")
    with _young_collections_batched():
        return _replay(events, config, on_event, state, keep_records, into, prechecked)


#: Allocations between two young-generation collections during a replay (CPython's
#: default is 700).  A replay allocates a few short-lived containers per event
#: (decoded record, event, engine output) and keeps few of them: collecting every
#: 700 allocations walks the same young objects over and over, ~5 % of a replay's
#: CPU.  Cycles are still collected, just in bigger batches.
REPLAY_GC_THRESHOLD0: int = 50_000


@contextmanager
def _young_collections_batched() -> Iterator[None]:
    """Raise the young-generation threshold for the duration, then restore it
    (also on error; gc stays enabled throughout)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], REPLAY_GC_THRESHOLD0), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _replay(
    events: Iterable[TraceEvent],
    config: EngineConfig | None,
    on_event: Any,
    state: StateReplay | None,
    keep_records: bool,
    into: ReplayResult | None = None,
    prechecked: bool = False,
) -> ReplayResult:
    analyzer = OfflineAnalyzer(config if state is None else state.config)
    result = ReplayResult(None) if into is None else into
    result.analyzer = analyzer if state is None else None
    sessions = result.sessions
    pattern_severity = analyzer._policy.pattern_severity
    rejected = result.rejected
    records_of = analyzer.records
    # per session: its SessionReplay, the output lists, and what runs its events
    # (its engine's on_event, or the state replay's run), looked up once per
    # session instead of ~5 lookups per event.  The engine is still created at
    # the session's first event that reaches it, as ``analyzer.engine`` did per event
    seen: dict[str, list[Any]] = {}
    run: Callable[[TraceEvent], Any] | None
    for event in events:
        sid = event.session_id
        entry = seen.get(sid)
        if entry is None:
            sr = sessions.get(sid)
            if sr is None:
                sr = sessions[sid] = SessionReplay(sid)
            run = None if state is None else state.run
            entry = seen[sid] = [sr, sr.patterns, sr.assessments, run]
        sr, patterns, assessments, run = entry
        sr.events += 1
        if not prechecked:
            refused = event_error(event, sid, "")
            if refused is not None:
                # what the worker dead-letters (the router forwards it since "decode once")
                rejected.append((sid, event.seq, str(refused)))
                if state is not None:
                    state.refuse(event, str(refused))
                if on_event is not None:
                    on_event()
                continue
        if run is None:
            run = analyzer.engine(sid).on_event
            entry[3] = run
        try:
            out = run(event)
        except InvalidEventError as exc:
            rejected.append((sid, event.seq, str(exc)))
            if on_event is not None:
                on_event()
            continue
        assessment = out.assessment
        if out.patterns or assessment is not None:
            if keep_records:
                sr.records.extend(records_of(event, out))
            for det in out.patterns:
                patterns.append(pattern_wire(det, pattern_severity(det.pattern), event))
            if assessment is not None and assessment.assessments:
                assessments.append(assessment_wire(assessment, event))
        if on_event is not None:
            on_event()
    for sid, sr in sessions.items():
        if state is None:
            sr.tool_calls = analyzer.engine(sid).analysis().tool_call_count
            final = analyzer.final(sid)
        else:
            sr.tool_calls, final = state.final(sid)
        sr.final_severity = final.severity if final is not None and final.assessments else None
    return result


def write_jsonl(result: ReplayResult, out: IO[str]) -> int:
    """Write the records exactly as ``trajectory analyze --json`` does; count them."""
    n = 0
    for record in result.records():
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        n += 1
    return n


#: Top-level schema of the replay's Avro container file: one union of both records.
def avro_union_schema() -> list[dict[str, Any]]:
    from streams.serde import load_schema

    return [load_schema("pattern_detection"), load_schema("assessment_record")]


def write_avro(result: ReplayResult, path: str) -> int:
    """An Avro object container file of every pattern and assessment (union schema).

    Each datum is exactly the record the serde would put on the wire (same
    ``to_record``), so a value here equals the live topic's value for the same
    detection.  Read back with ``fastavro.reader(f, return_record_name=True)`` to
    tell ``io.trajectory.v1.PatternDetection`` from ``...AssessmentRecord``.
    """
    import fastavro

    pserde, aserde = PatternSerde(), AssessmentSerde()
    pname, aname = pserde.full_name, aserde.full_name
    schema = fastavro.parse_schema(avro_union_schema())

    def data() -> Iterator[tuple[str, dict[str, Any]]]:
        for s in result.ordered():
            # event order: patterns of an event come before its assessment
            items: list[tuple[int, int, tuple[str, dict[str, Any]]]] = []
            for p in s.patterns:
                items.append((p.seq, 0, (pname, pserde.to_record(p))))
            for a in s.assessments:
                items.append((a.seq, 1, (aname, aserde.to_record(a))))
            items.sort(key=lambda t: (t[0], t[1]))
            for _, _, item in items:
                yield item

    records = list(data())
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, records, codec="deflate")
    return len(records)


# --------------------------------------------------------------------------
# comparison with the live pipeline


@dataclass
class LiveDiff:
    """Result of :func:`diff_live`; ``ok`` when nothing differs.

    ``allowed_repeats`` counts live records that repeat, with identical content
    (every field of the wire value), a record already seen for the same key
    (patterns: session, seq, pattern_type; assessments: session, seq, trigger).
    docs/guarantees.md allows them after a crash, so they are not differences;
    ``repeats`` names them.  A repeat whose content differs is a difference.
    """

    sessions: int = 0
    patterns_compared: int = 0
    assessments_compared: int = 0
    timer_assessments_ignored: int = 0
    allowed_repeats: int = 0
    differences: list[str] = field(default_factory=list)
    repeats: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def render(self) -> str:
        head = (
            f"compared {self.sessions} session(s): {self.patterns_compared} pattern(s), "
            f"{self.assessments_compared} assessment(s) "
            f"({self.timer_assessments_ignored} timer assessment(s) ignored, "
            f"{self.allowed_repeats} allowed repeat(s))"
        )
        if self.ok:
            return head + ": identical"
        return (
            head
            + f": {len(self.differences)} difference(s)\n"
            + "\n".join(f"  {d}" for d in self.differences)
        )


def _pattern_key(p: PatternRecord) -> tuple[Any, ...]:
    return tuple(getattr(p, f) if f != "evidence" else tuple(p.evidence) for f in PATTERN_FIELDS)


_R = TypeVar("_R", PatternRecord, AssessmentWire)


def _distinct(
    records: Iterable[_R], key_of: Callable[[_R], tuple[Any, ...]], what: str, diff: LiveDiff
) -> dict[tuple[Any, ...], list[_R]]:
    """Live records grouped by key, first-seen order, without allowed repeats.

    A record equal in every field to one already kept for its key is an allowed
    repeat (counted in ``diff``, not kept); any other record is kept, so a repeat
    whose content differs stays and is reported by the caller.
    """
    groups: dict[tuple[Any, ...], list[_R]] = {}
    repeated: dict[tuple[Any, ...], int] = {}
    for r in records:
        key = key_of(r)
        kept = groups.setdefault(key, [])
        if r in kept:
            diff.allowed_repeats += 1
            repeated[key] = repeated.get(key, 0) + 1
            continue
        kept.append(r)
    for key, n in repeated.items():
        sid, seq, kind = key
        diff.repeats.append(f"{sid} {what} (seq {seq}, {kind}): {n} identical repeat(s)")
    return groups


def _p_key(p: PatternRecord) -> tuple[Any, ...]:
    return (p.session_id, p.seq, p.pattern_type)


def _a_key(a: AssessmentWire) -> tuple[Any, ...]:
    return (a.session_id, a.seq, a.trigger)


def diff_live(
    result: ReplayResult,
    live_patterns: Sequence[PatternRecord],
    live_assessments: Sequence[AssessmentWire],
    *,
    complete: bool = False,
) -> LiveDiff:
    """Diff live wire values against a replay, for the replay's sessions only.

    Allowed repeats first (see :class:`LiveDiff`): a live record equal to one
    already seen for its key is counted, not compared again.  Then, per key:

    * patterns (a plain topic: every detection stays), key (session, seq,
      pattern_type): the live records must match the replay's one for one on
      :data:`PATTERN_FIELDS`; a live record the replay lacks ("live only"), a
      replayed one missing live ("replay only") and a second, different live
      record for a key ("repeat with different content") are differences;
    * assessments, key (session, seq, trigger): every live ``event`` assessment
      must equal the replay's at the same ``seq`` (``rendered`` markdown and
      ``max_severity``), and a second, different one for a key is a difference.
      The replay's last assessment must be on the topic unless a later live record
      superseded it (the topic is compacted, so older ones may be gone: their
      absence is not a difference).  With ``complete=True`` (the live list is
      ``<prefix>.assessment-history``, which keeps every one) every replayed
      assessment must be live too.

    ``timer`` assessments are counted and ignored (they depend on wall time).
    """
    diff = LiveDiff(sessions=len(result.sessions))
    lp: dict[str, list[PatternRecord]] = {}
    for p in live_patterns:
        if p.session_id in result.sessions:
            lp.setdefault(p.session_id, []).append(p)
    la: dict[str, list[AssessmentWire]] = {}
    last_live_seq: dict[str, int] = {}
    for a in live_assessments:
        if a.session_id not in result.sessions:
            continue
        last_live_seq[a.session_id] = max(last_live_seq.get(a.session_id, -1), a.seq)
        if a.trigger == "timer":
            diff.timer_assessments_ignored += 1
            continue
        la.setdefault(a.session_id, []).append(a)
    for sr in result.ordered():
        sid = sr.session_id
        _diff_patterns(diff, sr, _distinct(lp.get(sid, []), _p_key, "pattern", diff))
        live_a = _distinct(la.get(sid, []), _a_key, "assessment", diff)
        by_seq = {a.seq: a for a in sr.assessments}
        seen: set[int] = set()
        for (_, seq, _), kept in live_a.items():
            seen.add(seq)
            for n, a in enumerate(kept):
                diff.assessments_compared += 1
                mine = by_seq.get(a.seq)
                if n > 0:
                    diff.differences.append(
                        f"{sid} assessment at seq {a.seq}: repeat with different content\n"
                        + _text_diff(kept[0].rendered, a.rendered, "first", "repeat")
                    )
                elif mine is None:
                    diff.differences.append(f"{sid} assessment at seq {a.seq}: live only")
                elif (mine.rendered, mine.max_severity) != (a.rendered, a.max_severity):
                    diff.differences.append(
                        f"{sid} assessment at seq {a.seq}: rendered markdown differs\n"
                        + _text_diff(mine.rendered, a.rendered)
                    )
        if complete:
            for mine in sr.assessments:
                if mine.seq not in seen:
                    diff.differences.append(f"{sid} assessment at seq {mine.seq}: replay only")
        elif sr.assessments:
            last = sr.assessments[-1]
            if last.seq not in seen and last_live_seq.get(sid, -1) <= last.seq:
                diff.differences.append(
                    f"{sid} assessment at seq {last.seq}: replay only (the live topic has no "
                    "later record for this session)"
                )
    return diff


def _diff_patterns(
    diff: LiveDiff, sr: SessionReplay, live: dict[tuple[Any, ...], list[PatternRecord]]
) -> None:
    """Patterns of one session, key by key (see :func:`diff_live`)."""
    sid = sr.session_id
    mine: dict[tuple[Any, ...], list[tuple[int, PatternRecord]]] = {}
    for i, p in enumerate(sr.patterns, 1):
        mine.setdefault(_p_key(p), []).append((i, p))
    for key in sorted(set(mine) | set(live), key=lambda k: (k[1], k[2])):
        r_list, l_list = mine.get(key, []), live.get(key, [])
        for n in range(max(len(r_list), len(l_list))):
            diff.patterns_compared += 1
            r = r_list[n] if n < len(r_list) else None
            v = l_list[n] if n < len(l_list) else None
            label = f"{sid} pattern #{r[0] if r else '-'} (seq {key[1]}, {key[2]})"
            if r is not None and v is not None:
                if _pattern_key(r[1]) != _pattern_key(v):
                    diff.differences.append(
                        f"{label}: replay {_short(_pattern_key(r[1]))} != "
                        f"live {_short(_pattern_key(v))}"
                    )
            elif r is not None:
                diff.differences.append(f"{label}: replay only, live (none)")
            elif v is not None and n > 0:
                diff.differences.append(
                    f"{label}: repeat with different content: live {_short(_pattern_key(v))} "
                    f"after {_short(_pattern_key(l_list[0]))}"
                )
            elif v is not None:
                diff.differences.append(f"{label}: live only {_short(_pattern_key(v))}")


def _short(key: tuple[Any, ...] | None) -> str:
    if key is None:
        return "(none)"
    d = dict(zip(PATTERN_FIELDS, key, strict=True))
    return json.dumps({k: d[k] for k in PATTERN_FIELDS if k != "evidence"}, default=str)


def _text_diff(a: str, b: str, name_a: str = "replay", name_b: str = "live") -> str:
    import difflib

    return "\n".join(
        "    " + line
        for line in difflib.unified_diff(
            a.splitlines(), b.splitlines(), name_a, name_b, lineterm="", n=1
        )
    )


def read_live(
    bootstrap: str,
    prefix: str,
    *,
    timeout_s: float = 30.0,
    strict: bool = True,
    security: SecurityConfig | None = None,
) -> tuple[list[PatternRecord], list[AssessmentWire], bool]:
    """Everything on ``<prefix>.patterns`` and the assessments topic right now.

    ``security``: the credential to read with (e.g. ``Settings().security``); None
    keeps the process-wide one (:func:`streams.security.current`).

    Assessments come from ``<prefix>.assessment-history`` (every one, the third
    value is then True) when that topic exists, else from the compacted
    ``<prefix>.assessments`` (False: older ones may have been compacted away).
    """
    from streams.replay.reader import TopicReader, cluster_topics

    history = f"{prefix}.assessment-history"
    existing = cluster_topics(bootstrap, security=security, timeout_s=timeout_s)
    complete = history in existing
    patterns = list(
        TopicReader(
            bootstrap,
            [f"{prefix}.patterns"],
            PatternSerde().decode,
            strict=strict,
            timeout_s=timeout_s,
            security=security,
        )
    )
    assessments = list(
        TopicReader(
            bootstrap,
            [history if complete else f"{prefix}.assessments"],
            AssessmentSerde().decode,
            strict=strict,
            timeout_s=timeout_s,
            security=security,
        )
    )
    return patterns, assessments, complete


def compare_with_live(
    prefix: str,
    result: ReplayResult,
    *,
    bootstrap: str,
    timeout_s: float = 30.0,
    security: SecurityConfig | None = None,
) -> LiveDiff:
    """Read the live outputs of ``prefix`` and diff them against ``result``."""
    patterns, assessments, complete = read_live(
        bootstrap, prefix, timeout_s=timeout_s, security=security
    )
    return diff_live(result, patterns, assessments, complete=complete)


__all__ = [
    "PATTERN_FIELDS",
    "LiveDiff",
    "ReplayResult",
    "SessionReplay",
    "assessment_wire",
    "avro_union_schema",
    "compare_with_live",
    "diff_live",
    "pattern_wire",
    "read_live",
    "replay_events",
    "write_avro",
    "write_jsonl",
]
