"""ATIF v1.4-v1.8 import and v1.8 export, checked against the ``atif`` package's models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from importer_invariants import check_invariants

from streams.errors import ImportFormatError
from streams.importers import detect_format, read_events
from streams.importers.atif import to_atif

atif = pytest.importorskip("atif", reason="the atif package (test extra) validates ATIF")


FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "importers" / "atif_v18.json"


def v18_doc() -> dict[str, Any]:
    """A v1.8 trajectory (the fixture): a user task, an agent step with two tool calls
    (one failing), a deterministic dispatch, and an embedded sub-agent."""
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    return doc


def test_the_fixture_is_valid_atif() -> None:
    atif.Trajectory.model_validate(v18_doc())


def test_atif_v18_import(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(v18_doc()))
    assert detect_format(path) == "atif"
    events = list(read_events(path))
    check_invariants(events)
    main = [e for e in events if e.session_id == "run-7"]
    sub = [e for e in events if e.session_id == "run-7.sub-1"]
    assert [e.type for e in main] == [
        "session_start",
        "message",
        "model_step",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "tool_call",
        "tool_result",
        "session_end",
    ]
    assert main[0].metadata["task"] == "Fix the failing test"
    step = main[2]
    assert (step.text, step.input_tokens, step.output_tokens) == ("Let me run the tests", 1200, 80)
    bad, ok = main[5], main[6]
    assert (bad.call_id, bad.tool_name, bad.is_error, bad.error_message) == (
        "c1",
        "bash",
        True,
        "exit 1",
    )
    assert "sub-1" in ok.metadata["subagent_trajectory_ref"] and not ok.is_error
    assert main[3].input == {"cmd": "pytest"}
    assert main[1].timestamp_ms == 1_767_261_600_000
    assert [e.type for e in sub][1:4] == ["message", "model_step", "tool_call"]
    assert {e.parent_session_id for e in sub} == {"run-7"}
    assert {e.parent_session_id for e in main} == {None}


def test_atif_v14_shape_imports_and_other_versions_are_named(tmp_path: Path) -> None:
    doc = {
        "schema_version": "ATIF-v1.4",
        "session_id": "old run",
        "agent": {"name": "a", "version": "0"},
        "steps": [
            {
                "step_id": 1,
                "source": "agent",
                "message": "hi",
                "tool_calls": [{"tool_call_id": "x", "function_name": "ls", "arguments": {}}],
                "observation": {"results": [{"source_call_id": "x", "content": "a b"}]},
            },
        ],
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    events = list(read_events(path))
    assert {e.session_id for e in events} == {"old_run"}
    assert [e.type for e in events][1:4] == ["model_step", "tool_call", "tool_result"]
    doc["schema_version"] = "ATIF-v1.3"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFormatError, match=r"ATIF-v1\.3.*use ATIF-v1\.4 \.\.\. ATIF-v1\.8"):
        list(read_events(path))


def test_export_is_valid_atif_v18_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(v18_doc()))
    events = list(read_events(path))
    docs = to_atif(events)
    assert len(docs) == 1  # the sub-agent is embedded in its parent
    model = atif.Trajectory.model_validate(docs[0])
    assert model.schema_version == "ATIF-v1.8"
    assert [s.trajectory_id for s in model.subagent_trajectories or []] == ["sub-1"]
    out = tmp_path / "exported.json"
    out.write_text(json.dumps(docs[0]))
    again = list(read_events(out))

    def calls(evs: list[Any]) -> list[tuple[Any, ...]]:
        return [
            (
                e.session_id,
                e.type,
                e.call_id,
                e.tool_name,
                e.input,
                e.output,
                e.is_error,
                e.input_tokens,
                e.parent_session_id,
            )
            for e in evs
            if e.type in ("tool_call", "tool_result", "model_step")
        ]

    assert calls(again) == calls(events)


def test_export_of_otlp_spans_is_valid_atif() -> None:
    fixture = FIXTURE.parent / "otlp_genai.json"
    docs = to_atif(read_events(fixture))
    for doc in docs:
        atif.Trajectory.model_validate(doc)
    steps = docs[0]["steps"]
    assert any(s.get("llm_call_count") == 0 or s.get("tool_calls") for s in steps)
