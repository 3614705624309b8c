"""AgentV edge (issue 11): an empty JSONL trace is a trace, not an error."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from streams import cli

CONFIG = "type: tool_trajectory\nmode: any_order\nminimums: {search: 2, fetch: 1}\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", ["empty.jsonl", "blank.jsonl", "empty.jsonl.gz"])
def test_summary_of_an_empty_jsonl_file_has_event_count_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(b""))
    else:
        path.write_text("\n  \n" if name.startswith("blank") else "")
    rc, out, _ = _run(capsys, "summary", "--json", str(path))
    assert rc == 0
    record = json.loads(out)
    assert record["eventCount"] == 0
    assert record["toolNames"] == [] and record["toolCallsByName"] == {}
    assert record["errorCount"] == 0


def test_eval_of_an_empty_jsonl_file_scores_zero_and_names_the_missing_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(CONFIG)
    rc, out, _ = _run(capsys, "eval", str(path), "--config", str(cfg), "--json")
    assert rc == 1  # a failing session
    result = json.loads(out)
    assert result["score"] == 0.0 and result["verdict"] == "fail"
    misses = " ".join(result["evaluators"][0]["misses"])
    assert "search" in misses and "fetch" in misses


def test_an_empty_file_of_another_format_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.traj.json"
    path.write_text("")
    rc, _, err = _run(capsys, "summary", str(path))
    assert rc == 2
    assert "empty file" in err
