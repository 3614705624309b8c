"""Table state of a replay versus the worker's live tables (``replay --compare-live``).

Why: comparing output topics cannot see a table value that went backwards (issue
#15: a session regressed from 503 applied events to 54 while every output already
on the topics stayed right).  The worker's tables are what a restarted worker
resumes from, so they must equal what the same events give when replayed.

* :class:`StateReplay` produces the replay's tables with the pure code the worker
  runs (:class:`~streams.worker.processor.EventProcessor` over dict tables: counters,
  budgets, minutes and the core engine), so both sides share one definition of
  "apply an event".  An event the engine rejects (``InvalidEventError``) is
  dead-lettered by the worker and changes nothing; here it is counted and skipped
  the same way.
* :func:`read_changelogs` reads the live side from the changelog topics
  (``<prefix>-observer-<table>-changelog``, :func:`streams.worker.faust_app.changelog_topic`):
  what survives a restart, not what one process holds in memory.  Latest value
  per key wins (offset order within a partition; a table key lives in one
  partition, the one its session's events arrive on).
* :func:`diff_tables` compares the two for the replayed sessions only and names
  each difference by session, table and field (``sim-3 sessions.last_seq: live
  54, replay 503``).

Engine state is compared on its canonical, *uncompressed* encoding
(:func:`~streams.core.statecodec.encode_state`; live values are deflated, and
:func:`~streams.core.statecodec.decode_state` reads both forms), field by field when
the bytes differ.  A timer-made assessment (deadline, every_n_seconds) changes
the engine's ``current``, ``history``, ``observer_states``,
``deadline_reported_ms``, its restore points and the builder's tool
``suggestions``: those depend on wall time, so for a session whose live outputs
hold a timer assessment they are not compared (:data:`TIMER_FIELDS`; the report
counts such sessions).

Invariants: nothing here imports Kafka at module level except inside
:func:`read_changelogs`; the live state is only read (no group, no commit).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Final

from streams.core.assessment import CurrentAssessment
from streams.core.config import EngineConfig
from streams.core.engine import EngineOutput
from streams.core.events import TraceEvent
from streams.core.statecodec import decode_state, encode_state, to_canonical
from streams.errors import InvalidEventError, StateDecodeError
from streams.worker.processor import EventProcessor, TableName
from streams.worker.state import BudgetState, MinuteCounts, SessionCounters

#: The worker's tables, in the order differences are reported.
TABLES: Final[tuple[TableName, ...]] = ("sessions", "budgets", "minutes", "engines")

#: Engine state fields a timer-made assessment changes (``analysis.suggestions``:
#: an assessment's suggested tools are noted by the builder).
TIMER_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "current",
        "history",
        "observer_states",
        "deadline_reported_ms",
        "snapshots",
        "analysis.suggestions",
    }
)

#: Raw table contents: table -> key bytes -> value bytes.
Tables = dict[str, dict[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class StateDifference:
    """One field of one table value that differs between live and replay."""

    session_id: str
    table: str
    #: Dotted field path (``last_seq``, ``analysis.window``); ``""`` for the whole value.
    field: str
    live: str
    replay: str
    #: The table key when it is not the session id (minutes: ``<sid>@<minute_ms>``).
    key: str | None = None

    def describe(self) -> str:
        where = self.table if self.key is None else f"{self.table}[{self.key}]"
        path = f"{where}.{self.field}" if self.field else where
        return f"{self.session_id} {path}: live {self.live}, replay {self.replay}"


class StateReplay:
    """The worker's tables rebuilt from events by :class:`EventProcessor` (dict tables).

    Feed every event of the replayed sessions, in order, with :meth:`apply`; then
    :meth:`tables` flushes and returns the encoded values, byte for byte what the
    worker writes to its changelogs (engine values deflated, as the worker does).
    """

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self._tables: Tables = {t: {} for t in TABLES}
        t = self._tables
        self.processor = EventProcessor(
            t["sessions"],
            t["budgets"],
            t["minutes"],
            t["engines"],
            self.config,
            # never evict: the tables are plain dicts and the replay is bounded
            max_sessions=1 << 62,
        )
        #: Events the engine rejected (the worker dead-letters them): (session, seq, reason).
        self.rejected: list[tuple[str, int, str]] = []
        self.events = 0

    def apply(self, event: TraceEvent) -> None:
        """Apply ``event``; one the engine rejects is recorded in ``rejected``."""
        # the worker's DLQ path: nothing changed, and run() recorded it in ``rejected``
        with contextlib.suppress(InvalidEventError):
            self.run(event)

    def run(self, event: TraceEvent) -> EngineOutput:
        """Apply ``event`` and return what the engine produced for it.

        :func:`streams.replay.replay.replay_events` takes its outputs from here, so
        a ``--compare-live`` replay runs the engine once per event.  Raises
        :class:`InvalidEventError` (after recording it in ``rejected``) when the
        worker would dead-letter the event; nothing changed then.
        """
        self.events += 1
        try:
            out = self.processor.apply(event).engine
        except InvalidEventError as exc:
            self.rejected.append((event.session_id, event.seq, str(exc)))
            raise
        assert out is not None  # the processor has an engines table
        return out

    def refuse(self, event: TraceEvent, reason: str) -> None:
        """Count an event refused before the processor (``event_error``): the worker
        dead-letters it, so it changes no table."""
        self.events += 1
        self.rejected.append((event.session_id, event.seq, reason))

    def final(self, session_id: str) -> tuple[int, CurrentAssessment | None]:
        """Tool calls seen and latest assessment of a session's engine (end of replay)."""
        state = self.processor.engine_state(session_id)
        return state.analysis.tool_call_count, state.current

    def feed(self, events: Iterable[TraceEvent]) -> Iterator[TraceEvent]:
        """Pass ``events`` through, applying each first (one read for replay and state)."""
        for event in events:
            self.apply(event)
            yield event

    def absorb(self, tables: Tables, rejected: list[tuple[str, int, str]], events: int) -> None:
        """Merge what another :class:`StateReplay` built (a ``--jobs`` worker's share).

        Table keys belong to one session each and a session is replayed by one
        worker, so a key present on both sides is an error, never overwritten.
        """
        for table, values in tables.items():
            mine = self._tables[table]
            for key, value in values.items():
                if key in mine:
                    raise ValueError(
                        f"table {table}: key {key!r} built by two replay workers (a session "
                        "read by two of them?)"
                    )
                mine[key] = value
        self.rejected.extend(rejected)
        self.events += events

    def tables(self) -> Tables:
        """Flush and return the tables (table -> key -> encoded value)."""
        self.processor.flush()
        return self._tables


def replay_state(events: Iterable[TraceEvent], config: EngineConfig | None = None) -> Tables:
    """The tables the worker would hold after ``events`` (see :class:`StateReplay`)."""
    state = StateReplay(config)
    for event in events:
        state.apply(event)
    return state.tables()


def read_changelogs(
    bootstrap: str,
    prefix: str,
    *,
    session_ids: Iterable[str] | None = None,
    timeout_s: float = 30.0,
) -> tuple[Tables, list[str]]:
    """The worker's live tables from its changelog topics, latest value per key.

    Returns ``(tables, missing)``: ``missing`` names the changelog topics that do
    not exist (e.g. ``engines`` for a worker run without the engine).  Only keys of
    ``session_ids`` (and their minute keys) are kept when given.  A tombstone
    (value None) deletes its key.
    """
    from streams.replay.reader import TopicReader, cluster_topics
    from streams.settings import Settings
    from streams.worker.faust_app import changelog_topic

    settings = Settings(bootstrap=bootstrap, prefix=prefix)
    # the process-wide credential, as the TopicReader below (the admin client had
    # none: on a secured cluster the listing failed with a raw KafkaException)
    existing = cluster_topics(bootstrap, timeout_s=timeout_s)
    wanted = None if session_ids is None else {s.encode("utf-8") for s in session_ids}
    tables: Tables = {t: {} for t in TABLES}
    missing: list[str] = []
    for table in TABLES:
        topic = changelog_topic(settings, table)
        if topic not in existing:
            missing.append(topic)
            continue
        values = tables[table]
        reader: TopicReader[bytes] = TopicReader(bootstrap, [topic], bytes, timeout_s=timeout_s)
        for _, _, _, key, value in reader.raw():
            if key is None:
                continue
            if wanted is not None and key.split(b"@", 1)[0] not in wanted:
                continue
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
    return tables, missing


# --------------------------------------------------------------------------- diff

_DECODERS: Final[dict[str, Callable[[bytes], Any]]] = {
    "sessions": SessionCounters.decode,
    "budgets": BudgetState.decode,
    "minutes": MinuteCounts.decode,
}


def _show(value: Any, limit: int = 80) -> str:
    """A short, stable rendering of a field value for a difference line."""
    if isinstance(value, (tuple, list)) and value and not isinstance(value[0], (int, float, str)):
        return f"[{len(value)} item(s)]"
    if is_dataclass(value) and not isinstance(value, type):
        text = to_canonical(value, "value").decode("utf-8")
    else:
        text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain_diff(
    sid: str, table: str, key: str | None, live: Mapping[str, Any], mine: Mapping[str, Any]
) -> list[StateDifference]:
    out = []
    for name in sorted(set(live) | set(mine)):
        a, b = live.get(name), mine.get(name)
        if a != b:
            out.append(StateDifference(sid, table, name, _show(a), _show(b), key))
    return out


