"""Replay's pure parts: bounds, event-time merge, live diff, Avro/JSONL/Parquet files."""

from __future__ import annotations

import dataclasses
import io
import json

import fastavro
import pytest
from replay_sessions import T0, failing_session

from streams.core.events import TraceEvent
from streams.errors import ConfigError
from streams.importers.offline import analyze_events
from streams.replay.export import export_events, read_avro_events
from streams.replay.reader import Bound, parse_bound, session_key_filter
from streams.replay.replay import diff_live, replay_events, write_avro, write_jsonl
from streams.replay.republish import event_time_order
from streams.serde import AssessmentWire, PatternSerde


def test_parse_bound() -> None:
    assert parse_bound(None, "--from") is None
    assert parse_bound("42", "--from") == Bound("offset", 42)
    assert parse_bound("2023-11-14T22:13:20Z", "--to") == Bound("time", T0)
    with pytest.raises(ConfigError, match="--from"):
        parse_bound("yesterday", "--from")


def test_key_filter() -> None:
    f = session_key_filter(None, "run-*")
    assert f is not None and f(b"run-1") and not f(b"other") and not f(None)
    g = session_key_filter(["x"], None)
    assert g is not None and g(b"x") and not g(b"xy")
    assert session_key_filter(None, None) is None


def test_event_time_order_merges_and_keeps_session_order() -> None:
    a = [TraceEvent("message", "a", i, T0 + t) for i, t in enumerate((0, 30, 10, 40))]
    b = [TraceEvent("message", "b", i, T0 + t) for i, t in enumerate((5, 35))]
    merged = event_time_order(a + b)
    assert [(e.session_id, e.seq) for e in merged] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("a", 3),
    ]  # a's seq 2 (t=10, before its seq 1) stays after seq 1


def test_replay_jsonl_equals_analyze_records() -> None:
    evs = failing_session("s2", T0) + failing_session("s1", T0 + 50)
    result = replay_events(evs)
    buf = io.StringIO()
    n = write_jsonl(result, buf)
    lines = buf.getvalue().splitlines()
    assert n == len(lines) > 0
    # sessions in sorted order, each in event order == analyze over the sorted events
    expected = [
        json.dumps(r, ensure_ascii=False)
        for r in analyze_events(sorted(evs, key=lambda e: e.session_id))
    ]
    assert lines == expected
    assert {json.loads(x)["kind"] for x in lines} == {"pattern", "assessment"}


def test_without_records_the_wire_values_are_the_same() -> None:
    """``keep_records=False`` (every output but JSONL) drops only the records."""
    evs = failing_session("s2", T0) + failing_session("s1", T0 + 50)
    full, lean = replay_events(evs), replay_events(evs, keep_records=False)
    assert list(lean.records()) == [] and list(full.records())
    for a, b in zip(full.ordered(), lean.ordered(), strict=True):
        assert (a.patterns, a.assessments, a.events, a.tool_calls, a.final_severity) == (
            b.patterns,
            b.assessments,
            b.events,
            b.tool_calls,
            b.final_severity,
        )
        assert a.patterns and a.assessments


def test_avro_output_reads_back(tmp_path) -> None:
    result = replay_events(failing_session("s1", T0))
    path = tmp_path / "out.avro"
    n = write_avro(result, str(path))
    with open(path, "rb") as handle:
        items = list(fastavro.reader(handle, return_record_name=True))
    assert (
        len(items)
        == n
        == len(result.sessions["s1"].patterns) + len(result.sessions["s1"].assessments)
    )
    names = {name for name, _ in items}
    assert names == {"io.trajectory.v1.PatternDetection", "io.trajectory.v1.AssessmentRecord"}
    rendered = [r["rendered"] for name, r in items if name.endswith("AssessmentRecord")]
    assert rendered == [a.rendered for a in result.sessions["s1"].assessments]
    # a datum equals what the serde puts on the wire for the same value
    first_p = result.sessions["s1"].patterns[0]
    wire = PatternSerde().to_record(first_p)
    datum = next(r for name, r in items if name.endswith("PatternDetection"))
    datum["timestamp_ms"] = first_p.timestamp_ms  # fastavro returns timestamp-millis as datetime
    datum["first_seen_ms"] = wire["first_seen_ms"]
    assert datum == wire


