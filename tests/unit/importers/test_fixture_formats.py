"""Each importer against small hand-written fixtures (always available)."""

from __future__ import annotations

import gzip
import shutil
from collections import Counter
from pathlib import Path

import pytest
from importer_invariants import SID, check_invariants

from streams.core.events import TraceEvent
from streams.errors import ImportFormatError
from streams.importers import FORMATS, detect_format, read_events
from streams.importers._common import SYNTHETIC_BASE_MS, sanitize_session_id
from streams.importers.swe_agent import observation_error

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "importers"

CASES = {
    "events.jsonl": "jsonl",
    "agentv_trace.json": "agentv",
    "agentv_array.json": "agentv",
    "swe_agent_small.traj": "swe-agent",
    "mini_swe_agent_small.traj.json": "mini-swe-agent",
    "openhands_small.jsonl": "openhands",
    "openai_chat_runs.json": "openai-chat",
    "otlp_genai.json": "otlp",
    "atif_v18.json": "atif",
}


def types(events: list[TraceEvent]) -> list[str]:
    return [e.type for e in events]


def test_formats_tuple_names_every_format() -> None:
    assert set(FORMATS) == set(CASES.values())


@pytest.mark.parametrize(("name", "fmt"), sorted(CASES.items()))
def test_detect_and_invariants(name: str, fmt: str) -> None:
    path = FIX / name
    assert detect_format(path) == fmt
    events = list(read_events(path))
    assert events
    check_invariants(events)
    # deterministic: the same file gives the same events
    assert events == list(read_events(path, format=fmt))


@pytest.mark.parametrize("name", sorted(CASES))
def test_gzip_detected_by_magic_bytes_not_name(name: str, tmp_path: Path) -> None:
    plain = list(read_events(FIX / name))
    misleading = tmp_path / name  # gzip content under the plain name
    misleading.write_bytes(gzip.compress((FIX / name).read_bytes()))
    assert detect_format(misleading) == CASES[name]
    gz_events = list(read_events(misleading))
    assert [(e.type, e.seq, e.timestamp_ms, e.tool_name) for e in gz_events] == [
        (e.type, e.seq, e.timestamp_ms, e.tool_name) for e in plain
    ]
    # and a plain file with a .gz name is read as plain text
    fake_gz = tmp_path / (name + ".gz")
    shutil.copy(FIX / name, fake_gz)
    assert len(list(read_events(fake_gz))) == len(plain)


def test_jsonl_interleaved_sessions() -> None:
    events = list(read_events(FIX / "events.jsonl"))
    counts = Counter(e.session_id for e in events)
    assert counts == {"s-a": 4, "s-b": 3}
    failed = [e for e in events if e.type == "tool_result" and e.is_error]
    assert [(e.session_id, e.error_message) for e in failed] == [("s-a", "boom")]


def test_agentv_wrapped_and_bare() -> None:
    wrapped = list(read_events(FIX / "agentv_trace.json"))
    assert {e.session_id for e in wrapped} == {"agentv_trace"}
    assert [e.seq for e in wrapped] == list(range(8))
    assert [e.tool_name for e in wrapped if e.type == "tool_call"] == [
        "knowledgeSearch",
        "knowledgeSearch",
        "documentRetrieve",
    ]
    assert wrapped[1].input == {"query": "X configuration"}
    bare = list(read_events(FIX / "agentv_array.json"))
    assert types(bare) == ["model_step", "tool_call", "tool_result"]


