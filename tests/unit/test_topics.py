"""streams.topics owns every topic's spec: one size margin, the configs each kind needs,
and no other module of ``streams`` creates topics by itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streams.errors import ConfigError
from streams.settings import Settings
from streams.topics import (
    SESSION_SEGMENT_INDEX_BYTES,
    SIZE_MARGIN,
    TopicSpec,
    assessment_history_topic_spec,
    assessments_topic_spec,
    changelog_topic_spec,
    changelog_topic_specs,
    control_topic_spec,
    dlq_topic_spec,
    events_topic_spec,
    max_message_bytes,
    patterns_topic_spec,
    router_topic_specs,
    session_topic_spec,
    snapshots_topic_spec,
    uncovered_partitions,
    worker_topic_specs,
)

STREAMS = Path(__file__).resolve().parents[2] / "streams"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        bootstrap="x:1",
        prefix="t",
        events_partitions=4,
        max_message_bytes=100_000,
        session_retention_ms=3_600_000,
    )


def every_spec(settings: Settings) -> list[TopicSpec]:
    return [
        session_topic_spec(settings, "s-1"),
        control_topic_spec(settings),
        events_topic_spec(settings),
        dlq_topic_spec(settings),
        patterns_topic_spec(settings, 4),
        assessments_topic_spec(settings, 4),
        assessment_history_topic_spec(settings, 4),
        snapshots_topic_spec(settings),
        *router_topic_specs(settings, 3),
        *worker_topic_specs(settings),
    ]


def test_every_topic_has_the_one_size_margin(settings: Settings) -> None:
    assert max_message_bytes(settings) == 100_000 + SIZE_MARGIN
    for spec in every_spec(settings):
        assert spec.config["max.message.bytes"] == str(100_000 + SIZE_MARGIN), spec.name


def test_names_come_from_settings(settings: Settings) -> None:
    names = {s.name for s in every_spec(settings)}
    assert names == {
        settings.session_topic("s-1"),
        settings.control_topic,
        settings.events_topic,
        settings.dlq_topic,
        settings.patterns_topic,
        settings.assessments_topic,
        settings.assessment_history_topic,
        settings.snapshots_topic,
    }


def test_compacted_exactly_where_the_latest_value_per_key_is_the_point(
    settings: Settings,
) -> None:
    compacted = {
        s.name for s in every_spec(settings) if s.config.get("cleanup.policy") == "compact"
    }
    assert compacted == {
        settings.control_topic,  # the latest announcement per session
        settings.assessments_topic,  # the latest assessment per session
        settings.snapshots_topic,  # a restore point must not expire
    }


def test_session_topic_keeps_its_retention_and_small_indexes(settings: Settings) -> None:
    spec = session_topic_spec(settings, "s-1")
    assert spec.partitions == 1  # seq order
    assert spec.config["retention.ms"] == "3600000"
    assert spec.config["segment.index.bytes"] == str(SESSION_SEGMENT_INDEX_BYTES) == "131072"


def test_partitions_and_replication(settings: Settings) -> None:
    router = {s.name: s for s in router_topic_specs(settings, 3)}
    assert router[settings.events_topic].partitions == 4
    assert router[settings.dlq_topic].partitions == 1
    assert router[settings.control_topic].partitions == 1
    assert {s.replication_factor for s in router.values()} == {3}
    worker = {s.name: s for s in worker_topic_specs(settings)}
    assert set(worker) == {
        settings.events_topic,
        settings.dlq_topic,
        settings.patterns_topic,
        settings.assessments_topic,
        settings.assessment_history_topic,
    }
    # the worker's tables are co-partitioned with the events topic
    assert {s.partitions for n, s in worker.items() if n != settings.dlq_topic} == {4}
    # router and worker create the same events and DLQ topics whichever comes first
    for name in (settings.events_topic, settings.dlq_topic):
        assert (router[name].partitions, router[name].config) == (
            worker[name].partitions,
            worker[name].config,
        )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"partitions": 0}, "partitions"), ({"replication_factor": 0}, "replication_factor")],
)
def test_bad_spec_names_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        TopicSpec("t.x", **kwargs)
    assert str(info.value).startswith(f"{field}: ") and "t.x" in str(info.value)


def creators_outside_the_owner(root: Path) -> list[str]:
    """``file:line`` of every ``NewTopic`` use or ``.create_topics(`` call under ``root``
    but in ``streams/topics.py``: topic creation has one owner."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "topics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            hit = (isinstance(node, ast.Name) and node.id == "NewTopic") or (
                isinstance(node, ast.alias) and node.name == "NewTopic"
            )
            hit = hit or (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "create_topics"
            )
            if hit:
                found.append(f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', '?')}")
    return found


def test_no_module_but_the_owner_creates_topics() -> None:
    assert creators_outside_the_owner(STREAMS) == []


def test_the_creator_scan_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "streams"
    pkg.mkdir()
    (pkg / "topics.py").write_text("from confluent_kafka.admin import NewTopic\n")
    (pkg / "rogue.py").write_text("def f(admin):\n    admin.create_topics([])\n")
    assert creators_outside_the_owner(pkg) == ["streams/rogue.py:2"]


# ------------------------------------------------------------------ the worker's changelogs


def test_changelog_specs_are_what_faust_declares(settings: Settings) -> None:
    """Name as Faust derives it, the events partition count, compacted, unreplicated,
    and no other config (Faust sets none: the broker's max.message.bytes applies)."""
    from streams.worker.faust_app import app_id, changelog_topic

    specs = changelog_topic_specs(settings, ["sessions", "engines"], 4)
    assert [s.name for s in specs] == [
        "t-observer-sessions-changelog",
        "t-observer-engines-changelog",
    ]
    assert [s.name for s in specs] == [
        changelog_topic(settings, "sessions"),
        f"{app_id(settings)}-engines-changelog",
    ]
    for spec in specs:
        assert spec.partitions == 4
        assert spec.replication_factor == 1
        assert dict(spec.config) == {"cleanup.policy": "compact"}
    assert changelog_topic_spec(settings, "minutes", 2).partitions == 2


def test_uncovered_partitions_names_what_the_assignment_lacks() -> None:
    src, a, b = "t.events", "t-observer-a-changelog", "t-observer-b-changelog"
    whole = [(src, 0), (src, 2), (a, 0), (a, 2), (b, 0), (b, 2)]
    assert uncovered_partitions(whole, src, [a, b]) == {}
    # the race: the changelog topics were left out of the assignment
    assert uncovered_partitions([(src, 0), (src, 2)], src, [a, b]) == {a: [0, 2], b: [0, 2]}
    assert uncovered_partitions([(src, 0), (src, 2), (a, 0), (b, 2)], src, [a, b]) == {
        a: [2],
        b: [0],
    }
    # no source partition (more workers than partitions): nothing is lacking
    assert uncovered_partitions([], src, [a, b]) == {}
