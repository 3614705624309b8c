"""History queries on a real broker: since/until/limit/tree over pattern and
assessment records produced into a test prefix's topics."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.cli import main
from streams.errors import ConfigError
from streams.history import SKEW_MS, query, read_items
from streams.serde import AssessmentSerde, AssessmentWire, PatternRecord, PatternSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NOW = time.time_ns() // 1_000_000
DAY = 86_400_000
OLD = NOW - 3 * DAY  # records "from three days ago" (record and event time)

# session tree: root -> child -> grandchild ; root -> child2 ; other (unrelated)
PARENTS = {"root": None, "child": "root", "grand": "child", "child2": "root", "other": None}


def pattern(sid: str, seq: int, ts: int, ptype: str = "doom_loop") -> PatternRecord:
    return PatternRecord(
        session_id=sid,
        seq=seq,
        timestamp_ms=ts,
        pattern_type=ptype,
        call_index=seq,
        confidence=0.9,
        severity="warning",
        evidence=(f"{sid} evidence {seq}",),
        parent_session_id=PARENTS[sid],
        agent_id=f"agent-{sid}",
    )


def assessment(sid: str, seq: int, ts: int) -> AssessmentWire:
    return AssessmentWire(
        session_id=sid,
        seq=seq,
        timestamp_ms=ts,
        trigger="event",
        call_index=seq,
        max_severity="info",
        rendered=f"## Trajectory Assessment\n{sid} #{seq}",
        parent_session_id=PARENTS[sid],
        agent_id=f"agent-{sid}",
    )


@pytest.fixture
def history(settings: Settings, create_topics: Any) -> dict[str, Any]:
    create_topics(settings.patterns_topic, partitions=3)
    create_topics(settings.assessment_history_topic, partitions=2)
    create_topics(settings.control_topic, config={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
    ps, as_ = PatternSerde(), AssessmentSerde()
    produced: dict[str, Any] = {"patterns": [], "assessments": []}
    # the grandchild's link to child comes only from the announcement (child's own
    # records are outside the queried window); root has none at all
    for sid, parent in PARENTS.items():
        p.produce(
            settings.control_topic,
            key=sid.encode(),
            value=json.dumps(
                {"session_id": sid, "topic": f"x.{sid}", "parent_session_id": parent}
            ).encode(),
        )
    for sid in PARENTS:
        for i, ts in enumerate((OLD, OLD + 1000)):  # old: before any `since` below
            rec = pattern(sid, i, ts)
            p.produce(settings.patterns_topic, key=sid.encode(), value=ps.encode(rec), timestamp=ts)
            produced["patterns"].append(rec)
    for sid in ("grand", "child2", "other", "root"):
        for i in range(3):
            ts = NOW - 3_600_000 + i * 60_000 + len(sid)
            rec = pattern(sid, 10 + i, ts, "repeated_error")
            p.produce(settings.patterns_topic, key=sid.encode(), value=ps.encode(rec), timestamp=ts)
            produced["patterns"].append(rec)
            a = assessment(sid, 10 + i, ts + 1)
            p.produce(
                settings.assessment_history_topic,
                key=sid.encode(),
                value=as_.encode(a),
                timestamp=ts + 1,
            )
            produced["assessments"].append(a)
    assert p.flush(30) == 0
    return produced


def keys(items: list[Any]) -> list[tuple[str, str, int]]:
    return [(i.kind, i.session_id, i.seq) for i in items]


def test_since_starts_near_since_with_offsets_for_times(
    settings: Settings, history: dict[str, Any]
) -> None:
    since = NOW - 2 * 3_600_000
    items = read_items(settings, "pattern", since=since)
    # nothing from three days ago was even read: the scan started near `since`
    assert items and all(i.timestamp_ms >= since - SKEW_MS for i in items)
    assert len(items) == 12
    assert len(read_items(settings, "pattern")) == 12 + 2 * len(PARENTS)


def test_query_session_since_until_limit(settings: Settings, history: dict[str, Any]) -> None:
    all_ = query(settings, limit=1000)
    assert len(all_) == len(history["patterns"]) + len(history["assessments"])
    times = [i.timestamp_ms for i in all_]
    assert times == sorted(times)

    got = query(settings, session="grand", since=NOW - 2 * 3_600_000)
    assert keys(got) == [
        ("pattern", "grand", 10),
        ("assessment", "grand", 10),
        ("pattern", "grand", 11),
        ("assessment", "grand", 11),
        ("pattern", "grand", 12),
        ("assessment", "grand", 12),
    ]
    assert got[0].record == history["patterns"][2 * len(PARENTS)]
    # until exclusive: the third pattern's own time stops it
    third = next(r for r in history["patterns"] if r.session_id == "grand" and r.seq == 12)
    got = query(
        settings,
        session="grand",
        since=NOW - 2 * 3_600_000,
        until=third.timestamp_ms,
        kinds=("pattern",),
    )
    assert keys(got) == [("pattern", "grand", 10), ("pattern", "grand", 11)]
    # limit keeps the newest
    got = query(settings, session="other", limit=2)
    assert keys(got) == [("pattern", "other", 12), ("assessment", "other", 12)]
    # old only
    got = query(settings, until=OLD + 1, kinds=("pattern",), limit=100)
    assert sorted(i.session_id for i in got) == sorted(PARENTS)


def test_query_tree_follows_records_and_announcements(
    settings: Settings, history: dict[str, Any]
) -> None:
    since = NOW - 2 * 3_600_000
    got = query(settings, tree="root", since=since, kinds=("pattern",))
    assert {i.session_id for i in got} == {"root", "grand", "child2"}
    got = query(settings, tree="child", since=since, kinds=("assessment",))
    assert {i.session_id for i in got} == {"grand"}
    assert all(i.parent_session_id == "child" and i.agent_id == "agent-grand" for i in got)
    got = query(settings, tree="other", kinds=("pattern",), limit=100)
    assert {i.session_id for i in got} == {"other"}


def test_cli_history_json(settings: Settings, history: dict[str, Any], capsys: Any) -> None:
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    capsys.readouterr()
    assert main(["history", "--tree", "child", "--kind", "patterns", "--json", *base]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["session_id"], r["seq"]) for r in rows] == [
        ("child", 0),
        ("grand", 0),
        ("child", 1),
        ("grand", 1),
        ("grand", 10),
        ("grand", 11),
        ("grand", 12),
    ]
    assert all(r["kind"] == "pattern" for r in rows)
    assert main(["history", "--session", "root", "--limit", "1", *base]) == 0
    out = capsys.readouterr().out
    assert "root seq 12" in out and "assessment" in out and out.count("seq ") == 1
    assert main(["history", "--since", "yesterday", *base]) == 2


def test_missing_topics_name_the_prefix(settings: Settings) -> None:
    with pytest.raises(ConfigError) as info:
        query(settings)
    assert info.value.key == "prefix"
