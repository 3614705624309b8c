"""`trajectory report` over sessions read from Kafka equals the report over the same
events from a file (the data is a function of the events, wherever they come from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka_io import publish
from workloads import by_session, session_events

from streams.cli import main
from streams.core.jsonl import dumps_event
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T0 = 1_700_000_000_000


def test_report_from_kafka_equals_report_from_file(settings: Settings, tmp_path: Path) -> None:
    evs = session_events("r-1", T0) + session_events("r-2", T0 + 3000, fail_every=3)
    publish(settings, evs)
    kafka_json, file_json = tmp_path / "k.json", tmp_path / "f.json"
    assert (
        main(
            [
                "report",
                "--sessions",
                "r-*",
                "--bootstrap",
                settings.bootstrap,
                "--prefix",
                settings.prefix,
                "--out",
                str(tmp_path / "k.html"),
                "--json",
                str(kafka_json),
            ]
        )
        == 0
    )
    src = tmp_path / "events.jsonl"
    src.write_text("".join(dumps_event(e) + "\n" for e in by_session(evs)), "utf-8")
    assert (
        main(["report", str(src), "--out", str(tmp_path / "f.html"), "--json", str(file_json)]) == 0
    )
    k = json.loads(kafka_json.read_text("utf-8"))
    assert k == json.loads(file_json.read_text("utf-8"))
    assert k["summary"]["sessions"] == 2 and k["summary"]["events"] == len(evs)
    assert k["summary"]["pattern_detections"] > 0
    tools = {t["tool"]: t for t in k["tool_frequency"]}
    assert tools["bash"]["calls"] == 16
    assert tools["bash"]["errors"] == 8 + 3  # r-1 fails every call, r-2 every third (0, 3, 6)
    html_text = (tmp_path / "k.html").read_text("utf-8")
    assert html_text.count('class="timeline"') == 2


def test_report_needs_exactly_one_input(tmp_path: Path, capsys) -> None:
    assert main(["report", "--out", str(tmp_path / "x.html")]) == 2
    assert "PATH/--session/--sessions" in capsys.readouterr().err
