"""Pure parts of topic lifecycle: durations, idle selection, names, archive files."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.core.events import Budget, TraceEvent
from streams.errors import ConfigError
from streams.lifecycle import (
    SessionTopic,
    parse_duration,
    read_archive,
    select_idle,
    session_id_of,
    write_archive,
)
from streams.settings import Settings

H = 3_600_000
D = 24 * H


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("7d", 7 * D),
        ("12h", 12 * H),
        ("30m", 30 * 60_000),
        ("90s", 90_000),
        ("250ms", 250),
        ("1d12h", D + 12 * H),
        ("2w", 14 * D),
        (" 3H ", 3 * H),
        ("1h30m15s", H + 30 * 60_000 + 15_000),
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "1.5h", "-1d", "0s", "7d junk", "h7"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(text)
    assert info.value.key == "--idle-for"


def _t(sid: str, last: int | None, high: int = 5) -> SessionTopic:
    return SessionTopic(
        topic=f"p.session.{sid}",
        session_id=sid,
        messages=high,
        high_watermark=high,
        last_record_ms=last,
    )


def test_select_idle_with_injected_now() -> None:
    now = 100 * D
    topics = [
        _t("old", now - 8 * D),
        _t("exactly", now - 7 * D),
        _t("fresh", now - 7 * D + 1),
        _t("future", now + H),  # clock skew: not idle
        _t("expired", None, high=12),  # all records gone by retention
        _t("never-written", None, high=0),  # may be starting right now
    ]
    chosen = [t.session_id for t in select_idle(topics, now_ms=now, idle_ms=7 * D)]
    assert chosen == ["old", "exactly", "expired"]
    assert [t.session_id for t in select_idle(topics, now_ms=now, idle_ms=H)] == [
        "old",
        "exactly",
        "fresh",
        "expired",
    ]
    with pytest.raises(ConfigError):
        select_idle(topics, now_ms=now, idle_ms=0)


def test_session_id_of() -> None:
    s = Settings(prefix="pfx")
    assert session_id_of(s, "pfx.session.run-1") == "run-1"
    assert session_id_of(s, "pfx.session.a.b_c") == "a.b_c"
    assert session_id_of(s, "pfx.events") is None
    assert session_id_of(s, "other.session.run-1") is None
    assert session_id_of(s, "pfx.session.") is None
    assert session_id_of(s, "pfxx.session.run") is None


def _events() -> list[TraceEvent]:
    return [
        TraceEvent("session_start", "s", 0, 1000, agent_id="a", metadata={"task": "t"}),
        TraceEvent(
            "tool_call",
            "s",
            1,
            1001,
            call_id="c1",
            tool_name="bash",
            input={"command": "ls", "n": [1, 2.5, None]},
            params_summary="ls",
        ),
        TraceEvent(
            "tool_result",
            "s",
            2,
            1002,
            call_id="c1",
            tool_name="bash",
            output="x\u00e9",
            is_error=True,
            error_message="boom",
            latency_ms=3,
        ),
        TraceEvent("budget", "s", 3, 1003, budget=Budget(max_tokens=10, deadline_ms=99)),
        TraceEvent("snapshot", "s", 4, 1004, metadata={"snapshot_id": "k"}),
        TraceEvent(
            "model_step",
            "s",
            5,
            1005,
            text="hi",
            input_tokens=3,
            output_tokens=4,
            parent_session_id="root",
        ),
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "avro"])
def test_archive_round_trip(tmp_path: Path, fmt: str) -> None:
    events = _events()
    path = tmp_path / f"x.{fmt}"
    write_archive(events, path, fmt)  # type: ignore[arg-type]
    assert path.exists() and not (tmp_path / f"x.{fmt}.partial").exists()
    assert read_archive(path, fmt) == events  # type: ignore[arg-type]


def test_archive_rejects_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        write_archive(_events(), tmp_path / "x", "csv")  # type: ignore[arg-type]
    assert info.value.key == "--archive-format"


def test_cli_gc_refuses_before_any_kafka_io(capsys: pytest.CaptureFixture[str]) -> None:
    from streams.cli import main

    base = ["--bootstrap", "127.0.0.1:1", "--prefix", "nowhere"]  # nothing listens there
    assert main(["topics", "gc", *base]) == 2
    assert "--yes" in capsys.readouterr().err
    assert main(["topics", "gc", "--idle-for", "7x", "--dry-run", *base]) == 2
    assert "--idle-for" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["snapshot", "history", "topics"])
def test_help_teaches_with_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from streams.cli import main

    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "Examples:" in out and f"trajectory {command}" in out
