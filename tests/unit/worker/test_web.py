"""Pure helpers of the worker's HTTP view (streams.worker.web): no Faust app, no Kafka."""

from __future__ import annotations

import pytest

from streams.core.assessment import Assessment, CurrentAssessment
from streams.worker.web import (
    BadRequest,
    SessionRow,
    assessment_json,
    bad_id_body,
    error_markdown,
    key_partition,
    no_assessment_body,
    owner_url,
    parse_glob,
    parse_min_severity,
    select_rows,
    unknown_session_body,
    wants_json,
)


def _row(sid: str, severity: str | None) -> SessionRow:
    return SessionRow(sid, 3, 2, 1_000, severity, 1 if severity else None, 2 if severity else None)


ROWS = [
    _row("ci-b", "warning"),
    _row("ci-a", "caution"),
    _row("dev-1", "info"),
    _row("dev-2", None),
]


def test_min_severity_keeps_at_least_that_and_drops_unassessed() -> None:
    assert [r.session_id for r in select_rows(ROWS, "caution", None)] == ["ci-a", "ci-b"]
    assert [r.session_id for r in select_rows(ROWS, "warning", None)] == ["ci-b"]
    # info = any assessment at all; a session without one has no severity to compare
    assert [r.session_id for r in select_rows(ROWS, "info", None)] == ["ci-a", "ci-b", "dev-1"]
    assert [r.session_id for r in select_rows(ROWS, None, None)] == [
        "ci-a",
        "ci-b",
        "dev-1",
        "dev-2",
    ]


def test_glob_is_case_sensitive_fnmatch_and_combines_with_severity() -> None:
    assert [r.session_id for r in select_rows(ROWS, None, "dev-*")] == ["dev-1", "dev-2"]
    assert [r.session_id for r in select_rows(ROWS, None, "CI-*")] == []
    assert [r.session_id for r in select_rows(ROWS, "caution", "ci-?")] == ["ci-a", "ci-b"]
    assert select_rows(ROWS, "caution", "dev-*") == []


def test_parse_query_parameters() -> None:
    assert parse_min_severity(None) is None
    assert parse_min_severity("") is None
    assert parse_min_severity("Warning") == "warning"
    with pytest.raises(BadRequest, match="min_severity: 'loud' is not one of info, caution"):
        parse_min_severity("loud")
    assert parse_glob("a*") == "a*"
    assert parse_glob(None) is None
    with pytest.raises(BadRequest, match="glob: longer than 200"):
        parse_glob("x" * 201)


@pytest.mark.parametrize(
    ("accept", "fmt", "expected"),
    [
        (None, None, False),
        ("*/*", None, False),
        ("application/json", None, True),
        ("text/markdown", None, False),
        ("text/markdown, application/json;q=0.5", None, False),
        ("text/markdown;q=0.2, application/json", None, True),
        ("application/json;q=0", None, False),
        ("text/*, application/json", None, False),  # tie goes to markdown
        ("text/markdown", "json", True),
        ("application/json", "markdown", False),
    ],
)
def test_wants_json(accept: str | None, fmt: str | None, expected: bool) -> None:
    assert wants_json(accept, fmt) is expected


def test_wants_json_rejects_unknown_format() -> None:
    with pytest.raises(BadRequest, match="format"):
        wants_json(None, "xml")


def test_bad_id_body_only_for_malformed_ids() -> None:
    assert bad_id_body("ok.session_1-x") is None
    for bad in ("a b", "", "x" * 201, "a/b", "é"):
        body = bad_id_body(bad)
        assert body is not None and body["error"] == "malformed session id"
        assert len(body["session_id"]) <= 200


def test_404_bodies_say_which() -> None:
    assert unknown_session_body("s1")["error"] == "unknown session"
    body = no_assessment_body("s1", "because")
    assert body == {"error": "no assessment yet", "session_id": "s1", "hint": "because"}
    md = error_markdown(body, 404)
    assert md.splitlines()[0] == "# 404: no assessment yet"
    assert "session: `s1`" in md and "because" in md


def test_assessment_json_carries_the_rendering() -> None:
    current = CurrentAssessment(
        assessments=(Assessment(observer_name="patterns", summary="looping", severity="warning"),),
        generated_at_ms=5,
        call_index=7,
        session_id="s",
        seq=12,
        trigger="event",
    )
    doc = assessment_json("s", current)
    assert (doc["severity"], doc["call_index"], doc["seq"], doc["trigger"]) == (
        "warning",
        7,
        12,
        "event",
    )
    assert doc["rendered"] == current.render() and doc["observers"] == ["patterns"]


def test_key_partition_matches_aiokafka_default_partitioner() -> None:
    """Faust routes with aiokafka's DefaultPartitioner; ours must agree for every key."""
    from aiokafka.partitioner import DefaultPartitioner

    for n in (1, 3, 6, 12):
        for i in range(200):
            sid = f"sess-{i}"
            want = DefaultPartitioner()(sid.encode(), list(range(n)), list(range(n)))
            assert key_partition(sid, n) == want
    with pytest.raises(ValueError):
        key_partition("x", 0)


def test_owner_url() -> None:
    meta = {
        "http://127.0.0.1:7001": {"t-sessions-changelog": [0, 2]},
        "http://127.0.0.1:7002": {"t-sessions-changelog": [1], "other": [0]},
    }
    assert owner_url(meta, "t-sessions-changelog", 2) == "http://127.0.0.1:7001"
    assert owner_url(meta, "t-sessions-changelog", 1) == "http://127.0.0.1:7002"
    assert owner_url(meta, "t-sessions-changelog", 5) is None
    assert owner_url({}, "t-sessions-changelog", 0) is None
