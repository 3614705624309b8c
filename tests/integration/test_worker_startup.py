"""The worker's startup race: changelog topics missing from the metadata when the group
assigns (docs/faust-notes.md, "Changelog topics are created before Faust starts").

Faust creates each table's changelog topic while it starts and subscribes right
after; if the cluster metadata does not list a changelog topic yet when the group
leader assigns, Faust's assignor logs ``Ignoring missing topic`` and assigns no table
partition, and aiokafka only notices the topic at its next metadata refresh (5 min).
The worker then looked ready but no session ever showed up in its tables.

To make that deterministic the tests turn off Faust's own topic creation
(``TOPIC_ALLOW_DECLARE=false``, a Faust setting read from the environment): the
changelog topics then appear only when this test creates them, *after* the worker
was assigned, which is exactly the state the race leaves.  Fixed, ``trajectory
worker`` creates them itself and waits until the metadata lists them before Faust
starts, so this test's late creation finds them already there.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka_io import produce
from procs import WorkerProc
from workloads import expected_of, make_session

from streams.settings import Settings
from streams.worker.faust_app import (
    BUDGETS_TABLE,
    ENGINES_TABLE,
    MINUTES_TABLE,
    SESSIONS_TABLE,
    changelog_topic,
)

TABLES = (SESSIONS_TABLE, BUDGETS_TABLE, MINUTES_TABLE, ENGINES_TABLE)


def _wait_log(worker: WorkerProc, text: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in worker.log_path.read_text(errors="replace"):
        assert worker.proc.poll() is None, f"worker exited:\n{worker.log_tail()}"
        assert time.monotonic() < deadline, f"no {text!r} in the worker log:\n{worker.log_tail()}"
        time.sleep(0.2)


def _create_changelogs_as_faust_would(admin: Any, settings: Settings) -> None:
    """What Faust's ``Table.changelog_topic.maybe_declare()`` creates, by hand (raw
    NewTopics, not streams.topics: this test also runs against the unfixed code)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import NewTopic

    futures = admin.create_topics(
        [
            NewTopic(
                changelog_topic(settings, t),
                num_partitions=settings.events_partitions,
                replication_factor=1,
                config={"cleanup.policy": "compact"},
            )
            for t in TABLES
        ]
    )
    for future in futures.values():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _describe(admin: Any, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return dict(admin.describe_configs([res])[res].result(30))


@pytest.mark.timeout(300)
def test_worker_processes_when_changelogs_appear_after_faust_subscribed(
    settings: Settings, admin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WorkerProc passes os.environ on to the worker subprocess
    monkeypatch.setenv("TOPIC_ALLOW_DECLARE", "false")
    worker = WorkerProc(settings, tmp_path / "data", store="memory")
    try:
        _wait_log(worker, "Worker ready")
        _create_changelogs_as_faust_would(admin, settings)
        events = [e for i in range(3) for e in make_session(f"s{i}", 10)]
        produce(settings, events)
        # before the fix: "sessions not caught up" (no table partition assigned)
        worker.wait_state(expected_of(events), timeout_s=60)
        assert worker.get("/stats")[1]["applied"] == len(events)
    finally:
        code = worker.stop()
    assert code == 0, worker.log_tail()
    assert "Ignoring missing topic" not in worker.log_path.read_text().replace(
        f"Ignoring missing topic: '{settings.prefix}-observer-__assignor-__leader'", ""
    ), worker.log_tail()


@pytest.mark.timeout(300)
def test_changelog_topics_the_worker_creates_are_what_faust_declares(
    settings: Settings, admin: Any, tmp_path: Path
) -> None:
    """The worker creates the changelogs itself now; they must be what Faust declared
    before (existing deployments keep theirs, new ones get the same): partitions,
    replication and every topic config set on them, compared with the declaration of
    the same app's Faust tables (``Table.changelog_topic`` through the aiokafka
    transport's ``_topic_config``, what ``_really_create_topic`` sends)."""
    from streams.worker.config import WorkerConfig
    from streams.worker.faust_app import create_app

    worker = WorkerProc(settings, tmp_path / "data", store="memory")
    try:
        _wait_log(worker, "Worker ready")
    finally:
        assert worker.stop() == 0, worker.log_tail()
    app = create_app(
        settings,
        WorkerConfig(
            store="memory://",
            data_dir=str(tmp_path / "declared"),
            web_enabled=False,
            partitions=settings.events_partitions,
        ),
    )
    md = admin.list_topics(timeout=30)
    for table in (app.sessions, app.budgets, app.minutes, app.engines):
        topic = table.changelog_topic
        name = topic.get_topic_name()
        assert name == changelog_topic(settings, table.name)
        declared = {
            **app.app.transport._topic_config(topic.retention, topic.compacting, topic.deleting),
            **topic.config,
        }
        created = md.topics[name]
        assert len(created.partitions) == topic.partitions == settings.events_partitions
        replicas = topic.replicas or app.app.conf.topic_replication_factor
        assert {len(p.replicas) for p in created.partitions.values()} == {replicas}
        set_on_topic = {
            k: v.value
            for k, v in _describe(admin, name).items()
            if getattr(v.source, "value", v.source) == _DYNAMIC_TOPIC
        }
        assert set_on_topic == {k: str(v) for k, v in declared.items()}, name
        assert set_on_topic == {"cleanup.policy": "compact"}


#: ``ConfigEntry.source`` of a config set on the topic itself
_DYNAMIC_TOPIC = 1  # confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG
