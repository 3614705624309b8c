"""AssessmentSubscriber, context_for and PromptContext against a real Kafka broker.

The worker is not needed: the tests produce AssessmentWire / PatternRecord values
themselves (confluent producer, murmur2 partitioner like the worker's aiokafka)
into their own prefix's topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.core.assessment import Assessment, CurrentAssessment, Observation, build_context
from streams.errors import MalformedMessageError
from streams.sdk.context import (
    SMALL_PARTITION,
    PromptContext,
    context_for,
    latest_assessment,
    partition_for_key,
)
from streams.sdk.subscriber import AssessmentSubscriber, Tombstone
from streams.serde.avro import AssessmentSerde, AssessmentWire, PatternRecord, PatternSerde
from streams.settings import Settings

pytestmark = pytest.mark.timeout(120)

A_SERDE = AssessmentSerde()
P_SERDE = PatternSerde()


@pytest.fixture
def topics(settings: Settings, create_topics: Any) -> Settings:
    create_topics(settings.assessments_topic, partitions=3, config={"cleanup.policy": "compact"})
    create_topics(settings.patterns_topic, partitions=3)
    return settings


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[Producer]:
    p = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    yield p
    p.flush(10)


def wire(
    sid: str,
    seq: int,
    severity: str | None = "caution",
    *,
    parent: str | None = None,
    trigger: str = "event",
    call_index: int | None = None,
    rendered: str | None = None,
    ts: int | None = None,
) -> AssessmentWire:
    return AssessmentWire(
        session_id=sid,
        seq=seq,
        timestamp_ms=1_700_000_000_000 + seq if ts is None else ts,
        trigger=trigger,  # type: ignore[arg-type]
        call_index=seq if call_index is None else call_index,
        max_severity=severity,
        rendered=f"## {sid} #{seq}" if rendered is None else rendered,
        parent_session_id=parent,
        agent_id="coder",
    )


def pat(
    sid: str, seq: int, ptype: str = "doom_loop", severity: str | None = "warning"
) -> PatternRecord:
    return PatternRecord(
        sid, seq, 1_700_000_000_000 + seq, ptype, severity=severity, confidence=0.9
    )


def publish(
    p: Producer, settings: Settings, records: Iterable[AssessmentWire | PatternRecord]
) -> None:
    errors: list[Any] = []
    for r in records:
        if isinstance(r, AssessmentWire):
            topic, value = settings.assessments_topic, A_SERDE.encode(r)
        else:
            topic, value = settings.patterns_topic, P_SERDE.encode(r)
        p.produce(
            topic,
            key=r.session_id.encode(),
            value=value,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    assert errors == []


def collect(
    sub: AssessmentSubscriber, n: int, timeout_s: float = 30.0, settle_s: float = 1.0
) -> list[Any]:
    """Exactly the records delivered: waits for ``n``, then ``settle_s`` more for extras."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(sub.poll(0.2))
    end = time.monotonic() + settle_s
    while time.monotonic() < end:
        out.extend(sub.poll(0.2))
    return out


def keys(records: Iterable[Any]) -> list[tuple[str, int]]:
    return sorted((r.session_id, r.seq) for r in records)


# -- start position --------------------------------------------------------------


def test_from_beginning_sees_history_latest_only_new(topics: Settings, producer: Producer) -> None:
    before = [wire(f"s{i}", 1) for i in range(4)]
    publish(producer, topics, before)
    with (
        AssessmentSubscriber(topics, start="beginning") as begin,
        AssessmentSubscriber(topics, start="latest") as latest,
    ):
        begin.wait_ready(30)
        latest.wait_ready(30)
        after = [wire(f"s{i}", 2) for i in range(4)]
        publish(producer, topics, after)
        assert keys(collect(begin, 8)) == keys(before + after)
        assert keys(collect(latest, 4)) == keys(after)
        assert begin.caught_up and latest.caught_up


