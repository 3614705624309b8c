"""History queries: what was detected and assessed, per session or per session tree.

Sources: ``<prefix>.patterns`` (every fired pattern) and
``<prefix>.assessment-history`` (every assessment, time-retained).  The
compacted ``<prefix>.assessments`` only answers "what is the latest", so it is
not read here.

How a query reads (:func:`query`):

* ``since`` — each partition starts at ``offsets_for_times(since - SKEW_MS)``.
  Records are filtered on their *event* time (``timestamp_ms`` of the value);
  starting on the Kafka record time is safe as long as a record is produced no
  earlier than ``SKEW_MS`` before the event it reports (the worker produces
  after it saw the event; the slack absorbs clock skew between agent and broker).
* every partition is read up to the high watermark taken when the query starts,
  so a query always ends; ``until`` filters (record times do not bound event
  times, so it cannot stop the scan early).
* ``tree=PARENT`` — the session ``PARENT`` and all its descendants.  Parent links
  come from the records' own ``parent_session_id`` and from the SDK's session
  announcements on ``<prefix>.control`` (which name every session's parent even
  when it never produced a record in the window).
* ``limit`` keeps the **newest** ``limit`` matches; results are oldest first
  (like ``git log -n N`` printed in reverse).  Ties in event time are ordered by
  session, seq, then kind, so the output is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from streams.errors import ConfigError, InvalidEventError
from streams.settings import Settings, check_session_id

HistoryKind = Literal["pattern", "assessment"]
KINDS: Final[tuple[str, ...]] = ("pattern", "assessment")
#: Slack between a record's Kafka timestamp and its event time, see the module docstring.
SKEW_MS: Final = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One pattern detection or assessment, with where it was read from."""

    kind: HistoryKind
    session_id: str
    seq: int
    timestamp_ms: int
    parent_session_id: str | None
    agent_id: str | None
    record: Any  # streams.serde.PatternRecord | streams.serde.AssessmentWire
    topic: str
    partition: int
    offset: int


def descendants(root: str, parents: Mapping[str, str | None]) -> frozenset[str]:
    """``root`` and every session whose parent chain reaches it.

    ``parents`` maps session -> parent (None for a root).  Cycles (bad data) do
    not loop: each session is visited once.
    """
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None and parent != child:
            children.setdefault(parent, []).append(child)
    seen = {root}
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return frozenset(seen)


def select(
    items: Iterable[HistoryItem],
    *,
    sessions: frozenset[str] | None,
    since: int | None,
    until: int | None,
    limit: int,
    kinds: Sequence[str],
) -> list[HistoryItem]:
    """The filter/sort/limit step of :func:`query`, pure.

    ``since`` inclusive, ``until`` exclusive (event ms); newest ``limit`` kept,
    returned oldest first.
    """
    if limit < 1:
        raise ConfigError("--limit", f"must be >= 1, got {limit}")
    chosen = [
        it
        for it in items
        if it.kind in kinds
        and (sessions is None or it.session_id in sessions)
        and (since is None or it.timestamp_ms >= since)
        and (until is None or it.timestamp_ms < until)
    ]
    chosen.sort(key=lambda it: (it.timestamp_ms, it.session_id, it.seq, it.kind, it.offset))
    return chosen[-limit:]


def _check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    out = tuple(kinds)
    for k in out:
        if k not in KINDS:
            raise ConfigError("kinds", f"{k!r}: use 'pattern' and/or 'assessment'")
    if not out:
        raise ConfigError("kinds", "ask for at least one of 'pattern', 'assessment'")
    return out