def _canon(value: Any) -> bytes:
    return to_canonical(value, "value")


def _engine_diff(
    sid: str, live: Any, mine: Any, skip: frozenset[str], path: str = "", depth: int = 0
) -> list[StateDifference]:
    """Field by field; descends one level into nested dataclasses (``analysis.window``)."""
    out: list[StateDifference] = []
    for f in fields(mine):
        name = f"{path}{f.name}"
        if name in skip:
            continue
        a, b = getattr(live, f.name), getattr(mine, f.name)
        if _canon(a) == _canon(b):
            continue
        nested = [s[len(name) + 1 :] for s in skip if s.startswith(name + ".")]
        if depth == 0 and is_dataclass(a) and type(a) is type(b) and not isinstance(a, type):
            inner = _engine_diff(sid, a, b, skip, name + ".", depth + 1)
            if inner or nested:
                out.extend(inner)
                continue
        out.append(StateDifference(sid, "engines", name, _show(a), _show(b)))
    return out


@dataclass
class StateDiff:
    """What :func:`diff_tables` found; ``ok`` when no difference."""

    sessions: int = 0
    values_compared: int = 0
    #: Sessions whose timer-made engine fields were not compared (see :data:`TIMER_FIELDS`).
    timer_sessions: int = 0
    differences: list[StateDifference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def behind(self) -> list[str]:
        """Sessions whose live ``last_seq`` (counters or engine) is lower than the
        replay's: the live tables lack the latest events.  A running worker writes a
        changed session only about ``--engine-flush-interval`` after the change, so
        this is what a compare too soon looks like (and also what lost state looks
        like: the verdict stays a difference)."""
        out: set[str] = set()
        for d in self.differences:
            if d.field == "last_seq" and d.table in ("sessions", "engines"):
                try:
                    if int(d.live) < int(d.replay):
                        out.add(d.session_id)
                except ValueError:
                    continue
        return sorted(out)


def diff_tables(
    live: Tables,
    replay: Tables,
    session_ids: Iterable[str],
    *,
    timer_sessions: Iterable[str] = (),
    tables: Iterable[str] = TABLES,
) -> StateDiff:
    """Compare the live and replayed tables for ``session_ids`` (see the module doc).

    ``timer_sessions``: sessions with a timer assessment live (their
    :data:`TIMER_FIELDS` are skipped).  ``tables``: which tables to compare (a
    worker without engine has no ``engines`` changelog).  A value missing on one
    side is a difference (field ``""``); so is one that does not decode.
    """
    timers = set(timer_sessions)
    result = StateDiff()
    sids = sorted(set(session_ids))
    result.sessions = len(sids)
    result.timer_sessions = len(timers & set(sids))
    wanted = {s.encode("utf-8") for s in sids}
    for table in tables:
        lv, rv = live.get(table, {}), replay.get(table, {})
        keys = sorted(
            k
            for k in set(lv) | set(rv)
            if (k.split(b"@", 1)[0] if table == "minutes" else k) in wanted
        )
        if table == "sessions":  # every replayed session has counters: a missing one is a loss
            keys = sorted(set(keys) | wanted)
        for k in keys:
            text = k.decode("utf-8", "replace")
            sid = text.partition("@")[0]
            key = text if table == "minutes" else None
            a, b = lv.get(k), rv.get(k)
            result.values_compared += 1
            if a == b:
                continue
            if a is None or b is None:
                result.differences.append(
                    StateDifference(
                        sid,
                        table,
                        "",
                        "(none)" if a is None else "(a value)",
                        "(none)" if b is None else "(a value)",
                        key,
                    )
                )
                continue
            decode = decode_state if table == "engines" else _DECODERS[table]
            try:
                lval = decode(a)
            except StateDecodeError as exc:  # the worker could not resume from it either
                result.differences.append(
                    StateDifference(sid, table, "", f"undecodable ({exc})", "(a value)", key)
                )
                continue
            rval = decode(b)
            if table == "engines":
                if encode_state(lval) == encode_state(rval):
                    continue
                skip = TIMER_FIELDS if sid in timers else frozenset()
                result.differences.extend(_engine_diff(sid, lval, rval, skip))
            else:
                result.differences.extend(
                    _plain_diff(sid, table, key, lval.to_json(), rval.to_json())
                )
    return result


__all__ = [
    "TABLES",
    "TIMER_FIELDS",
    "StateDiff",
    "StateDifference",
    "StateReplay",
    "Tables",
    "diff_tables",
    "read_changelogs",
    "replay_state",
]