def test_diff_live_identical_then_differences() -> None:
    result = replay_events(failing_session("s1", T0))
    sr = result.sessions["s1"]
    timer = AssessmentWire("s1", 99, T0, "timer", rendered="whatever")
    other = AssessmentWire("zz", 1, T0, "event", rendered="not ours")
    ok = diff_live(result, list(sr.patterns), [*sr.assessments, timer, other])
    assert ok.ok, ok.render()
    assert ok.timer_assessments_ignored == 1
    assert ok.assessments_compared == len(sr.assessments)

    changed = dataclasses.replace(sr.assessments[0], rendered=sr.assessments[0].rendered + "x")
    bad = diff_live(result, list(sr.patterns), [changed, *sr.assessments[1:]])
    assert not bad.ok and "rendered markdown differs" in bad.render()

    missing = diff_live(result, list(sr.patterns[1:]), list(sr.assessments))
    assert not missing.ok and "pattern #" in missing.differences[0]

    # only the compacted tail survived: older assessments gone is not a difference
    tail = diff_live(result, list(sr.patterns), [sr.assessments[-1]])
    assert tail.ok, tail.render()
    # but the last one missing (no later live record) is
    gone = diff_live(result, list(sr.patterns), list(sr.assessments[:-1]))
    assert not gone.ok and "replay only" in gone.render()


@pytest.mark.parametrize("fmt", ["jsonl", "avro", "parquet"])
def test_export_round_trip(tmp_path, fmt: str) -> None:
    evs = [
        *failing_session("s1", T0, 3),
        TraceEvent(
            "message",
            "s1",
            99,
            T0 + 99000,
            text="héllo",
            metadata={"k": "v"},
            input={"nested": [1, 2.5, None, {"a": True}]},
        ),
    ]
    path = tmp_path / f"events.{fmt}"
    assert export_events(iter(evs), str(path), fmt) == len(evs)
    if fmt == "jsonl":
        from streams.core.jsonl import read_jsonl

        with open(path, encoding="utf-8") as handle:
            back = list(read_jsonl(handle))
    elif fmt == "avro":
        back = read_avro_events(str(path))
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        from streams.serde import EventSerde

        rows = pq.read_table(str(path)).to_pylist()
        for r in rows:
            r["metadata"] = dict(r["metadata"] or [])
        back = [EventSerde().from_record(r) for r in rows]
    assert back == evs


def test_export_unknown_format(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--format"):
        export_events([], str(tmp_path / "x"), "csv")


def test_diff_live_complete_history_requires_every_assessment() -> None:
    result = replay_events(failing_session("s1", T0))
    sr = result.sessions["s1"]
    assert len(sr.assessments) >= 3
    full = diff_live(result, list(sr.patterns), list(sr.assessments), complete=True)
    assert full.ok, full.render()
    middle = sr.assessments[1]
    holes = [a for a in sr.assessments if a is not middle]
    assert diff_live(result, list(sr.patterns), holes).ok  # compacted topic: tolerated
    bad = diff_live(result, list(sr.patterns), holes, complete=True)
    assert not bad.ok and f"seq {middle.seq}: replay only" in bad.render()


def test_split_plan_balances_and_covers_every_range() -> None:
    from streams.replay.parallel import split_plan
    from streams.replay.reader import PartitionRange

    ranges = [PartitionRange(f"t{i}", 0, 0, size) for i, size in enumerate((50, 10, 30, 0, 20))]
    shares = split_plan(ranges, 2)
    assert sorted(r.topic for s in shares for r in s) == ["t0", "t1", "t2", "t4"]  # empty dropped
    assert sorted(sum(r.size for r in s) for s in shares) == [50, 60]
    assert len(split_plan(ranges, 10)) == 4 and len(split_plan(ranges, 1)) == 1