def test_latest_reads_a_topic_created_after_it_opened_from_its_start(
    settings: Settings, create_topics: Any, producer: Producer
) -> None:
    with AssessmentSubscriber(settings, start="latest") as sub:
        assert not sub.ready
        create_topics(settings.assessments_topic, partitions=2)
        publish(producer, settings, [wire("late", 1), wire("late", 2)])
        sub.wait_ready(30)
        assert keys(collect(sub, 2)) == [("late", 1), ("late", 2)]


def test_group_id_resumes_from_committed_offsets(topics: Settings, producer: Producer) -> None:
    group = f"{topics.prefix}.watchers"
    publish(producer, topics, [wire("g", 1), wire("g", 2)])
    with AssessmentSubscriber(topics, group_id=group, start="beginning") as sub:
        assert keys(collect(sub, 2)) == [("g", 1), ("g", 2)]
    publish(producer, topics, [wire("g", 3)])
    with AssessmentSubscriber(topics, group_id=group, start="beginning") as sub:
        assert keys(collect(sub, 1)) == [("g", 3)]


def test_a_group_subscriber_dropped_without_close_is_freed_by_refcounting(
    topics: Settings,
) -> None:
    """Its consumer must not wait for the cyclic garbage collector, which may run in
    librdkafka's own thread (an admin future's callback) where destroying a client
    aborts the process (streams.security.weak_method)."""
    import gc

    from confluent_kafka import Consumer

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        sub = AssessmentSubscriber(topics, group_id=f"{topics.prefix}.dropped")
        del sub
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, Consumer)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == [], "the subscriber's consumer was only reachable by the collector"


# -- filters ---------------------------------------------------------------------


def test_session_glob_and_tree_selection(topics: Settings, producer: Producer) -> None:
    records = [
        wire("root", 1),
        wire("child-a", 1, parent="root"),
        wire("grandchild", 1, parent="child-a"),
        wire("other", 1),
        wire("other-kid", 1, parent="other"),
        wire("ci-1", 1),
        wire("ci-2", 1),
    ]
    publish(producer, topics, records)
    with AssessmentSubscriber(topics, start="beginning", sessions="other") as sub:
        assert keys(collect(sub, 1)) == [("other", 1)]
    with AssessmentSubscriber(topics, start="beginning", globs=["ci-*"]) as sub:
        assert keys(collect(sub, 2)) == [("ci-1", 1), ("ci-2", 1)]
    # the sessions are spread over 3 partitions, so the grandchild may be read
    # before child-a's link: it is held until the link arrives, then delivered.
    with AssessmentSubscriber(topics, start="beginning", trees=["root"]) as sub:
        got = collect(sub, 3)
        assert keys(got) == [("child-a", 1), ("grandchild", 1), ("root", 1)]
        publish(producer, topics, [wire("grandchild", 2, parent="child-a"), wire("other", 2)])
        assert keys(collect(sub, 1)) == [("grandchild", 2)]
        s = sub.stats()
        assert (s.not_selected, s.tree_pending, s.tree_unresolved) == (5, 0, 0)


def test_tree_links_from_sdk_announcements_cover_silent_sessions(
    topics: Settings, producer: Producer, create_topics: Any
) -> None:
    """A sub-agent that never published an assessment still links its children."""
    create_topics(topics.control_topic, config={"cleanup.policy": "compact"})
    announce = {"mid": "root", "leaf": "mid", "stray": None}
    for sid, parent in announce.items():
        value = json.dumps(
            {
                "topic": f"{topics.prefix}.session.{sid}",
                "session_id": sid,
                "parent_session_id": parent,
            }
        )
        producer.produce(topics.control_topic, key=sid.encode(), value=value.encode())
    producer.flush(10)
    with AssessmentSubscriber(topics, trees=["root"]) as sub:  # latest: control still read
        sub.wait_ready(30)
        # records without parent_session_id (an older worker): only announcements link them
        publish(producer, topics, [wire("leaf", 1), wire("stray", 1)])
        assert keys(collect(sub, 1)) == [("leaf", 1)]
        assert sub.stats().not_selected == 1


