"""Replay and export against a real broker: sessions published with the SDK into a
unique prefix, read back with bounds, through the core, into files and other prefixes."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer
from kafka_io import publish
from workloads import by_session, session_events

from streams.cli import main
from streams.core.events import TraceEvent
from streams.core.jsonl import dumps_event, read_jsonl
from streams.replay.reader import open_event_reader
from streams.replay.replay import replay_events
from streams.serde import AssessmentSerde, AssessmentWire, EventSerde, PatternSerde
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T0 = 1_700_000_000_000


def cli(*argv: str) -> int:
    return main(list(argv))


def common(settings: Settings) -> list[str]:
    return ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]


@pytest.fixture
def published(settings: Settings) -> list[TraceEvent]:
    evs = session_events("s-b", T0 + 70) + session_events("s-a", T0, fail_every=2)
    publish(settings, evs)
    return evs


def test_replay_jsonl_equals_analyze_json(
    settings: Settings, published: list[TraceEvent], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "replay.jsonl"
    assert (
        cli(
            "replay", "--sessions", "s-*", *common(settings), "--output", "jsonl", "--out", str(out)
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"replayed {len(published)} events" in err and "events/s" in err
    src = tmp_path / "events.jsonl"
    src.write_text("".join(dumps_event(e) + "\n" for e in by_session(published)), "utf-8")
    assert cli("analyze", "--json", str(src)) == 0
    expected = capsys.readouterr().out
    got = out.read_text("utf-8")
    assert got == expected  # byte-identical lines
    kinds = {json.loads(line)["kind"] for line in got.splitlines()}
    assert kinds == {"pattern", "assessment"}


def test_replay_from_events_topic_matches_sessions(
    settings: Settings, published: list[TraceEvent], create_topics, tmp_path: Path, capsys
) -> None:
    create_topics(settings.events_topic, partitions=3)
    serde = EventSerde()
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    for ev in published:  # as the router writes it: key = session id
        producer.produce(settings.events_topic, serde.encode(ev), ev.session_id.encode())
    assert producer.flush(30) == 0
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert (
        cli("replay", "--sessions", "*", *common(settings), "--output", "jsonl", "--out", str(a))
        == 0
    )
    assert (
        cli(
            "replay",
            "--sessions",
            "*",
            "--source",
            "events",
            *common(settings),
            "--output",
            "jsonl",
            "--out",
            str(b),
        )
        == 0
    )
    assert a.read_bytes() == b.read_bytes() and a.stat().st_size > 0
    # one session picked out of the shared topic by key
    c = tmp_path / "c.jsonl"
    assert (
        cli(
            "replay",
            "--session",
            "s-a",
            "--source",
            "events",
            *common(settings),
            "--output",
            "jsonl",
            "--out",
            str(c),
        )
        == 0
    )
    lines = c.read_text("utf-8").splitlines()
    assert lines and {json.loads(x)["session_id"] for x in lines} == {"s-a"}


def test_replay_avro_output(
    settings: Settings, published: list[TraceEvent], tmp_path: Path
) -> None:
    path = tmp_path / "out.avro"
    assert (
        cli("replay", "--session", "s-b", *common(settings), "--output", "avro", "--out", str(path))
        == 0
    )
    with open(path, "rb") as handle:
        items = list(fastavro.reader(handle, return_record_name=True))
    expected = replay_events([e for e in published if e.session_id == "s-b"])
    sr = expected.sessions["s-b"]
    assert len(items) == len(sr.patterns) + len(sr.assessments) > 0
    rendered = [r["rendered"] for n, r in items if n.endswith("AssessmentRecord")]
    assert rendered == [a.rendered for a in sr.assessments]
    types = [r["pattern_type"] for n, r in items if n.endswith("PatternDetection")]
    assert types == [p.pattern_type for p in sr.patterns]


def test_bounds_by_offset_and_time(settings: Settings, tmp_path: Path) -> None:
    first = session_events("s-t", T0, calls=3)
    second_part = session_events("s-t", T0, calls=6)[len(first) - 1 :]  # continues the session
    second = [
        TraceEvent(**{**{f: getattr(e, f) for f in e.__slots__}, "seq": len(first) - 1 + i})
        for i, e in enumerate(second_part)
    ]
    publish(settings, first[:-1])
    time.sleep(1.2)
    boundary = time.time()
    time.sleep(0.2)
    publish(settings, second)
    all_events = first[:-1] + second

    def read(**kw: object) -> list[TraceEvent]:
        reader = open_event_reader(settings.bootstrap, settings.prefix, session="s-t", **kw)
        return list(reader)

    assert [e.seq for e in read()] == list(range(len(all_events)))
    from streams.replay.reader import Bound, parse_bound

    assert [e.seq for e in read(start=Bound("offset", 2), end=Bound("offset", 4))] == [2, 3, 4]
    from streams.core.jsonl import ms_to_iso

    iso = ms_to_iso(int(boundary * 1000))
    later = read(start=parse_bound(iso, "--from"))
    assert [e.seq for e in later] == [e.seq for e in second]
    earlier = read(end=parse_bound(iso, "--to"))
    assert [e.seq for e in earlier] == [e.seq for e in first[:-1]]
    # the CLI flags say the same
    out = tmp_path / "b.jsonl"
    assert (
        cli(
            "export",
            "--session",
            "s-t",
            *common(settings),
            "--from",
            "2",
            "--to",
            "4",
            "--format",
            "jsonl",
            "--out",
            str(out),
        )
        == 0
    )
    assert [e.seq for e in read_jsonl(out.read_text("utf-8").splitlines())] == [2, 3, 4]


def test_export_round_trips(
    settings: Settings, published: list[TraceEvent], tmp_path: Path
) -> None:
    for fmt in ("jsonl", "avro"):
        out = tmp_path / f"all.{fmt}"
        assert (
            cli("export", "--sessions", "*", *common(settings), "--format", fmt, "--out", str(out))
            == 0
        )
        if fmt == "jsonl":
            back = list(read_jsonl(out.read_text("utf-8").splitlines()))
        else:
            from streams.replay.export import read_avro_events

            back = read_avro_events(str(out))
        assert back == by_session(published)


def test_undecodable_records_reported_or_strict(
    settings: Settings, published: list[TraceEvent], tmp_path: Path, capsys
) -> None:
    topic = settings.session_topic("s-a")
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    producer.produce(topic, b"\x07not avro", b"s-a")
    assert producer.flush(30) == 0
    bad_offset = len([e for e in published if e.session_id == "s-a"])
    out = tmp_path / "x.jsonl"
    code = cli(
        "replay", "--session", "s-a", *common(settings), "--output", "jsonl", "--out", str(out)
    )
    err = capsys.readouterr().err
    assert code == 1
    assert f"{topic}[0]@{bad_offset}" in err and "MalformedMessageError" in err
    assert "1 undecodable" in err
    assert cli("replay", "--session", "s-a", *common(settings), "--strict") == 2
    assert "--strict" in capsys.readouterr().err


def test_speed_republish_into_other_prefix(
    settings: Settings, published: list[TraceEvent], topic_prefix: str, capsys
) -> None:
    target = topic_prefix + "x"
    began = time.monotonic()
    assert (
        cli("replay", "--sessions", "*", *common(settings), "--speed", "20", "--to-prefix", target)
        == 0
    )
    took = time.monotonic() - began
    span_ms = max(e.timestamp_ms for e in published) - min(e.timestamp_ms for e in published)
    assert took >= span_ms / 1000 / 20 * 0.9  # paced, not dumped
    assert "re-published" in capsys.readouterr().err
    back = list(open_event_reader(settings.bootstrap, target, sessions="*"))

    def shape(e: TraceEvent) -> tuple:
        return (
            e.session_id,
            e.type,
            e.timestamp_ms,
            e.tool_name,
            e.call_id,
            e.input,
            e.output,
            e.is_error,
            e.error_message,
            e.input_tokens,
            e.output_tokens,
            e.budget,
            dict(e.metadata),
        )

    assert [shape(e) for e in back] == [shape(e) for e in by_session(published)]
    assert [e.seq for e in back if e.session_id == "s-a"] == list(range(len(back) // 2))
    # the re-published traffic gives the same detections
    assert [r for r in replay_events(back).records()] == list(replay_events(published).records())


def test_compare_live(
    settings: Settings, published: list[TraceEvent], create_topics, capsys
) -> None:
    """The live topics hold what the worker wrote; here written from the replay's own
    wire values (the worker lane writes them for real), plus a timer assessment."""
    create_topics(settings.patterns_topic, settings.assessments_topic, partitions=2)
    result = replay_events(published)
    pserde, aserde = PatternSerde(), AssessmentSerde()
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    for sr in result.ordered():
        for p in sr.patterns:
            producer.produce(settings.patterns_topic, pserde.encode(p), sr.session_id.encode())
        for a in sr.assessments:
            producer.produce(settings.assessments_topic, aserde.encode(a), sr.session_id.encode())
    timer = AssessmentWire("s-a", 1, T0, "timer", rendered="depends on wall time")
    producer.produce(settings.assessments_topic, aserde.encode(timer), b"s-a")
    assert producer.flush(30) == 0
    assert cli("replay", "--sessions", "*", *common(settings), "--compare-live") == 0
    out = capsys.readouterr().out
    assert "identical" in out and "1 timer assessment(s) ignored" in out
    # no worker ran for this prefix: no changelog, the table state is skipped, said so
    assert "table state: not compared (no worker changelog topic" in out
    assert "state=skipped" in out and out.strip().endswith("verdict=clean")
    cmd = ("replay", "--sessions", "*", *common(settings), "--compare-live", "--require-state")
    assert cli(*cmd) == 1
    assert capsys.readouterr().out.strip().endswith("verdict=differences")
    last = result.sessions["s-b"].assessments[-1]
    wrong = AssessmentWire(
        **{
            **{f: getattr(last, f) for f in last.__slots__},
            "rendered": last.rendered.replace("#", "%", 1),
        }
    )
    producer.produce(settings.assessments_topic, aserde.encode(wrong), b"s-b")
    assert producer.flush(30) == 0
    assert cli("replay", "--sessions", "*", *common(settings), "--compare-live") == 1
    # the right record is live too (compaction has not run): a repeat of its key
    # (session, seq, trigger) whose content differs, which is a difference
    out = capsys.readouterr().out
    assert f"s-b assessment at seq {last.seq}: repeat with different content" in out
    assert "allowed_repeats=0 " in out


def test_parallel_replay_gives_the_same_bytes(
    settings: Settings, published: list[TraceEvent], create_topics, tmp_path: Path, capsys
) -> None:
    create_topics(settings.events_topic, partitions=3)
    serde = EventSerde()
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    for ev in published:
        producer.produce(settings.events_topic, serde.encode(ev), ev.session_id.encode())
    assert producer.flush(30) == 0
    one, two, three = (tmp_path / f"{n}.jsonl" for n in ("one", "two", "three"))
    base = ["replay", "--sessions", "*", *common(settings), "--output", "jsonl"]
    assert cli(*base, "--out", str(one)) == 0
    assert cli(*base, "--jobs", "2", "--out", str(two)) == 0
    assert cli(*base, "--source", "events", "--jobs", "3", "--out", str(three)) == 0
    assert one.read_bytes() == two.read_bytes() == three.read_bytes()
    assert one.stat().st_size > 0
    # a bad record: reported with its offset in parallel mode too, or fatal with --strict
    producer.produce(settings.session_topic("s-b"), b"\x07junk", b"s-b")
    assert producer.flush(30) == 0
    capsys.readouterr()
    assert cli(*base, "--jobs", "2", "--out", str(two)) == 1
    assert f"{settings.session_topic('s-b')}[0]@" in capsys.readouterr().err
    assert cli(*base, "--jobs", "2", "--strict", "--out", str(two)) == 2
    assert "--strict" in capsys.readouterr().err


def test_jobs_1_and_2_give_the_same_bytes_forked_or_spawned(
    settings: Settings, published: list[TraceEvent], tmp_path: Path
) -> None:
    """``trajectory replay --jobs 2`` as a command (a single-threaded process: its
    workers are forked) writes the bytes ``--jobs 1`` writes, JSONL and Avro;
    spawned workers give the same result too (``--compare-live`` with ``--jobs 2``:
    test_replay_live.py)."""
    import subprocess
    import sys

    from streams.replay.parallel import replay_parallel
    from streams.replay.replay import write_jsonl

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "streams",
                "replay",
                "--sessions",
                "*",
                *common(settings),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    outs: dict[str, dict[str, bytes]] = {}
    for jobs in ("1", "2"):
        outs[jobs] = {}
        for fmt in ("jsonl", "avro"):
            path = tmp_path / f"{jobs}.{fmt}"
            done = run("--jobs", jobs, "--output", fmt, "--out", str(path))
            assert done.returncode == 0, done.stderr
            outs[jobs][fmt] = path.read_bytes()
            if jobs == "2":
                assert "in 2 processes (fork)" in done.stderr, done.stderr
    assert outs["1"]["jsonl"] == outs["2"]["jsonl"] and outs["1"]["jsonl"]
    # an Avro container's sync marker is random: the records must be identical
    avro = {j: list(fastavro.reader(io.BytesIO(outs[j]["avro"]))) for j in ("1", "2")}
    assert avro["1"] == avro["2"] and avro["1"]
    reader = open_event_reader(settings.bootstrap, settings.prefix, sessions="*")
    spawned, _ = replay_parallel(settings.bootstrap, reader.plan(), jobs=2, start_method="spawn")
    text = io.StringIO()
    write_jsonl(spawned, text)
    assert text.getvalue().encode("utf-8") == outs["1"]["jsonl"]
