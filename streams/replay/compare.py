"""``replay --compare-live``: outputs *and* table state of the live pipeline versus a replay.

The verdict a script (the chaos suite, CI) can rely on: :func:`compare_live`
reads the recorded events, replays them through the core (outputs) and through
the worker's own table code (state, :mod:`streams.replay.state`), reads the live
outputs (``<prefix>.patterns``, ``<prefix>.assessment-history`` or
``.assessments``) and the worker's changelog topics, and returns a
:class:`CompareReport`.  ``report.ok`` is True when nothing differs; allowed
repeats (docs/guarantees.md: after a crash an output may be published again,
identical) are counted, never differences; timer assessments are ignored.

The live side is a snapshot: call it when the worker has caught up and
committed (the changelogs are written at each commit, every
``--commit-interval``), e.g. after a last event of every session was applied.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from streams.replay.reader import DecodeFailure
from streams.replay.replay import LiveDiff, ReplayResult, diff_live, read_live, replay_events
from streams.replay.state import TABLES, StateDiff, StateReplay, diff_tables, read_changelogs

if TYPE_CHECKING:
    from streams.core.config import EngineConfig

#: Difference lines :meth:`CompareReport.render` prints per kind (JSON has all).
RENDER_LIMIT = 200


@dataclass
class CompareReport:
    """Outputs diff + table state diff; ``ok`` when neither found a difference.

    ``state`` is None when the state was not compared (``state_note`` says why:
    a ``--from``/``--to`` slice, whose replay cannot equal tables built from the
    whole history, or no worker changelog exists for the prefix); with
    ``state_required`` that is not clean.  Records in range the replay could not
    use (undecodable, or refused as live ingest refuses them) are matched against
    ``<prefix>.dlq`` by their source coordinates (:meth:`note_unreplayed`):
    ``dead_lettered`` ones were dead-lettered live too, so both sides agree;
    ``undecodable`` ones are not in the DLQ, so live may have done something the
    replay could not: the verdict is not clean.
    """

    outputs: LiveDiff
    state: StateDiff | None = None
    state_note: str | None = None
    undecodable: int = 0
    dead_lettered: int = 0
    notes: list[str] = field(default_factory=list)
    state_required: bool = False

    @property
    def sessions(self) -> int:
        return self.outputs.sessions

    @property
    def state_differences(self) -> int:
        return len(self.state.differences) if self.state is not None else 0

    @property
    def output_differences(self) -> int:
        return len(self.outputs.differences)

    @property
    def allowed_repeats(self) -> int:
        return self.outputs.allowed_repeats

    @property
    def timer_assessments_ignored(self) -> int:
        return self.outputs.timer_assessments_ignored

    @property
    def ok(self) -> bool:
        if self.state is None and self.state_required:
            return False
        return not (self.state_differences or self.output_differences or self.undecodable)

    def note_unreplayed(
        self, failures: Sequence[DecodeFailure], dead_letters: set[tuple[str, int, int]]
    ) -> None:
        """Split the records the replay could not use into dead-lettered-live-too
        (consistent) and the rest (a difference: listed in ``notes``)."""
        missing = [f for f in failures if (f.topic, f.partition, f.offset) not in dead_letters]
        self.dead_lettered = len(failures) - len(missing)
        self.undecodable = len(missing)
        for f in missing[:RENDER_LIMIT]:
            self.notes.append(f"not replayed and not in the DLQ: {f.describe()}")

    def summary(self) -> str:
        """One ``key=value`` line for scripts (``compare-live:`` prefix, verdict last)."""
        state = "compared" if self.state is not None else "skipped"
        return (
            f"compare-live: sessions={self.sessions} state={state} "
            f"state_differences={self.state_differences} "
            f"output_differences={self.output_differences} "
            f"allowed_repeats={self.allowed_repeats} "
            f"timer_assessments_ignored={self.timer_assessments_ignored} "
            f"dead_lettered={self.dead_lettered} "
            f"undecodable={self.undecodable} "
            f"verdict={'clean' if self.ok else 'differences'}"
        )

    def render(self) -> str:
        lines = [_limited(self.outputs.render())]
        for r in self.outputs.repeats[:RENDER_LIMIT]:
            lines.append(f"  allowed repeat: {r}")
        s = self.state
        if s is None:
            required = " and required: not clean" if self.state_required else ""
            lines.append(f"table state: not compared ({self.state_note}){required}")
        else:
            head = (
                f"table state: compared {s.values_compared} value(s) of {s.sessions} "
                f"session(s) ({s.timer_sessions} with timer assessments: their timer-made "
                "engine fields skipped)"
            )
            if s.ok:
                lines.append(head + ": identical")
            else:
                lines.append(head + f": {len(s.differences)} difference(s)")
                lines += [f"  {d.describe()}" for d in s.differences[:RENDER_LIMIT]]
                if len(s.differences) > RENDER_LIMIT:
                    lines.append(f"  ... and {len(s.differences) - RENDER_LIMIT} more (see --json)")
                behind = s.behind()
                if behind:
                    lines.append(
                        f"  {len(behind)} session(s) with live tables behind the replay "
                        f"(live last_seq lower: {', '.join(behind[:5])}"
                        f"{', ...' if len(behind) > 5 else ''}): a running worker writes a "
                        "changed session about --engine-flush-interval (default 30 s) after "
                        "the change; compare again once its /stats says engines_waiting 0, "
                        "or after stopping it (docs/replay.md)"
                    )
        lines += [f"note: {n}" for n in self.notes]
        lines.append(self.summary())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        s = self.state
        return {
            "ok": self.ok,
            "sessions": self.sessions,
            "state_compared": s is not None,
            "state_note": self.state_note,
            "state_required": self.state_required,
            "state_differences": self.state_differences,
            "output_differences": self.output_differences,
            "allowed_repeats": self.allowed_repeats,
            "timer_assessments_ignored": self.timer_assessments_ignored,
            "undecodable": self.undecodable,
            "dead_lettered": self.dead_lettered,
            "patterns_compared": self.outputs.patterns_compared,
            "assessments_compared": self.outputs.assessments_compared,
            "state_values_compared": s.values_compared if s is not None else 0,
            "timer_sessions": s.timer_sessions if s is not None else 0,
            "differences": {
                "outputs": list(self.outputs.differences),
                "state": [
                    {
                        "session_id": d.session_id,
                        "table": d.table,
                        "key": d.key,
                        "field": d.field,
                        "live": d.live,
                        "replay": d.replay,
                        "text": d.describe(),
                    }
                    for d in (s.differences if s is not None else [])
                ],
            },
            "repeats": list(self.outputs.repeats),
            "notes": list(self.notes),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False)


def _limited(text: str) -> str:
    lines = text.split("\n")
    if len(lines) <= RENDER_LIMIT + 1:
        return text
    return "\n".join(
        [*lines[: RENDER_LIMIT + 1], f"  ... and {len(lines) - RENDER_LIMIT - 1} more"]
    )


def compare_replay(
    prefix: str,
    result: ReplayResult,
    state: StateReplay | None,
    *,
    bootstrap: str,
    timeout_s: float = 30.0,
    state_note: str | None = None,
    require_state: bool = False,
) -> CompareReport:
    """Compare an already-run replay (outputs ``result``, tables ``state``) with live.

    ``state=None`` skips the table comparison (``state_note`` says why).  When no
    changelog topic of the prefix exists (no worker ever ran: e.g. outputs written
    by hand) the state is not compared either; ``require_state=True`` makes any
    skipped state comparison a failed verdict.
    """
    patterns, assessments, complete = read_live(bootstrap, prefix, timeout_s=timeout_s)
    report = CompareReport(
        diff_live(result, patterns, assessments, complete=complete), state_required=require_state
    )
    if not complete:
        report.notes.append(
            f"{prefix}.assessment-history does not exist: compared the compacted "
            f"{prefix}.assessments (older assessments may be compacted away)"
        )
    if state is None:
        report.state_note = state_note or "not asked for"
        return report
    live, missing = read_changelogs(
        bootstrap, prefix, session_ids=result.sessions, timeout_s=timeout_s
    )
    if len(missing) == len(TABLES):
        report.state_note = f"no worker changelog topic for prefix {prefix!r} ({missing[0]}, ...)"
        return report
    tables = list(TABLES)
    for topic in missing:
        if topic.endswith("-engines-changelog"):
            tables.remove("engines")
            report.notes.append(f"{topic} does not exist (worker without engine?): not compared")
        else:
            report.notes.append(f"{topic} does not exist: every replayed value counts as missing")
    if state.rejected:
        report.notes.append(
            f"{len(state.rejected)} event(s) rejected by the engine in the replay "
            "(the worker dead-letters them)"
        )
    timer_sessions = {a.session_id for a in assessments if a.trigger == "timer"}
    report.state = diff_tables(
        live, state.tables(), result.sessions, timer_sessions=timer_sessions, tables=tables
    )
    return report


def compare_live(
    bootstrap: str,
    prefix: str,
    *,
    sessions: str | None = "*",
    session: str | None = None,
    source: Literal["sessions", "events"] = "sessions",
    config: EngineConfig | None = None,
    compare_state: bool = True,
    require_state: bool = True,
    strict: bool = False,
    timeout_s: float = 30.0,
) -> CompareReport:
    """Replay ``sessions`` (an fnmatch glob over ids; or one ``session``) of ``prefix``
    from their session topics (or ``source="events"``) and compare outputs and table
    state with the live pipeline.  ``config`` must be the worker's engine config.

    The Python entry point of ``trajectory replay --compare-live`` (the chaos suite
    calls it): ``report.ok``, ``report.summary()``, ``report.to_json()``.
    ``require_state`` (default True here, unlike the CLI's ``--require-state``):
    a state comparison that could not run (no changelog topic) is not clean.
    """
    from streams.replay.reader import open_event_reader

    reader = open_event_reader(
        bootstrap,
        prefix,
        session=session,
        sessions=None if session is not None else sessions,
        source=source,
        strict=strict,
        timeout_s=timeout_s,
    )
    state = StateReplay(config) if compare_state else None
    result = replay_events(reader, config, state=state, keep_records=False)
    report = compare_replay(
        prefix,
        result,
        state,
        bootstrap=bootstrap,
        timeout_s=timeout_s,
        state_note="not asked for",
        require_state=require_state and compare_state,
    )
    if reader.stats.failures:
        report.note_unreplayed(
            reader.stats.failures, read_dead_letters(bootstrap, prefix, timeout_s=timeout_s)
        )
    return report


def read_dead_letters(
    bootstrap: str, prefix: str, *, timeout_s: float = 30.0
) -> set[tuple[str, int, int]]:
    """Source coordinates ``(topic, partition, offset)`` of every record in
    ``<prefix>.dlq`` (the ``dlq.source.*`` headers the router and the worker set);
    empty when the topic does not exist."""
    import time
    import uuid

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from streams.router.validate import (
        DLQ_SOURCE_OFFSET,
        DLQ_SOURCE_PARTITION,
        DLQ_SOURCE_TOPIC,
    )
    from streams.security import client_config

    topic = f"{prefix}.dlq"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"trajectory-compare-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **client_config(None),
        }
    )
    found: set[tuple[str, int, int]] = set()
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return found
        ends = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
        if not ends:
            return found
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + timeout_s
        pending = set(ends)
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    continue
                # consumed headers are (str, bytes | None) pairs; the type also allows str/dict
                raw = msg.headers() or []
                pairs = raw.items() if isinstance(raw, dict) else raw
                headers = {k: v.encode() if isinstance(v, str) else (v or b"") for k, v in pairs}
                src = headers.get(DLQ_SOURCE_TOPIC)
                part = headers.get(DLQ_SOURCE_PARTITION, b"")
                off = headers.get(DLQ_SOURCE_OFFSET, b"")
                # a dead letter without coordinates matches no replayed record
                if src is not None and part.isdigit() and off.isdigit():
                    found.add((src.decode("utf-8", "replace"), int(part), int(off)))
                offset = msg.offset()
                if offset is not None and offset >= ends[msg.partition()] - 1:
                    pending.discard(msg.partition())
    finally:
        consumer.close()
    return found


__all__ = [
    "RENDER_LIMIT",
    "CompareReport",
    "compare_live",
    "compare_replay",
    "read_dead_letters",
]