def test_min_severity_and_pattern_types(topics: Settings, producer: Producer) -> None:
    publish(
        producer,
        topics,
        [
            wire("s", 1, "info"),
            wire("s", 2, None),
            wire("s", 3, "caution"),
            wire("s", 4, "warning"),
            pat("s", 3, "doom_loop", "warning"),
            pat("s", 4, "repeated_error", "warning"),
            pat("s", 4, "doom_loop", "info"),
        ],
    )
    with AssessmentSubscriber(
        topics,
        start="beginning",
        min_severity="caution",
        patterns=True,
        pattern_types=["doom_loop"],
    ) as sub:
        got = collect(sub, 3)
    kinds = sorted((type(r).__name__, r.seq) for r in got)
    assert kinds == [("AssessmentWire", 3), ("AssessmentWire", 4), ("PatternRecord", 3)]
    s = sub.stats()
    assert (s.received, s.below_severity, s.pattern_type_filtered) == (7, 3, 1)


def test_rate_limit_drops_and_counts_sampling_is_reproducible(
    topics: Settings, producer: Producer
) -> None:
    publish(producer, topics, [wire("r", i) for i in range(10)])
    with AssessmentSubscriber(
        topics, start="beginning", rate_limit=1.0, burst=2, clock=lambda: 0.0
    ) as sub:
        got = collect(sub, 2)
    assert keys(got) == [("r", 0), ("r", 1)]
    assert (sub.stats().rate_limited, sub.stats().delivered) == (8, 2)

    runs = []
    for _ in range(2):
        with AssessmentSubscriber(topics, start="beginning", sample_rate=0.5) as sub:
            sub.wait_caught_up(30)
            runs.append(keys(collect(sub, 0, settle_s=0.5)))
            assert sub.stats().sampled_out + sub.stats().delivered == 10
    assert runs[0] == runs[1]


# -- delivery --------------------------------------------------------------------


def test_republished_records_are_suppressed_and_counted(
    topics: Settings, producer: Producer
) -> None:
    with AssessmentSubscriber(topics, patterns=True) as sub:
        sub.wait_ready(30)
        publish(producer, topics, [wire("d", 1), wire("d", 2), pat("d", 2)])
        assert len(collect(sub, 3)) == 3
        # a restarted worker re-publishes; a timer assessment at the same seq is new
        publish(
            producer,
            topics,
            [wire("d", 1), wire("d", 2), pat("d", 2), wire("d", 2, trigger="timer", ts=5)],
        )
        again = collect(sub, 1)
        assert [(r.seq, r.trigger) for r in again] == [(2, "timer")]
        assert sub.duplicates_suppressed == 3


def test_read_committed_hides_aborted_transactions(
    topics: Settings, producer: Producer, kafka_bootstrap: str
) -> None:
    tx = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{topics.prefix}.tx",
            "partitioner": "murmur2_random",
        }
    )
    tx.init_transactions(30)
    with AssessmentSubscriber(topics) as sub:
        sub.wait_ready(30)
        tx.begin_transaction()
        tx.produce(topics.assessments_topic, key=b"t", value=A_SERDE.encode(wire("t", 1)))
        tx.abort_transaction(30)
        tx.begin_transaction()
        tx.produce(topics.assessments_topic, key=b"t", value=A_SERDE.encode(wire("t", 2)))
        tx.commit_transaction(30)
        assert keys(collect(sub, 1)) == [("t", 2)]


def test_malformed_value_raises_naming_the_offset_or_is_counted(
    topics: Settings, producer: Producer
) -> None:
    producer.produce(topics.assessments_topic, key=b"bad", value=b"\xc3\x01garbage")
    producer.produce(topics.assessments_topic, key=b"bad", value=None)  # tombstone
    publish(producer, topics, [wire("bad", 3)])
    with (
        AssessmentSubscriber(topics, start="beginning") as sub,
        pytest.raises(MalformedMessageError, match=r"partition \d+ offset 0"),
    ):
        collect(sub, 1)
    with AssessmentSubscriber(
        topics, start="beginning", on_decode_error="count", tombstones=True
    ) as sub:
        got = collect(sub, 2)
    assert got[0] == Tombstone("bad", topics.assessments_topic)
    assert keys(got[1:]) == [("bad", 3)]
    assert (sub.stats().decode_errors, sub.stats().tombstones) == (1, 1)


