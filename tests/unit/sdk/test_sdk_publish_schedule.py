"""`trajectory publish` planning (pure): grouping sessions and the merged timeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.commands.publish import load_runs, schedule
from streams.core.events import TraceEvent
from streams.core.jsonl import dumps_event
from streams.errors import InvalidEventError


def _file(path: Path, sid: str, stamps: list[int]) -> Path:
    events = [TraceEvent("message", sid, i, ts, text=str(i)) for i, ts in enumerate(stamps)]
    path.write_text("\n".join(dumps_event(e) for e in events) + "\n", encoding="utf-8")
    return path


def test_schedule_merges_sessions_by_offset_from_their_own_start(tmp_path: Path) -> None:
    a = _file(tmp_path / "a.jsonl", "a", [5_000, 5_100, 5_300])
    b = _file(tmp_path / "b.jsonl", "b", [1_000_000, 1_000_050, 1_000_400])
    runs = load_runs([str(a), str(b)], "auto", "x-")
    assert [r.session_id for r in runs] == ["x-a", "x-b"]
    plan = [(off, run.session_id, i) for off, run, i in schedule(runs)]
    assert plan == [
        (0, "x-a", 0),
        (0, "x-b", 0),
        (50, "x-b", 1),
        (100, "x-a", 1),
        (300, "x-a", 2),
        (400, "x-b", 2),
    ]


def test_out_of_order_times_are_clamped_not_reordered(tmp_path: Path) -> None:
    runs = load_runs([str(_file(tmp_path / "a.jsonl", "a", [100, 50, 200]))], "jsonl", "")
    assert [(off, i) for off, _, i in schedule(runs)] == [(0, 0), (0, 1), (100, 2)]


def test_same_session_in_two_files_and_bad_ids_are_errors(tmp_path: Path) -> None:
    a = _file(tmp_path / "a.jsonl", "same", [1])
    b = _file(tmp_path / "b.jsonl", "same", [2])
    with pytest.raises(InvalidEventError, match="appears in both"):
        load_runs([str(a), str(b)], "auto", "")
    with pytest.raises(InvalidEventError, match="session_id"):
        load_runs([str(a)], "auto", "bad prefix ")