def _start_offsets(settings: Settings, topic: str, since_ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record time is >= ``since_ms``
    (the high watermark where there is none)."""
    from confluent_kafka import TopicPartition

    from streams.lifecycle import reader, topic_partitions
    from streams.topics import admin_client

    parts = topic_partitions(admin_client(settings), topic, settings=settings)
    consumer = reader(settings)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, since_ms) for p in parts], timeout=15.0
        )
        out: dict[int, int] = {}
        for tp in found:
            if tp.error is not None:
                raise ConfigError("since", f"offsets_for_times on {topic!r} failed: {tp.error}")
            if tp.offset < 0:  # no record that late: start at the end
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=15.0, cached=False
                )
                out[tp.partition] = high
            else:
                out[tp.partition] = tp.offset
        return out
    finally:
        consumer.close()


def _serde(settings: Settings, kind: str) -> Any:
    from streams.serde import AssessmentSerde, PatternSerde

    cls = PatternSerde if kind == "pattern" else AssessmentSerde
    return cls(
        "confluent" if settings.schema_registry_url else "single-object",
        registry=settings.schema_registry_url,
    )


def read_items(settings: Settings, kind: str, *, since: int | None = None) -> list[HistoryItem]:
    """Every record of one history topic from near ``since`` to the high watermark."""
    from streams.lifecycle import scan_topic

    topic = settings.patterns_topic if kind == "pattern" else settings.assessment_history_topic
    start = _start_offsets(settings, topic, since - SKEW_MS) if since is not None else None
    serde = _serde(settings, kind)
    items: list[HistoryItem] = []
    for rec in scan_topic(settings, topic, start=start):
        if rec.value is None:
            continue  # a tombstone carries no history
        try:
            value = serde.decode(rec.value)
        except Exception as exc:
            raise InvalidEventError(
                f"{topic}[{rec.partition}]@{rec.offset}", f"cannot decode the {kind}: {exc}"
            ) from exc
        items.append(
            HistoryItem(
                kind=kind,  # type: ignore[arg-type]
                session_id=value.session_id,
                seq=value.seq,
                timestamp_ms=value.timestamp_ms,
                parent_session_id=getattr(value, "parent_session_id", None),
                agent_id=getattr(value, "agent_id", None),
                record=value,
                topic=topic,
                partition=rec.partition,
                offset=rec.offset,
            )
        )
    return items


def announced_parents(settings: Settings) -> dict[str, str | None]:
    """session -> parent from the SDK's announcements on ``<prefix>.control``
    (empty when that topic does not exist)."""
    from streams.lifecycle import scan_topic
    from streams.topics import admin_client

    topic = settings.control_topic
    md = admin_client(settings).list_topics(timeout=15.0)  # no topic=: that may auto-create it
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        return {}
    out: dict[str, str | None] = {}
    for rec in scan_topic(settings, topic):
        if rec.value is None:
            continue
        try:
            obj = json.loads(rec.value)
        except ValueError as exc:
            raise InvalidEventError(
                f"{topic}[{rec.partition}]@{rec.offset}", f"announcement is not JSON: {exc}"
            ) from exc
        if isinstance(obj, dict) and isinstance(obj.get("session_id"), str):
            parent = obj.get("parent_session_id")
            out[obj["session_id"]] = parent if isinstance(parent, str) else None
    return out


def query(
    settings: Settings,
    *,
    session: str | None = None,
    tree: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int = 100,
    kinds: Sequence[str] = KINDS,
) -> list[HistoryItem]:
    """Patterns and/or assessments of a session, a session tree, or everything.

    ``since``/``until`` are event-time epoch ms (``since`` inclusive, ``until``
    exclusive).  See the module docstring for how it reads and orders.
    """
    wanted = _check_kinds(kinds)
    if session is not None and tree is not None:
        raise ConfigError("--session/--tree", "give one of them, not both")
    if session is not None:
        check_session_id(session)
    if tree is not None:
        check_session_id(tree)
    if since is not None and until is not None and until <= since:
        raise ConfigError("--until", f"must be after --since ({until} <= {since})")
    if limit < 1:
        raise ConfigError("--limit", f"must be >= 1, got {limit}")
    items: list[HistoryItem] = []
    for kind in wanted:
        items.extend(read_items(settings, kind, since=since))
    sessions: frozenset[str] | None = None
    if session is not None:
        sessions = frozenset({session})
    elif tree is not None:
        parents = announced_parents(settings)
        for it in items:
            if it.parent_session_id is not None or it.session_id not in parents:
                parents[it.session_id] = it.parent_session_id
        sessions = descendants(tree, parents)
    return select(items, sessions=sessions, since=since, until=until, limit=limit, kinds=wanted)


def item_json(item: HistoryItem) -> dict[str, Any]:
    """A JSON-ready dict of one item (the record's own fields plus ``kind``)."""
    from dataclasses import asdict

    out = {"kind": item.kind, **asdict(item.record)}
    if "evidence" in out:
        out["evidence"] = list(out["evidence"])
    out["parent_session_id"] = item.parent_session_id
    out["agent_id"] = item.agent_id
    return out


__all__ = [
    "KINDS",
    "SKEW_MS",
    "HistoryItem",
    "HistoryKind",
    "announced_parents",
    "descendants",
    "item_json",
    "query",
    "read_items",
    "select",
]
