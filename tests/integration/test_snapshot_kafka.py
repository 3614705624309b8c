"""Snapshots on a real broker: SDK control events, the compacted snapshots topic
(list/get with overwrite and tombstones), the worker's half of the contract played
by hand over events read back from Kafka, and the CLI's outside requests."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

from streams.cli import main
from streams.core.engine import SessionEngine
from streams.core.events import Budget, TraceEvent
from streams.core.statecodec import decode_state, encode_state
from streams.errors import ConfigError, InvalidEventError
from streams.lifecycle import scan_topic
from streams.sdk import Publisher
from streams.serde import EventSerde
from streams.settings import Settings
from streams.snapshots import (
    decode_snapshot,
    ensure_snapshots_topic,
    get_snapshot,
    list_snapshots,
    request_restore,
    request_snapshot,
    snapshot_headers,
    snapshot_key,
    snapshot_value,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T0 = 1_760_000_000_000


def session_events(settings: Settings, session_id: str) -> list[TraceEvent]:
    serde = EventSerde()
    out = []
    for r in scan_topic(settings, settings.session_topic(session_id)):
        assert r.value is not None
        out.append(serde.decode(r.value))
    return out


def produce(
    settings: Settings, records: list[tuple[bytes, bytes | None, list[Any] | None]]
) -> None:
    p = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
    errors: list[str] = []
    for key, value, headers in records:
        p.produce(
            settings.snapshots_topic,
            key=key,
            value=value,
            headers=headers,
            on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
        )
    assert p.flush(30) == 0
    assert not errors


def drive(s: Any, *, loops: int, t: list[int]) -> None:
    """A failing test loop (so observers have something to say), explicit times."""
    for _ in range(loops):
        s.model_step(text="try again", input_tokens=1000, output_tokens=200, timestamp_ms=t[0])
        cid = s.tool_call("bash", {"command": "pytest tests/test_app.py -x"}, timestamp_ms=t[0] + 1)
        s.tool_result(
            cid, "FAILED", is_error=True, error="E   AssertionError: 1 == 2", timestamp_ms=t[0] + 2
        )
        cid = s.tool_call(
            "edit_file", {"path": "src/app.py", "content": "x"}, timestamp_ms=t[0] + 3
        )
        s.tool_result(cid, "ok", timestamp_ms=t[0] + 4)
        t[0] += 1000


def test_sdk_snapshot_and_restore_events_carry_seq_and_id(settings: Settings) -> None:
    with Publisher(settings) as pub:
        s = pub.session("agent-1", agent_id="coder", parent_session_id="root-1")
        first = s.snapshot()  # before start: session_start takes seq 0
        assert first == "snap-1"
        s.message("working")
        named = s.snapshot("before-edit")
        s.restore("before-edit")
        with pytest.raises(InvalidEventError) as info:
            s.snapshot("bad\nid")
        assert info.value.field == "snapshot_id"
        s.end()
    events = session_events(settings, "agent-1")
    assert [e.seq for e in events] == list(range(6))
    assert [e.type for e in events] == [
        "session_start",
        "snapshot",
        "message",
        "snapshot",
        "restore",
        "session_end",
    ]
    assert events[1].metadata == {"snapshot_id": "snap-1"}
    assert named == "before-edit" and events[3].metadata == {"snapshot_id": "before-edit"}
    assert events[4].metadata == {"snapshot_id": "before-edit"}
    assert all(e.agent_id == "coder" and e.parent_session_id == "root-1" for e in events)


def test_snapshots_topic_list_get_overwrite_tombstone(settings: Settings, admin: Any) -> None:
    with pytest.raises(ConfigError) as info:
        list_snapshots(settings)
    assert info.value.key == "prefix"
    topic = ensure_snapshots_topic(admin, settings)
    assert ensure_snapshots_topic(admin, settings) == topic  # idempotent
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    conf = admin.describe_configs([res])[res].result(timeout=30)
    assert conf["cleanup.policy"].value == "compact"

    def state_bytes(sid: str, n: int, snap: str) -> tuple[bytes, TraceEvent]:
        eng = SessionEngine.create(sid)
        for i in range(n):
            eng.on_event(TraceEvent("message", sid, i, T0 + i, text=f"m{i}"))
        ev = TraceEvent("snapshot", sid, n, T0 + n, metadata={"snapshot_id": snap})
        eng.on_event(ev)
        return snapshot_value(eng.snapshot(), snap), ev

    a1, ev_a1 = state_bytes("a", 2, "one")
    a2, ev_a2 = state_bytes("a", 5, "two")
    a1b, ev_a1b = state_bytes("a", 7, "one")  # same key, newer value
    b1, ev_b1 = state_bytes("b", 1, "x")
    produce(
        settings,
        [
            (snapshot_key("a", "one"), a1, snapshot_headers(ev_a1)),
            (snapshot_key("a", "two"), a2, snapshot_headers(ev_a2)),
            (snapshot_key("b", "x"), b1, snapshot_headers(ev_b1)),
            (snapshot_key("a", "one"), a1b, snapshot_headers(ev_a1b)),
            (snapshot_key("b", "x"), None, None),  # tombstone
        ],
    )
    listed = list_snapshots(settings)
    assert [(i.session_id, i.snapshot_id, i.seq) for i in listed] == [
        ("a", "two", 5),
        ("a", "one", 7),
    ]
    assert [i.size for i in listed] == [len(a2), len(a1b)]
    assert list_snapshots(settings, "b") == []
    assert get_snapshot(settings, "a", "one") == a1b
    assert decode_snapshot(get_snapshot(settings, "a", "two")).last_seq == 5
    with pytest.raises(InvalidEventError) as miss:
        get_snapshot(settings, "b", "x")
    assert "stored: none" in str(miss.value)

    # CLI over the same topic
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    assert main(["snapshot", "show", "--session", "a", "--id", "one", "--json", *base]) == 0


def test_cli_snapshot_list_and_show(settings: Settings, admin: Any, capsys: Any) -> None:
    ensure_snapshots_topic(admin, settings)
    eng = SessionEngine.create("s")
    eng.on_event(TraceEvent("budget", "s", 0, T0, budget=Budget(max_tokens=99)))
    ev = TraceEvent("snapshot", "s", 1, T0 + 1, metadata={"snapshot_id": "k"})
    eng.on_event(ev)
    value = snapshot_value(eng.snapshot(), "k")
    produce(settings, [(snapshot_key("s", "k"), value, snapshot_headers(ev))])
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    capsys.readouterr()
    assert main(["snapshot", "list", "--json", *base]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {
            "session_id": "s",
            "snapshot_id": "k",
            "seq": 1,
            "timestamp_ms": T0 + 1,
            "size": len(value),
        }
    ]
    assert main(["snapshot", "show", "--session", "s", "--id", "k", "--json", *base]) == 0
    assert capsys.readouterr().out.encode() == value + b"\n"
    assert main(["snapshot", "show", "--session", "s", "--id", "k", *base]) == 0
    text = capsys.readouterr().out
    assert "max_tokens: 99" in text and "last_seq: 1" in text
    assert main(["snapshot", "show", "--session", "s", *base]) == 2  # --id missing


def test_worker_contract_over_kafka_restore_equals_stored_state(
    settings: Settings, admin: Any
) -> None:
    """The worker's half played by hand: events read back from the session topic go
    through SessionEngine; each applied snapshot event is stored as the contract
    says.  After the restore the engine's state is the stored bytes (but for the
    forward-moving seq and clock) and later outputs equal the never-diverged run."""
    ensure_snapshots_topic(admin, settings)
    t = [T0]
    with (
        Publisher(settings) as pub,
        pub.session(
            "w1", agent_id="coder", task="fix login in src/app.py", timestamp_ms=T0 - 1
        ) as s,
    ):
        drive(s, loops=1, t=t)
        s.snapshot("k", timestamp_ms=t[0])
        t[0] += 1000
        drive(s, loops=5, t=t)  # the branch the agent abandons
        s.budget(max_tokens=10, timestamp_ms=t[0])
        t[0] += 1000
        s.restore("k", timestamp_ms=t[0])
        t[0] += 1000
        drive(s, loops=4, t=t)
    events = session_events(settings, "w1")
    k = next(i for i, e in enumerate(events) if e.type == "snapshot")
    r = next(i for i, e in enumerate(events) if e.type == "restore")

    eng = SessionEngine.create("w1")
    live_outs = []
    after_restore = None
    for ev in events:
        out = eng.on_event(ev)
        assert out.applied
        if ev.type == "snapshot":
            sid = ev.metadata["snapshot_id"]
            produce(
                settings,
                [
                    (
                        snapshot_key(ev.session_id, sid),
                        snapshot_value(eng.snapshot(), sid),
                        snapshot_headers(ev),
                    )
                ],
            )
        if ev.type == "restore":
            after_restore = eng.snapshot()
        elif after_restore is not None:
            live_outs.append(out)
    assert after_restore is not None
    stored = get_snapshot(settings, "w1", "k")
    point = decode_state(stored)
    assert point.last_seq == events[k].seq
    assert (
        encode_state(
            replace(
                after_restore,
                snapshots=(),
                last_seq=point.last_seq,
                last_event_ms=point.last_event_ms,
            )
        )
        == stored
    )
    assert after_restore.last_seq == events[r].seq

    offline = SessionEngine.create("w1")
    for ev in events[: k + 1]:
        offline.on_event(ev)
    offline_outs = [offline.on_event(ev) for ev in events[r + 1 :]]
    assert live_outs == offline_outs
    assert any(o.assessment is not None for o in offline_outs)
    assert encode_state(eng.snapshot()) == encode_state(offline.snapshot())


def test_requests_from_outside_take_the_next_seq(settings: Settings, admin: Any) -> None:
    with pytest.raises(InvalidEventError) as info:
        request_snapshot(settings, "nobody")
    assert info.value.field == "session_id"
    ensure_snapshots_topic(admin, settings)
    with Publisher(settings) as pub:
        with pub.session("paused", agent_id="a7", parent_session_id="boss") as s:
            s.message("hello")
        last_seq = s.next_seq - 1
    ev = request_snapshot(settings, "paused")
    assert ev.seq == last_seq + 1
    assert ev.metadata["snapshot_id"] == f"snap-{ev.seq}"
    with pytest.raises(InvalidEventError) as missing:
        request_restore(settings, "paused", ev.metadata["snapshot_id"])
    assert missing.value.field == "metadata.snapshot_id"
    # the worker's half: store it, then the restore request passes its check
    eng = SessionEngine.create("paused")
    for e in session_events(settings, "paused"):
        eng.on_event(e)
    produce(
        settings,
        [
            (
                snapshot_key("paused", ev.metadata["snapshot_id"]),
                snapshot_value(eng.snapshot(), ev.metadata["snapshot_id"]),
                snapshot_headers(ev),
            )
        ],
    )
    back = request_restore(settings, "paused", ev.metadata["snapshot_id"])
    assert back.seq == ev.seq + 1
    events = session_events(settings, "paused")
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[-2:] == [ev, back]
    assert all(e.agent_id == "a7" and e.parent_session_id == "boss" for e in events)
    assert eng.on_event(back).applied
    base = ["--bootstrap", settings.bootstrap, "--prefix", settings.prefix]
    assert main(["snapshot", "create", "--session", "paused", "--id", "cli", *base]) == 0
    assert session_events(settings, "paused")[-1].metadata["snapshot_id"] == "cli"


def test_ensure_refuses_a_delete_policy_topic(
    kafka_bootstrap: str, topic_prefix: str, admin: Any, create_topics: Any
) -> None:
    s = Settings(bootstrap=kafka_bootstrap, prefix=topic_prefix)
    create_topics(s.snapshots_topic, config={"cleanup.policy": "delete"})
    with pytest.raises(ConfigError) as info:
        ensure_snapshots_topic(admin, s)
    assert info.value.key == "cleanup.policy"
