"""`trajectory demo` end to end on the test broker: router + worker subprocesses,
a simulated fleet, assessments read back over HTTP, the per-kind summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streams.broker import parse_bootstrap
from streams.commands.demo import headline, session_kind, summarize

REPO = Path(__file__).resolve().parents[2]


def test_helpers() -> None:
    assert session_kind("sim-3-0-looping") == "looping"
    assert session_kind("sim-3-1-budget_burner") == "budget_burner"
    assert session_kind("other") == "other"
    md = (
        "## Trajectory Assessment\n\n_Generated after tool call #4_\n\n"
        "### Patterns [warning]\n\nLooping.\n"
    )
    assert headline(md) == "Patterns: Looping."
    assert headline("") == ""
    s = summarize(
        {
            "a-0-0-looping": {"severity": "warning"},
            "a-1-0-healthy": {"severity": None},
            "a-2-0-healthy": {"severity": "info"},
        }
    )
    assert s["looping"] == {"sessions": 1, "assessed": 1, "caution+": 1, "warning": 1}
    assert s["healthy"] == {"sessions": 2, "assessed": 1, "caution+": 0, "warning": 0}


@pytest.mark.timeout(300)
def test_demo_shows_assessments_of_the_pathological_sessions(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    host, port = parse_bootstrap(kafka_bootstrap)
    assert host in ("127.0.0.1", "localhost"), "the demo runs against a local broker"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams",
            "demo",
            "--duration",
            "10",
            "--sessions",
            "8",
            "--no-live",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "TRAJECTORY_CACHE_DIR": str(tmp_path),
            "COLUMNS": "160",
        },
        capture_output=True,
        text=True,
        timeout=280,
    )
    out = proc.stdout + proc.stderr
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in tmp_path.glob("demo/*/*.log"))
    assert proc.returncode == 0, out + logs
    assert "reusing the Kafka already answering" in out  # it must not start its own
    rows = {
        m["kind"]: tuple(int(m[g]) for g in ("assessed", "sessions", "caution", "warning"))
        for m in re.finditer(
            r"│ (?P<kind>\w+)\s+│\s+(?P<assessed>\d+) / (?P<sessions>\d+) │\s+(?P<caution>\d+)"
            r" │\s+(?P<warning>\d+) │",
            out,
        )
    }
    # 8 slots, a quarter pathological: one looping, one stalled, six healthy slots
    # (a finished healthy session is replaced, so there are more healthy sessions)
    assert set(rows) == {"looping", "stalled", "healthy"}, out
    assert rows["looping"][1] == 1 and rows["looping"][3] == 1, rows
    assert rows["stalled"][2] == 1, rows  # caution or warning
    assert rows["healthy"][0] == 0 and rows["healthy"][1] >= 6, rows
    published = re.search(r"published (\d+) events .* hold (\d+) of them", out.replace("\n", " "))
    assert published and published[1] == published[2], out
    # the live table showed the looping session's rendered assessment headline
    assert re.search(r"looping .*warning .*Patterns: Detected", out), out