def test_async_iterator(topics: Settings, producer: Producer) -> None:
    async def main() -> list[Any]:
        out: list[Any] = []
        async with AssessmentSubscriber(topics, start="beginning", patterns=True) as sub:
            publish(producer, topics, [wire("as", 1), pat("as", 1)])

            async def read() -> None:
                async for record in sub:
                    out.append(record)
                    if len(out) == 2:
                        return

            await asyncio.wait_for(read(), 30)
        return out

    got = asyncio.run(main())
    assert sorted(type(r).__name__ for r in got) == ["AssessmentWire", "PatternRecord"]


def test_callback_style_and_close_from_another_thread(topics: Settings, producer: Producer) -> None:
    sub = AssessmentSubscriber(topics, start="beginning")
    got: list[Any] = []
    done = threading.Event()

    def on_record(record: Any) -> None:
        got.append(record)
        if len(got) == 3:
            done.set()

    thread = threading.Thread(target=sub.run, args=(on_record,))
    thread.start()
    publish(producer, topics, [wire("cb", i) for i in range(3)])
    assert done.wait(30)
    sub.close()
    thread.join(10)
    assert not thread.is_alive() and sub.closed
    assert keys(got) == [("cb", 0), ("cb", 1), ("cb", 2)]
    assert sub.poll(0.1) == []  # closed: nothing, no error
    sub.close()  # idempotent


# -- context_for / PromptContext -------------------------------------------------


def current_assessment(call_index: int, severity: str = "warning") -> CurrentAssessment:
    a = Assessment(
        "pattern_observer",
        "The agent repeats `pytest -x` — ünïcode kept.",
        observations=(Observation("loop", "3 identical calls", "bash pytest -x"),),
        suggestions=("Read the failing test first",),
        severity=severity,  # type: ignore[arg-type]
    )
    return CurrentAssessment(
        assessments=(a,), call_index=call_index, session_id="ctx", seq=call_index
    )


def test_context_for_latest_wins_stale_skipped_unknown_empty(
    topics: Settings, producer: Producer
) -> None:
    older, newer = current_assessment(3, "caution"), current_assessment(7)
    publish(
        producer,
        topics,
        [
            wire("ctx", 3, call_index=3, rendered=older.render()),
            wire("neighbour", 1),
            wire("ctx", 7, call_index=7, rendered=newer.render()),
            wire("neighbour", 2),
        ],
    )
    assert context_for("ctx", settings=topics) == newer.render()
    for now, max_age in [(7, 20), (27, 20), (28, 20), (12, 5), (13, 5)]:
        got = context_for("ctx", settings=topics, current_call_index=now, max_age_calls=max_age)
        assert got == build_context(newer, now, max_age_calls=max_age)
    assert context_for("ctx", settings=topics, current_call_index=28) == ""
    assert context_for("nobody", settings=topics) == ""
    # a tombstone (deleted session) as the latest record: nothing
    producer.produce(topics.assessments_topic, key=b"neighbour", value=None)
    producer.flush(10)
    assert latest_assessment("neighbour", settings=topics) is None


def test_context_for_finds_the_key_partition_records_land_in(
    topics: Settings, producer: Producer
) -> None:
    partitions: dict[str, int] = {}
    for i in range(12):
        sid = f"p{i}"
        producer.produce(
            topics.assessments_topic,
            key=sid.encode(),
            value=A_SERDE.encode(wire(sid, 1)),
            on_delivery=lambda err, msg: partitions.__setitem__(
                msg.key().decode(), msg.partition()
            ),
        )
    producer.flush(10)
    assert partitions == {sid: partition_for_key(sid.encode(), 3) for sid in partitions}
    assert len(set(partitions.values())) > 1
    for sid in partitions:
        assert context_for(sid, settings=topics) == f"## {sid} #1"