def test_swe_agent_mapping() -> None:
    events = list(read_events(FIX / "swe_agent_small.traj"))
    assert {e.session_id for e in events} == {"swe_agent_small"}
    assert types(events) == [
        "session_start",
        *["model_step", "tool_call", "tool_result"] * 4,
        "model_step",
        "message",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "message",
        "budget",
        "session_end",
    ]
    calls = [e for e in events if e.type == "tool_call"]
    assert [c.tool_name for c in calls] == ["find_file", "open", "javac", "python", "submit"]
    assert calls[1].input == "src/Foo.java 10"
    assert calls[4].input == ""
    results = [e for e in events if e.type == "tool_result"]
    # "[File: ..." views are file content: "Error:" inside is not a failure
    assert [r.is_error for r in results] == [False, False, True, True, False]
    assert "command not found" in (results[2].error_message or "")
    # synthetic, deterministic event time: base + (step + 1) * 1000
    assert calls[0].timestamp_ms == SYNTHETIC_BASE_MS + 1000
    assert calls[3].timestamp_ms == SYNTHETIC_BASE_MS + 4000
    assert results[0].timestamp_ms == calls[0].timestamp_ms + 1
    budget = events[-2].budget
    assert budget is not None and budget.tokens_used == 12345
    end = events[-1].metadata
    assert end["exit_status"] == "submitted (exit_cost)"
    # the harness' exit_cost is not a tool call of the agent
    assert events[-3].metadata == {"role": "environment", "harness_exit": "exit_cost"}
    assert end["resolved"] == "unknown"
    assert end["api_calls"] == "6"
    assert events[0].metadata["task"] == "ISSUE: NPE in Foo.bar"


def test_swe_agent_session_id_prefixes_model_folder(tmp_path: Path) -> None:
    trajs = tmp_path / "gpt-x" / "trajs"
    trajs.mkdir(parents=True)
    target = trajs / "org__repo-7.traj.gz"
    target.write_bytes(gzip.compress((FIX / "swe_agent_small.traj").read_bytes()))
    assert {e.session_id for e in read_events(target)} == {"gpt-x.org__repo-7"}


@pytest.mark.parametrize(
    ("text", "is_error"),
    [
        ("/bin/bash: line 3: mvn: command not found", True),
        ("ls: cannot access 'x': No such file or directory", True),
        ("Traceback (most recent call last):\n  File 'a.py'", True),
        ("src/Foo.java:12: error: cannot find symbol", True),
        ("[ERROR] BUILD FAILURE", True),
        ("Error: File name src/x not found.", True),
        ("File Foo.java not found", True),
        ('[File: /r/a.java (3 lines total)]\n1: throw new Error("Error: x");', False),
        ('Found 2 matches for "Error:" in /r', False),
        ('No matches found for "foo" in /r', False),
        ("", False),
        ("BUILD SUCCESS", False),
    ],
)
def test_swe_agent_observation_error(text: str, is_error: bool) -> None:
    assert (observation_error(text) is not None) is is_error


