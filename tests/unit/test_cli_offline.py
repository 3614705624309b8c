"""The offline CLI commands (summary, eval, analyze) through ``streams.cli.main``.

``streams.cli`` imports every command module when it builds its parser; other
lanes' modules may be missing, so the parser is built for these three only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams import cli
from streams.core.events import TraceEvent
from streams.core.jsonl import dumps_event

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
OURS = {"summary", "eval", "analyze"}


@pytest.fixture(autouse=True)
def only_offline_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMANDS", tuple(c for c in cli.COMMANDS if c[0] in OURS))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------ summary


def test_summary_json_agentv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["summary", "--json", str(FIX / "agentv_trace.json")], capsys)
    assert code == 0
    (record,) = json_lines(out)
    assert record == {
        "path": str(FIX / "agentv_trace.json"),
        "session_id": "agentv_trace",
        "eventCount": 8,
        "toolNames": ["documentRetrieve", "knowledgeSearch"],
        "toolCallsByName": {"documentRetrieve": 1, "knowledgeSearch": 2},
        "errorCount": 1,
    }


def test_summary_text_several_files_and_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["summary", str(FIX / "events.jsonl"), str(FIX / "swe_agent_small.traj")], capsys
    )
    assert code == 0
    assert out.count("eventCount") == 3  # s-a, s-b, swe_agent_small
    assert "s-a  (" in out and "swe_agent_small  (" in out
    assert "byName     find_file x1, javac x1, open x1, python x1, submit x1" in out


def test_summary_forced_format_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["summary", "--format", "otlp", str(FIX / "swe_agent_small.traj")], capsys)
    assert code == 2 and out == ""
    assert "resourceSpans" in err


# ------------------------------------------------------------------ eval


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_eval_any_order_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(
        tmp_path,
        "e.yaml",
        "type: tool_trajectory\nmode: any_order\nminimums:\n  knowledgeSearch: 3\n"
        "  documentRetrieve: 1\n",
    )
    code, out, _ = run(["eval", str(FIX / "agentv_trace.json"), "--config", cfg], capsys)
    assert code == 1
    assert "agentv_trace: score 0.50  verdict FAIL" in out
    assert "miss  knowledgeSearch: called 2 times (required >=3)" in out
    assert "hit   documentRetrieve: called 1 times (required >=1)" in out


def test_eval_in_order_json_config_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(
        tmp_path,
        "e.json",
        json.dumps(
            {
                "type": "tool_trajectory",
                "mode": "in_order",
                "expected": [
                    {"tool": "knowledgeSearch", "args": {"query": "X configuration"}},
                    {"tool": "documentRetrieve"},
                ],
            }
        ),
    )
    code, out, _ = run(["eval", "--json", str(FIX / "agentv_trace.json"), "--config", cfg], capsys)
    assert code == 0
    (result,) = json_lines(out)
    assert result["verdict"] == "pass" and result["score"] == 1.0
    assert result["evaluators"][0]["hits"] == [
        "Found knowledgeSearch at position 0",
        "Found documentRetrieve at position 2",
    ]


def test_eval_exact_borderline_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(
        tmp_path,
        "e.yaml",
        "evaluators:\n"
        "  - name: seq\n    type: tool_trajectory\n    mode: exact\n"
        "    expected: [{tool: knowledgeSearch}, {tool: knowledgeSearch}, {tool: search}]\n",
    )
    code, out, _ = run(["eval", str(FIX / "agentv_trace.json"), "--config", cfg], capsys)
    assert code == 0  # 2/3 = 0.67 is borderline, not a failure
    assert "verdict BORDERLINE" in out
    assert "miss  Position 2: expected search, got documentRetrieve" in out


def test_eval_many_sessions_any_fail_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(tmp_path, "e.yaml", "type: tool_trajectory\nminimums: {book_reservation: 1}\n")
    code, out, _ = run(["eval", str(FIX / "openai_chat_runs.json"), "--config", cfg], capsys)
    assert code == 0
    assert "2/2 sessions pass or borderline" in out
    cfg2 = write(tmp_path, "f.yaml", "type: tool_trajectory\nminimums: {cancel: 1}\n")
    code, out, _ = run(["eval", str(FIX / "openai_chat_runs.json"), "--config", cfg2], capsys)
    assert code == 1
    assert "0/2 sessions pass or borderline" in out


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("type: tool_trajectory\nmode: any_order\nminimum: {a: 1}\n", "evaluator.minimum"),
        (
            "type: tool_trajectory\nmode: exact\nexpected: [{tool: a, argz: 1}]\n",
            "expected[0].argz",
        ),
        ("evaluators:\n  - type: tool_trajectory\n    mode: nope\n", "evaluators[0].mode"),
        ("type: tool_trajectory\nmode: [unclosed\n", "--config"),
    ],
)
def test_eval_bad_config_exit_2_names_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    cfg = write(tmp_path, "bad.yaml", text)
    code, out, err = run(["eval", str(FIX / "agentv_trace.json"), "--config", cfg], capsys)
    assert code == 2 and out == ""
    assert key in err


# ------------------------------------------------------------------ analyze


def looping_session(tmp_path: Path) -> tuple[str, list[TraceEvent]]:
    """A session that runs the same failing command over and over."""
    events: list[TraceEvent] = []
    seq = 0

    def add(**kw: object) -> None:
        nonlocal seq
        events.append(
            TraceEvent(
                session_id="loop-1", seq=seq, timestamp_ms=1_700_000_000_000 + seq * 1000, **kw
            )  # type: ignore[arg-type]
        )
        seq += 1

    add(type="session_start", metadata={"task": "build the project"})
    for i in range(12):
        add(type="model_step", text="try the build again", input_tokens=100, output_tokens=10)
        add(
            type="tool_call",
            call_id=f"c{i}",
            tool_name="bash",
            input={"command": "mvn compile"},
            params_summary="mvn compile",
        )
        add(
            type="tool_result",
            call_id=f"c{i}",
            tool_name="bash",
            output="mvn: command not found",
            is_error=True,
            error_message="mvn: command not found",
        )
    add(type="session_end")
    path = tmp_path / "loop.jsonl"
    path.write_text("\n".join(dumps_event(e) for e in events) + "\n")
    return str(path), events


def test_analyze_json_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, events = looping_session(tmp_path)
    code, out, err = run(["analyze", "--json", path], capsys)
    assert code == 0
    assert err == ""  # no progress bar when stderr is not a terminal
    records = json_lines(out)
    patterns = [r for r in records if r["kind"] == "pattern"]
    assessments = [r for r in records if r["kind"] == "assessment"]
    assert patterns, "a dozen identical failing calls must be detected"
    assert assessments
    assert {r["session_id"] for r in records} == {"loop-1"}
    assert {"doom_loop", "repeated_error"} & {r["pattern_type"] for r in patterns}
    calls_before = {}
    n = 0
    for ev in events:
        n += ev.type == "tool_call"
        calls_before[ev.seq] = n
    for r in records:
        assert r["severity"] in ("info", "caution", "warning", "critical")
        assert r["text"]
        assert 1 <= r["call_index"] <= 12
        assert r["call_index"] == calls_before[r["seq"]]
    for r in assessments:
        assert r["observer"] and r["text"].startswith(f"### {r['observer']} [")
    # same input, same output lines
    code, out2, _ = run(["analyze", "--json", path], capsys)
    assert out2 == out


def test_analyze_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = looping_session(tmp_path)
    code, out, _ = run(["analyze", path], capsys)
    assert code == 0
    assert out.startswith("== loop-1: 12 tool calls, ")
    assert "## Trajectory Assessment" in out
    assert "_Generated after tool call #" in out


def test_analyze_progress_goes_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = looping_session(tmp_path)
    code, out, err = run(
        ["analyze", "--json", "--progress", path, str(FIX / "events.jsonl")], capsys
    )
    assert code == 0
    assert "2/2" in err
    assert all(line.startswith("{") for line in out.splitlines())


def test_analyze_bad_engine_config_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(tmp_path, "engine.yaml", "observerz: []\n")
    code, out, err = run(["analyze", "--config", cfg, str(FIX / "events.jsonl")], capsys)
    assert code == 2 and out == ""
    assert "observerz" in err


def test_analyze_every_fixture_format(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in FIX.iterdir() if p.suffix != ".md")
    code, out, _ = run(["analyze", *files], capsys)
    assert code == 0
    for sid in (
        "s-a",
        "s-b",
        "agentv_trace",
        "swe_agent_small",
        "demo__repo-1",
        "org__repo-1",
        "openai_chat_runs-task1-trial0",
        "conv_42_x",
    ):
        assert f"== {sid}: " in out
