"""A replay of 100,000 events from Kafka replays every one of them, draws its
progress bar and prints its throughput.  Slow-ish: ~10-20 s on a shared 2-core box,
over a minute when the box is busy.

No bound on the time (a timed assertion measures the machine, not the code): the
throughput is a figure, printed here and measured properly by
``tests/bench/bench_replay.py``; the 240 s pytest timeout catches a hang."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from streams.cli import main
from streams.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_replay import produce_encoded

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

EVENTS = 100_000


def test_replay_100k_events_with_progress_and_throughput(
    settings: Settings, tmp_path: Path, capsys
) -> None:
    produce_encoded(settings.bootstrap, settings.prefix, EVENTS, sessions=4)
    out = tmp_path / "d.jsonl"
    began = time.monotonic()
    code = main(
        [
            "replay",
            "--sessions",
            "bench-*",
            "--bootstrap",
            settings.bootstrap,
            "--prefix",
            settings.prefix,
            "--output",
            "jsonl",
            "--out",
            str(out),
            "--progress",
        ]
    )
    took = time.monotonic() - began
    err = capsys.readouterr().err
    assert code == 0
    m = re.search(r"replayed (\d+) events in ([\d.]+) s \(([\d,]+) events/s\) from 4 session", err)
    assert m, err[-2000:]
    assert int(m.group(1)) == EVENTS
    print(f"\n100k replay: {m.group(3)} events/s ({took:.1f} s wall incl. output)")
    assert "replay" in err and "ev/s" in err  # the rich bar with its live rate
    lines = out.read_text().splitlines()
    assert lines, "the JSONL export is empty"
    rows = [json.loads(line) for line in lines]
    assert {row["session_id"] for row in rows} <= {f"bench-{i}" for i in range(4)}, rows[:3]
