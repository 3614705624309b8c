"""Pure parts of the subscriber: selection and trees, severity, sampling, bucket, dedupe."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.errors import ConfigError
from streams.sdk.subscriber import (
    MAX_TREE_DEPTH,
    DeliveredKeys,
    RecordFilter,
    Selection,
    SessionMatcher,
    TokenBucket,
    dedupe_key,
    sample_keep,
    severity_passes,
)
from streams.serde.avro import AssessmentWire, PatternRecord


def wire(
    sid: str,
    seq: int,
    *,
    severity: str | None = "caution",
    parent: str | None = None,
    trigger: str = "event",
    ts: int = 1000,
) -> AssessmentWire:
    return AssessmentWire(
        sid,
        seq,
        ts,
        trigger,
        max_severity=severity,
        parent_session_id=parent,  # type: ignore[arg-type]
    )


def pattern(
    sid: str, seq: int, ptype: str = "doom_loop", severity: str | None = None
) -> PatternRecord:
    return PatternRecord(sid, seq, 1000, ptype, severity=severity)


# -- selection -------------------------------------------------------------


def test_empty_selection_matches_everything() -> None:
    m = SessionMatcher(Selection())
    assert m.matches("anything") and m.matches("x.y-z")


def test_exact_ids_and_globs() -> None:
    m = SessionMatcher(Selection(sessions=frozenset({"a1"}), globs=("ci-*", "run-?")))
    assert m.matches("a1")
    assert not m.matches("a10")
    assert m.matches("ci-") and m.matches("ci-123")
    assert m.matches("run-7") and not m.matches("run-77")
    assert not m.matches("CI-1")  # case-sensitive, like session ids


def test_tree_is_learned_transitively_from_parent_links() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"root"})))
    assert m.matches("root")
    assert not m.matches("child")  # nothing learned yet
    m.observe("child", "root")
    m.observe("grandchild", "child")
    m.observe("other", "elsewhere")
    assert m.matches("child") and m.matches("grandchild")
    assert not m.matches("other") and not m.matches("elsewhere")


def test_grandchild_seen_before_its_parent_is_recognised_once_the_link_arrives() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"root"})))
    m.observe("gc", "c")
    assert m.verdict("gc") is None and not m.matches("gc")  # c's link is not known yet
    m.observe("c", "root")
    assert m.verdict("gc") is True


def test_known_roots_decide_no_and_a_parentless_record_never_erases_a_link() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"root"})))
    assert m.observe("lone", None)
    assert m.verdict("lone") is False
    assert m.observe("kid", "root") and not m.observe("kid", "root")
    assert not m.observe("kid", None)  # e.g. an event without the field
    assert m.verdict("kid") is True
    m.observe("lone", "root")  # a link learned later wins over root-ness
    assert m.verdict("lone") is True


def test_parent_cycles_terminate() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"root"})))
    m.observe("a", "b")
    m.observe("b", "a")
    assert m.verdict("a") is False
    m.observe("self", "self")  # ignored
    assert m.parent_of("self") is None


def test_deep_chain_is_bounded() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"s0"})))
    for i in range(1, MAX_TREE_DEPTH + 5):
        m.observe(f"s{i}", f"s{i - 1}")
    assert m.matches(f"s{MAX_TREE_DEPTH - 1}")
    assert not m.matches(f"s{MAX_TREE_DEPTH + 4}")  # beyond the followed depth


def test_link_memory_is_capped_oldest_first() -> None:
    m = SessionMatcher(Selection(trees=frozenset({"r"})), max_links=2)
    m.observe("a", "r")
    m.observe("b", "r")
    m.observe("c", "r")
    assert m.parent_of("a") is None and m.parent_of("c") == "r"


# -- severity ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("severity", "minimum", "passes"),
    [
        ("info", "info", True),
        ("info", "caution", False),
        ("caution", "caution", True),
        ("warning", "caution", True),
        ("caution", "warning", False),
        (None, "info", True),
        (None, "caution", False),
        ("catastrophic", "warning", True),  # unknown to this reader: shown, not hidden
    ],
)
def test_severity_filter(severity: str | None, minimum: str, passes: bool) -> None:
    assert severity_passes(severity, minimum) is passes


# -- sampling -----------------------------------------------------------------


def test_sampling_is_deterministic_and_close_to_the_rate() -> None:
    keys = [(f"s{i % 37}", i) for i in range(20_000)]
    first = [sample_keep(s, q, 0.25) for s, q in keys]
    assert first == [sample_keep(s, q, 0.25) for s, q in keys]
    assert 0.23 < sum(first) / len(first) < 0.27
    salted = [sample_keep(s, q, 0.25, salt="other") for s, q in keys]
    assert salted != first  # another salt samples another subset


@given(st.text(min_size=1, max_size=20), st.integers(0, 2**40), st.floats(0, 1))
def test_sampling_is_monotone_in_the_rate(sid: str, seq: int, rate: float) -> None:
    if sample_keep(sid, seq, rate):
        assert sample_keep(sid, seq, min(1.0, rate + 0.1))
    assert sample_keep(sid, seq, 1.0) and not sample_keep(sid, seq, 0.0)


# -- token bucket -------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_burst_then_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(2.0, 3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5  # one token back
    assert bucket.take() and not bucket.take()
    clock.now += 10  # refills to burst, not beyond
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now -= 5  # a clock going backwards refills nothing
    assert not bucket.take()


def test_token_bucket_validates() -> None:
    with pytest.raises(ConfigError, match="rate_limit"):
        TokenBucket(0, 1)
    with pytest.raises(ConfigError, match="burst"):
        TokenBucket(1, 0.5)


# -- dedupe -------------------------------------------------------------------


def test_dedupe_keys() -> None:
    assert dedupe_key(wire("s", 3)) == dedupe_key(wire("s", 3, severity="warning"))
    assert dedupe_key(wire("s", 3)) != dedupe_key(wire("s", 4))
    assert dedupe_key(wire("s", 3)) != dedupe_key(wire("s", 3, trigger="timer"))
    # event-triggered: the same assessment whatever its stamp; timer: two timers differ
    assert dedupe_key(wire("s", 3, ts=1)) == dedupe_key(wire("s", 3, ts=2))
    assert dedupe_key(wire("s", 3, trigger="timer", ts=1)) != dedupe_key(
        wire("s", 3, trigger="timer", ts=2)
    )
    assert dedupe_key(pattern("s", 3)) != dedupe_key(pattern("s", 3, "repeated_error"))
    assert dedupe_key(pattern("s", 3)) != dedupe_key(wire("s", 3))


def test_delivered_keys_lru() -> None:
    keys = DeliveredKeys(2)
    keys.add(("a",))
    keys.add(("b",))
    assert ("a",) in keys
    keys.add(("c",))
    assert ("a",) not in keys and ("b",) in keys and len(keys) == 2
    with pytest.raises(ConfigError, match="dedupe_capacity"):
        DeliveredKeys(0)


# -- the whole filter ---------------------------------------------------------


def make_filter(**kw: object) -> RecordFilter:
    sel = kw.pop("selection", Selection())
    return RecordFilter(matcher=SessionMatcher(sel), **kw)  # type: ignore[arg-type]


def test_filter_counts_every_drop_and_suppresses_duplicates() -> None:
    f = make_filter(
        selection=Selection(trees=frozenset({"root"})),
        min_severity="caution",
        pattern_types=frozenset({"doom_loop"}),
    )
    records = [
        wire("root", 1),
        wire("kid", 1, parent="root", severity="info"),  # below severity, link still learned
        wire("kid", 2, parent="root"),
        wire("stranger", 1),  # not selected
        pattern("kid", 2, "repeated_error", "warning"),  # type filtered
        pattern("kid", 2, "doom_loop", "warning"),
        wire("root", 1),  # re-published
        pattern("kid", 2, "doom_loop", "warning"),  # re-published
    ]
    delivered = [d for r in records for d in f.offer(r)]
    assert delivered == [records[0], records[2], records[5]]
    s = f.stats()
    assert (s.received, s.delivered, s.below_severity, s.not_selected) == (8, 3, 1, 1)
    assert (s.pattern_type_filtered, s.duplicates_suppressed) == (1, 2)
    assert s.received == (
        s.delivered
        + s.below_severity
        + s.not_selected
        + s.pattern_type_filtered
        + s.duplicates_suppressed
        + s.sampled_out
        + s.rate_limited
    )


def test_rate_limited_records_are_counted_and_may_be_delivered_when_republished() -> None:
    clock = Clock()
    f = make_filter(bucket=TokenBucket(1.0, 2, clock=clock))
    got = [bool(f.offer(wire("s", i))) for i in range(5)]
    assert got == [True, True, False, False, False]
    assert f.stats().rate_limited == 3
    clock.now += 1
    assert f.offer(wire("s", 2))  # never shown before, so not a duplicate
    assert f.stats().duplicates_suppressed == 0


def test_sampling_in_the_filter_keeps_assessment_and_patterns_of_an_event_together() -> None:
    f = make_filter(sample_rate=0.5)
    for i in range(200):
        a = bool(f.offer(wire("s", i)))
        p = bool(f.offer(pattern("s", i)))
        assert a == p == sample_keep("s", i, 0.5)
    s = f.stats()
    assert s.delivered + s.sampled_out == 400 and 0 < s.sampled_out < 400


def test_records_of_an_unresolved_session_are_held_until_a_link_decides() -> None:
    clock = Clock()
    f = make_filter(selection=Selection(trees=frozenset({"root"})), clock=clock)
    gc1, gc2 = wire("gc", 1, parent="c"), wire("gc", 2, parent="c")
    assert f.offer(gc1) == [] and f.offer(gc2) == []
    assert f.stats().tree_pending == 2
    out = wire("x", 1, parent="y")  # y unknown too: held
    assert f.offer(out) == []
    c1 = wire("c", 1, parent="root")
    assert f.offer(c1) == [gc1, gc2, c1]  # held ones first: they arrived first
    assert f.stats().tree_pending == 1
    assert f.learn("y", None) == []  # y is a root outside the tree: x decided "no"
    s = f.stats()
    assert (s.tree_pending, s.not_selected, s.delivered, s.tree_unresolved) == (0, 1, 3, 0)


def test_an_announcement_releases_held_records() -> None:
    f = make_filter(selection=Selection(trees=frozenset({"root"})))
    rec = pattern("gc", 4)
    f.matcher.observe("gc", "c")
    assert f.offer(rec) == []
    assert f.learn("c", "root") == [rec]
    assert f.learn("c", "root") == []  # nothing new learned


def test_held_records_expire_by_age_and_capacity_and_are_counted() -> None:
    clock = Clock()
    f = make_filter(
        selection=Selection(trees=frozenset({"root"})),
        clock=clock,
        pending_capacity=2,
        pending_max_age_s=10.0,
    )
    for i in range(3):
        f.offer(wire("gc", i, parent="c"))
    assert (f.stats().tree_pending, f.stats().tree_unresolved) == (2, 1)
    clock.now += 11
    f.expire()
    assert (f.stats().tree_pending, f.stats().tree_unresolved) == (0, 3)
    assert f.offer(wire("c", 1, parent="root")) == [wire("c", 1, parent="root")]
    assert f.stats().delivered == 1  # the expired ones are gone for good