def test_context_for_scans_a_large_partition_backwards(
    settings: Settings, create_topics: Any, producer: Producer
) -> None:
    create_topics(settings.assessments_topic, partitions=1)
    publish(producer, settings, [wire("early", 1), wire("early", 2)])
    filler = SMALL_PARTITION + 1500  # the target sits three chunks back
    publish(producer, settings, (wire(f"f{i}", 1) for i in range(filler)))
    t0 = time.perf_counter()
    assert context_for("early", settings=settings) == "## early #2"
    elapsed = time.perf_counter() - t0
    assert context_for(f"f{filler - 1}", settings=settings) == f"## f{filler - 1} #1"
    assert elapsed < 10


def test_prompt_context_answers_from_memory_and_follows_updates(
    topics: Settings, producer: Producer
) -> None:
    publish(producer, topics, [wire("pc", 1, call_index=1), wire("pc2", 1)])
    with PromptContext(topics) as pc:
        assert pc.sessions() == ["pc", "pc2"]
        assert pc.context("pc") == context_for("pc", settings=topics) == "## pc #1"
        assert pc.context("pc", current_call_index=30) == ""
        assert pc.context("nobody") == ""
        publish(producer, topics, [wire("pc", 2, call_index=25)])
        deadline = time.monotonic() + 20
        while pc.context("pc") != "## pc #2" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pc.context("pc", current_call_index=30) == "## pc #2"
        t0 = time.perf_counter()
        for _ in range(1000):
            pc.context("pc", current_call_index=30)
        assert time.perf_counter() - t0 < 1.0  # a dict lookup, not a Kafka round trip
        producer.produce(topics.assessments_topic, key=b"pc2", value=None)
        producer.flush(10)
        deadline = time.monotonic() + 20
        while "pc2" in pc.sessions() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pc.sessions() == ["pc"]


def test_unique_default_groups_do_not_share_records(topics: Settings, producer: Producer) -> None:
    with (
        AssessmentSubscriber(topics) as a,
        AssessmentSubscriber(topics) as b,
    ):
        a.wait_ready(30)
        b.wait_ready(30)
        name = "u" + uuid.uuid4().hex[:6]
        publish(producer, topics, [wire(name, 1), wire(name, 2)])
        assert keys(collect(a, 2)) == keys(collect(b, 2)) == [(name, 1), (name, 2)]


def test_context_for_without_the_topic_is_empty_and_creates_nothing(
    settings: Settings, admin: Any
) -> None:
    assert context_for("anyone", settings=settings) == ""
    assert settings.assessments_topic not in admin.list_topics(timeout=10).topics


def test_cancelled_async_reads_lose_no_record(topics: Settings, producer: Producer) -> None:
    async def main() -> list[Any]:
        out: list[Any] = []
        async with AssessmentSubscriber(topics, poll_interval_s=0.2) as sub:
            sub.wait_ready(30)

            def trickle() -> None:  # records arrive while polls are in flight
                for i in range(20):
                    publish(producer, topics, [wire("cx", i)])
                    time.sleep(0.03)

            feeder = threading.Thread(target=trickle)
            feeder.start()
            deadline = time.monotonic() + 30
            while len(out) < 20 and time.monotonic() < deadline:
                # far shorter than the poll: most awaits are cancelled mid-poll
                with contextlib.suppress(TimeoutError):
                    out.append(await asyncio.wait_for(sub.__anext__(), 0.01))
            feeder.join(30)
            assert sub.stats().delivered == 20
        return out

    assert keys(asyncio.run(main())) == [("cx", i) for i in range(20)]


def test_a_failing_callback_keeps_the_rest_of_the_batch(
    topics: Settings, producer: Producer
) -> None:
    publish(producer, topics, [wire("cf", i) for i in range(5)])
    seen: list[Any] = []

    def on_record(record: Any) -> None:
        seen.append(record)
        if record.seq == 1:
            raise RuntimeError("consumer bug")

    with AssessmentSubscriber(topics, start="beginning") as sub:
        sub.wait_caught_up(30)  # all five are fetched: one batch
        with pytest.raises(RuntimeError, match="consumer bug"):
            sub.run(on_record)
        rest = collect(sub, 3, settle_s=0.3)
    assert keys(seen) == [("cf", 0), ("cf", 1)]
    assert keys(rest) == [("cf", 2), ("cf", 3), ("cf", 4)]
