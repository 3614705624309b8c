"""A replay refuses what live ingest refuses, and a refused record is only
consistent with live when live dead-lettered it too."""

from __future__ import annotations

from streams.replay.compare import CompareReport
from streams.replay.reader import DecodeFailure, IngestCheck
from streams.replay.replay import LiveDiff

CHECK = IngestCheck("p", max_message_bytes=1000)


def _event(session: str = "s1", seq: int = 0, ts: int = 1):
    from streams.core.events import TraceEvent

    return TraceEvent(type="tool_call", session_id=session, seq=seq, timestamp_ms=ts)


def test_a_session_topic_record_naming_another_session_is_refused() -> None:
    reason = CHECK(_event("other"), "p.session.s1", None, 100)
    assert reason is not None and reason.startswith("session_id")
    assert CHECK(_event("s1"), "p.session.s1", None, 100) is None


def test_an_oversized_or_badly_numbered_record_is_refused_as_the_router_does() -> None:
    assert "over the 1000-byte cap" in (CHECK(_event(), "p.session.s1", None, 1001) or "")
    assert (CHECK(_event(seq=-1), "p.session.s1", None, 10) or "").startswith("seq")
    assert (CHECK(_event(ts=-5), "p.session.s1", None, 10) or "").startswith("timestamp_ms")


def test_an_events_record_whose_key_is_another_session_is_refused_as_the_worker_does() -> None:
    reason = CHECK(_event("s1"), "p.events", b"s2", 10)
    assert reason is not None and "key" in reason
    assert CHECK(_event("s1"), "p.events", b"s1", 10) is None
    # the size cap is the router's: a routed record is never checked against it again
    assert CHECK(_event("s1"), "p.events", b"s1", 10_000) is None


def test_refused_records_are_consistent_only_when_the_dlq_holds_them() -> None:
    report = CompareReport(LiveDiff())
    failures = [
        DecodeFailure("p.session.s1", 0, 3, "refused as live ingest does: seq"),
        DecodeFailure("p.session.s1", 0, 7, "MalformedMessageError: ..."),
    ]
    report.note_unreplayed(failures, {("p.session.s1", 0, 3)})
    assert report.dead_lettered == 1 and report.undecodable == 1
    assert not report.ok
    assert any("p.session.s1[0]@7" in n for n in report.notes)
    assert "dead_lettered=1 undecodable=1 verdict=differences" in report.summary()
    clean = CompareReport(LiveDiff())
    clean.note_unreplayed(failures, {("p.session.s1", 0, 3), ("p.session.s1", 0, 7)})
    assert clean.ok and clean.dead_lettered == 2 and clean.undecodable == 0


def test_an_events_record_the_worker_refuses_is_refused_in_replay_too() -> None:
    # decode once: the router forwards after a framing check, the worker checks seq
    reason = CHECK(_event("s1", seq=-1), "p.events", b"s1", 10)
    assert reason is not None and reason.startswith("seq")


def test_a_forwarded_record_is_located_where_it_was_published() -> None:
    from streams.replay.reader import published_at

    src = [("src.topic", b"p.session.s1"), ("src.partition", b"0"), ("src.offset", b"41")]
    assert published_at("p.events", 2, 900, src) == ("p.session.s1", 0, 41)
    assert published_at("p.events", 2, 900, None) == ("p.events", 2, 900)
    assert published_at("p.events", 2, 900, [("src.topic", b"x")]) == ("p.events", 2, 900)
    # what the router writes now: the offset; the topic is implied by the key
    assert published_at("p.events", 2, 900, [("src.offset", b"41")], b"s1") == (
        "p.session.s1",
        0,
        41,
    )
    assert published_at("p.events", 2, 900, [("src.offset", b"41")]) == ("p.events", 2, 900)


def test_the_check_covers_session_topics_and_the_events_topic_only() -> None:
    assert CHECK.covers("p.session.s1") and CHECK.covers("p.events")
    assert not CHECK.covers("q.session.s1") and not CHECK.covers("p.patterns")
    assert not CHECK.covers("p.session.bad/id")


def test_a_prechecked_replay_of_what_the_check_let_through_is_the_checked_replay() -> None:
    """``replay_events(prechecked=True)`` skips the engine's event check only
    because the reader's check already ran it: on the events that check lets
    through, the outputs are those of the checked replay; the refused event is
    the reader's failure instead of the replay's rejection."""
    from dataclasses import replace

    from replay_sessions import T0, failing_session

    from streams.replay.replay import replay_events

    evs = failing_session("s1", T0)
    bad = replace(evs[5], seq=-1)
    evs = [*evs[:5], bad, *evs[5:]]
    checked = replay_events(evs)
    assert [r[:2] for r in checked.rejected] == [("s1", -1)]
    passed = [e for e in evs if CHECK(e, "p.session.s1", None, 10) is None]
    assert passed == [e for e in evs if e is not bad]
    pre = replay_events(passed, prechecked=True)
    assert pre.rejected == [] and pre.sessions["s1"].patterns
    expected = replay_events(passed)
    assert pre.sessions == expected.sessions
    assert pre.sessions["s1"].patterns == checked.sessions["s1"].patterns
    assert pre.sessions["s1"].assessments == checked.sessions["s1"].assessments


def test_a_reader_is_prechecked_only_when_its_ingest_check_covers_every_topic() -> None:
    """What lets the single-process CLI and each ``--jobs`` worker skip the
    engine's second ``event_error``: True only for an :class:`IngestCheck` that
    covers every topic read (a plan's topics when there is one).  No broker is
    contacted: a reader opens its consumer only when it plans or reads."""
    from streams.replay.reader import PartitionRange, TopicReader

    def reader(topics: list[str], check: object = CHECK, ranges: object = None) -> TopicReader:
        return TopicReader(
            "127.0.0.1:1",
            topics,
            bytes,
            check=check,
            ranges=ranges,  # type: ignore[arg-type]
        )

    assert reader(["p.session.s1", "p.session.s2", "p.events"]).prechecked
    assert not reader(["p.session.s1", "p.patterns"]).prechecked
    assert not reader(["p.session.s1"], check=None).prechecked
    assert not reader(["p.session.s1"], check=lambda *a: None).prechecked
    plan = [PartitionRange("p.session.s1", 0, 0, 5), PartitionRange("q.session.s1", 0, 0, 5)]
    assert not reader([], ranges=plan).prechecked
    assert reader([], ranges=plan[:1]).prechecked


def test_the_cached_topic_kind_gives_the_uncached_answers() -> None:
    """The per-topic cache of :class:`IngestCheck` answers as the router's
    ``session_id_of_topic`` and the events-topic test do, for any prefix."""
    from streams.replay.reader import _topic_kind
    from streams.router.validate import session_id_of_topic

    for prefix in ("p", "p.session", "x"):
        for topic in ("p.events", "p.session.s1", "p.session.events", "x.session.a-b", "p.x"):
            expected = (topic == f"{prefix}.events", None)
            if not expected[0]:
                expected = (False, session_id_of_topic(prefix, topic))
            assert _topic_kind(prefix, topic) == expected, (prefix, topic)
