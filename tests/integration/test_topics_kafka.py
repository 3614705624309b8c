"""Session topic lifecycle on a real broker: list, gc --dry-run, gc with archives
(JSONL and Avro, read back to the same events), and no deletion when archiving fails."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from streams.cli import main
from streams.core.events import TraceEvent
from streams.errors import ConfigError
from streams.lifecycle import gc, list_session_topics, read_archive
from streams.sdk import Publisher
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

H = 3_600_000


def existing(admin: Any) -> set[str]:
    return set(admin.list_topics(timeout=15).topics)


def publish(settings: Settings, sid: str, n: int) -> None:
    with Publisher(settings) as pub, pub.session(sid, agent_id="a", task="t") as s:
        for i in range(n):
            cid = s.tool_call("bash", {"command": f"echo {i}"})
            s.tool_result(cid, {"stdout": str(i)})


def topic_events(settings: Settings, sid: str) -> list[TraceEvent]:
    from streams.lifecycle import read_session_events

    return read_session_events(settings, settings.session_topic(sid))


@pytest.fixture
def sessions(settings: Settings, create_topics: Any) -> dict[str, list[TraceEvent]]:
    for sid, n in (("old-a", 2), ("old-b", 3), ("keep-c", 1)):
        publish(settings, sid, n)
    create_topics(settings.session_topic("empty-d"))  # never written: never idle
    return {sid: topic_events(settings, sid) for sid in ("old-a", "old-b", "keep-c")}


def test_list_session_topics(settings: Settings, sessions: dict[str, Any], capsys: Any) -> None:
    infos = {t.session_id: t for t in list_session_topics(settings)}
    assert set(infos) == {"old-a", "old-b", "keep-c", "empty-d"}
    for sid, evs in sessions.items():
        assert infos[sid].messages == len(evs)
        assert infos[sid].last_seq == evs[-1].seq
        assert infos[sid].last_event_ms == evs[-1].timestamp_ms
        assert infos[sid].last_record_ms is not None
    assert infos["empty-d"].messages == 0 and infos["empty-d"].last_record_ms is None
    assert [t.session_id for t in list_session_topics(settings, "old-*")] == ["old-a", "old-b"]
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    capsys.readouterr()
    assert main(["topics", "list", "--sessions", "keep-*", *base]) == 0
    out = capsys.readouterr().out
    assert "keep-c" in out and "old-a" not in out


def test_gc_dry_run_then_archive_and_delete(
    settings: Settings, sessions: dict[str, list[TraceEvent]], admin: Any, tmp_path: Path
) -> None:
    later = time.time_ns() // 1_000_000 + 2 * H  # injected clock: everything is 2 h old
    # this test's topics only: tests running in parallel create and delete theirs
    mine = settings.prefix + "."
    before = {t for t in existing(admin) if t.startswith(mine)}
    assert settings.session_topic("old-a") in before
    dry = gc(
        settings,
        now_ms=later,
        idle_ms=H,
        pattern="old-*",
        dry_run=True,
        archive_dir=tmp_path,
        archive_format="jsonl",
    )
    assert [a.topic for a in dry.actions] == [settings.session_topic(s) for s in ("old-a", "old-b")]
    assert not any(a.deleted for a in dry.actions)
    assert {t for t in existing(admin) if t.startswith(mine)} == before
    assert not list(tmp_path.iterdir())
    # nothing is idle for 3 h
    assert gc(settings, now_ms=later, idle_ms=3 * H, dry_run=True).actions == ()

    rep = gc(
        settings,
        now_ms=later,
        idle_ms=H,
        pattern="old-a",
        archive_dir=tmp_path,
        archive_format="jsonl",
        dry_run=False,
    )
    (a,) = rep.actions
    assert a.deleted and a.archived_events == len(sessions["old-a"])
    assert read_archive(Path(a.archive or ""), "jsonl") == sessions["old-a"]

    rep = gc(
        settings,
        now_ms=later,
        idle_ms=H,
        archive_dir=tmp_path / "avro",
        archive_format="avro",
        dry_run=False,
    )
    done = {x.topic: x for x in rep.actions}
    # old-b and keep-c (both 2 h old), not the never-written empty-d
    assert set(done) == {settings.session_topic("old-b"), settings.session_topic("keep-c")}
    for sid in ("old-b", "keep-c"):
        act = done[settings.session_topic(sid)]
        assert act.deleted
        assert read_archive(Path(act.archive or ""), "avro") == sessions[sid]
    now_topics = existing(admin)
    for sid in ("old-a", "old-b", "keep-c"):
        assert settings.session_topic(sid) not in now_topics
    assert settings.session_topic("empty-d") in now_topics


def test_gc_never_deletes_when_archiving_fails(
    settings: Settings, sessions: dict[str, Any], admin: Any, tmp_path: Path
) -> None:
    later = time.time_ns() // 1_000_000 + 2 * H
    topic = settings.session_topic("old-a")
    # an archive file already there: refused, topic kept
    (tmp_path / f"{topic}.jsonl").write_text("earlier archive\n")
    with pytest.raises(ConfigError) as info:
        gc(settings, now_ms=later, idle_ms=H, pattern="old-a", archive_dir=tmp_path, dry_run=False)
    assert info.value.key == "--archive"
    assert topic in existing(admin)
    # the archive directory cannot be created: the OSError propagates, topic kept
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(OSError):
        gc(
            settings,
            now_ms=later,
            idle_ms=H,
            pattern="old-a",
            archive_dir=blocker / "sub",
            dry_run=False,
        )
    assert topic in existing(admin)


def test_cli_gc_requires_yes(
    settings: Settings, sessions: dict[str, Any], admin: Any, capsys: Any
) -> None:
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    assert main(["topics", "gc", "--idle-for", "1ms", *base]) == 2
    assert "--yes" in capsys.readouterr().err
    time.sleep(0.05)
    assert (
        main(["topics", "gc", "--idle-for", "1ms", "--sessions", "keep-*", "--dry-run", *base]) == 0
    )
    out = capsys.readouterr().out
    assert "would delete" in out and "keep-c" in out and "old-a" not in out
    assert settings.session_topic("keep-c") in existing(admin)
    assert main(["topics", "gc", "--idle-for", "1ms", "--sessions", "keep-*", "--yes", *base]) == 0
    assert "deleted" in capsys.readouterr().out
    assert settings.session_topic("keep-c") not in existing(admin)
    assert main(["topics", "gc", "--idle-for", "7x", "--dry-run", *base]) == 2