def test_mini_swe_agent_mapping() -> None:
    events = list(read_events(FIX / "mini_swe_agent_small.traj.json"))
    assert {e.session_id for e in events} == {"demo__repo-1"}
    assert types(events) == [
        "session_start",
        "message",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "error",
        "model_step",
        "tool_call",
        "tool_result",
        "session_end",
    ]
    calls = [e for e in events if e.type == "tool_call"]
    assert [c.input for c in calls] == [
        {"command": "ls -la"},
        {"command": "python -m pytest -q"},
        {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"},
    ]
    assert {c.tool_name for c in calls} == {"bash"}
    results = [e for e in events if e.type == "tool_result"]
    assert [r.is_error for r in results] == [False, True, False]
    assert results[1].metadata["returncode"] == "1"
    steps = [e for e in events if e.type == "model_step"]
    assert (steps[0].input_tokens, steps[0].output_tokens) == (1000, 50)
    assert steps[0].text == "list files"
    assert calls[0].timestamp_ms == 1_763_510_000_000
    # a result is stamped when the agent saw it: the next assistant turn
    assert results[0].timestamp_ms == 1_763_510_010_000
    assert events[0].metadata["task"].startswith("<pr_description>")
    assert events[-1].metadata["exit_status"] == "Submitted"


def test_openhands_mapping() -> None:
    events = list(read_events(FIX / "openhands_small.jsonl"))
    by_sid: dict[str, list[TraceEvent]] = {}
    for e in events:
        by_sid.setdefault(e.session_id, []).append(e)
    assert list(by_sid) == ["org__repo-1", "org__repo-2"]
    first = by_sid["org__repo-1"]
    assert types(first) == [
        "session_start",
        "message",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "tool_call",
        "tool_result",
        "error",
        "message",
        "budget",
        "session_end",
    ]
    calls = [e for e in first if e.type == "tool_call"]
    assert [(c.tool_name, c.call_id) for c in calls] == [("run", "toolu_01"), ("edit", "toolu_02")]
    assert calls[0].input == {"command": "make"}
    results = [e for e in first if e.type == "tool_result"]
    assert [r.is_error for r in results] == [True, True]
    assert results[0].error_message == "exit code 2"
    assert first[2].input_tokens == 5920
    assert first[-2].budget is not None and first[-2].budget.tokens_used == 11920 + 218
    second = by_sid["org__repo-2"]
    assert [r.is_error for r in second if r.type == "tool_result"] == [False, True]
    assert second[-1].metadata["error"].startswith("RuntimeError: Agent reached maximum")
    assert first[-1].metadata["exit_status"] == "finished"
    assert first[0].metadata["task"] == "Fix the segfault"


def test_openai_chat_tau_bench_runs() -> None:
    events = list(read_events(FIX / "openai_chat_runs.json"))
    sids = list(dict.fromkeys(e.session_id for e in events))
    assert sids == ["openai_chat_runs-task0-trial0", "openai_chat_runs-task1-trial0"]
    run0 = [e for e in events if e.session_id == sids[0]]
    assert types(run0) == [
        "session_start",
        "message",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "tool_call",
        "tool_result",
        "model_step",
        "session_end",
    ]
    calls = [e for e in run0 if e.type == "tool_call"]
    # tau-bench reuses call ids inside a run: they are made unique
    assert [c.call_id for c in calls] == ["call_A", "call_A#1"]
    assert calls[1].input == {"flight": "HAT1"}
    results = [e for e in run0 if e.type == "tool_result"]
    assert [(r.call_id, r.tool_name, r.is_error) for r in results] == [
        ("call_A", "get_user_details", False),
        ("call_A#1", "book_reservation", True),
    ]
    assert run0[-1].metadata["reward"] == "0.0"
    assert run0[-1].metadata["resolved"] == "false"
    run1_end = [e for e in events if e.session_id == sids[1]][-1]
    assert run1_end.metadata["resolved"] == "true"
    assert run0[0].metadata["task"] == "Book a flight"


def test_otlp_genai_spans() -> None:
    events = list(read_events(FIX / "otlp_genai.json"))
    assert {e.session_id for e in events} == {"conv_42_x"}
    assert types(events) == [
        "session_start",
        "model_step",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "session_end",
    ]
    base = 1_736_935_200_000
    step = events[1]
    assert (step.timestamp_ms, step.input_tokens, step.output_tokens) == (base + 1000, 120, 30)
    call, ok, call2, bad = events[2:6]
    assert (call.tool_name, call.call_id, call.input) == ("get_weather", "call_1", {"city": "NYC"})
    assert (ok.output, ok.is_error, ok.timestamp_ms, ok.latency_ms) == (
        "72F",
        False,
        base + 2500,
        500,
    )
    assert (call2.tool_name, bad.is_error, bad.error_message) == (
        "get_time",
        True,
        "upstream timed out",
    )


def test_unknown_content_names_tried_formats(tmp_path: Path) -> None:
    path = tmp_path / "weird.json"
    path.write_text('{"hello": "world"}')
    with pytest.raises(ImportFormatError) as info:
        detect_format(path)
    for fmt in FORMATS:
        assert fmt in str(info.value)
    with pytest.raises(ImportFormatError):
        list(read_events(path))


def test_not_json_at_all(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some text\nand more\n")
    with pytest.raises(ImportFormatError, match="line 1 is not JSON"):
        detect_format(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(ImportFormatError, match="empty file"):
        list(read_events(path))


def test_forced_wrong_format_is_an_error() -> None:
    with pytest.raises(ImportFormatError, match="SWE-agent"):
        list(read_events(FIX / "mini_swe_agent_small.traj.json", format="swe-agent"))
    with pytest.raises(ImportFormatError, match="unknown format"):
        list(read_events(FIX / "events.jsonl", format="csv"))


def test_bad_step_names_field_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.traj"
    path.write_text('{"trajectory": [{"action": "ls", "observation": 5}], "info": {}}')
    with pytest.raises(ImportFormatError, match=r"trajectory\[0\]\.observation"):
        list(read_events(path))


def test_tool_result_for_unknown_call_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(
        '{"traj": [{"role": "user", "content": "hi"},'
        ' {"role": "tool", "tool_call_id": "nope", "content": "x"}]}'
    )
    with pytest.raises(ImportFormatError, match=r"traj\[1\]\.tool_call_id"):
        list(read_events(path))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("django__django-13279", "django__django-13279"),
        ("conv 42/x", "conv_42_x"),
        ("///", "session"),
        ("a" * 250, None),
    ],
)
def test_sanitize_session_id(raw: str, expected: str | None) -> None:
    out = sanitize_session_id(raw)
    assert SID.match(out)
    if expected is not None:
        assert out == expected
    else:
        assert len(out) == 200
        assert out == sanitize_session_id(raw)  # deterministic
        assert out != sanitize_session_id("a" * 251)  # distinct long ids stay distinct


def _span(trace: str, span: str, start_s: int, attrs: dict[str, object]) -> dict[str, object]:
    def value(v: object) -> dict[str, object]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": v}

    return {
        "traceId": trace,
        "spanId": span,
        "name": "span",
        "startTimeUnixNano": str(start_s * 1_000_000_000),
        "endTimeUnixNano": start_s * 1_000_000_000 + 5_000_000,
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
    }


def test_otlp_json_lines_sessions_by_conversation_or_trace(tmp_path: Path) -> None:
    import json

    doc1 = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            _span(
                                "t1",
                                "a",
                                20,
                                {
                                    "gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": "grep",
                                    "gen_ai.conversation.id": "conv-1",
                                },
                            ),
                            _span(
                                "t1",
                                "b",
                                10,
                                {
                                    "gen_ai.operation.name": "chat",
                                    "gen_ai.conversation.id": "conv-1",
                                    "gen_ai.usage.input_tokens": 7,
                                },
                            ),
                        ]
                    }
                ]
            }
        ]
    }
    doc2 = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            _span(
                                "t2",
                                "c",
                                30,
                                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ls"},
                            ),
                            _span("t2", "d", 31, {"http.method": "GET"}),
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(doc1) + "\n" + json.dumps(doc2) + "\n")
    assert detect_format(path) == "otlp"
    events = list(read_events(path))
    check_invariants(events)
    by_sid: dict[str, list[str]] = {}
    for e in events:
        by_sid.setdefault(e.session_id, []).append(e.type)
    # spans are ordered by start time, not file order; non-GenAI spans give no event
    assert by_sid == {
        "conv-1": ["session_start", "model_step", "tool_call", "tool_result", "session_end"],
        "t2": ["session_start", "tool_call", "tool_result", "session_end"],
    }
    step = next(e for e in events if e.type == "model_step")
    assert (step.timestamp_ms, step.input_tokens) == (10_000, 7)
    result = next(e for e in events if e.type == "tool_result" and e.session_id == "conv-1")
    assert (result.call_id, result.timestamp_ms, result.is_error) == ("a", 20_005, False)


def test_otlp_tool_span_without_name_is_rejected(tmp_path: Path) -> None:
    import json

    doc = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {"spans": [_span("t", "s", 1, {"gen_ai.operation.name": "execute_tool"})]}
                ]
            }
        ]
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFormatError, match=r"spans\[0\]\.attributes: execute_tool span"):
        list(read_events(path))


def test_openhands_single_run_document(tmp_path: Path) -> None:
    line = (FIX / "openhands_small.jsonl").read_text().splitlines()[0]
    path = tmp_path / "one.json"
    path.write_text(line)
    assert detect_format(path) == "openhands"
    assert {e.session_id for e in read_events(path)} == {"org__repo-1"}
