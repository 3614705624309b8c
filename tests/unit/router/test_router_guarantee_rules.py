"""``--guarantee``: config and CLI validation, metrics, and the at-least-once commit
rules (flush before commit, never commit past an undelivered message).

librdkafka's Consumer/Producer are replaced by small fakes that record what the
router asks of them (no broker); the real-broker tests are
``tests/integration/test_router_guarantee.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition
from fake_producer import FakeProduce
from prom_samples import samples

import streams.router.router as router_mod
from streams.commands import router as cmd
from streams.core.events import TraceEvent
from streams.errors import ConfigError, DeliveryError
from streams.router import RouterConfig, RouterStats, format_status
from streams.router.config import GUARANTEES
from streams.router.metrics import RouterMetrics
from streams.serde import EventSerde
from streams.settings import Settings

SERDE = EventSerde()


# -- config --------------------------------------------------------------------
def test_config_default_is_exactly_once_and_linger_follows_the_mode() -> None:
    assert GUARANTEES == ("exactly-once", "at-least-once")
    c = RouterConfig()
    assert c.guarantee == "exactly-once" and c.exactly_once
    assert c.resolved_linger_ms() == 5
    a = RouterConfig(guarantee="at-least-once")
    assert not a.exactly_once and a.resolved_linger_ms() == 1
    assert RouterConfig(guarantee="at-least-once", linger_ms=3).resolved_linger_ms() == 3


@pytest.mark.parametrize("value", ["exactly_once", "at-most-once", "", "EXACTLY-ONCE", None])
def test_config_rejects_unknown_guarantee(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        RouterConfig(guarantee=value)  # type: ignore[arg-type]
    assert info.value.key == "guarantee"
    assert "'exactly-once'" in str(info.value) and "'at-least-once'" in str(info.value)


@pytest.mark.parametrize("value", [-1, 1001, 2.5, True, "5"])
def test_config_rejects_bad_linger(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        RouterConfig(linger_ms=value)  # type: ignore[arg-type]
    assert info.value.key == "linger_ms"


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_config_rejects_a_non_bool_commit_in_background(value: object) -> None:
    assert RouterConfig().commit_in_background is False  # the default
    with pytest.raises(ConfigError) as info:
        RouterConfig(commit_in_background=value)  # type: ignore[arg-type]
    assert info.value.key == "commit_in_background"


# -- CLI ---------------------------------------------------------------------------
def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trajectory router")
    cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_default_is_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cmd.GUARANTEE_ENV, raising=False)
    args = parse()
    assert args.guarantee == "exactly-once" and args.linger_ms is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("at-least-once", "at-least-once"),
        ("exactly-once", "exactly-once"),
        ("at_least_once", "at-least-once"),  # Kafka Streams' spellings
        ("exactly_once_v2", "exactly-once"),
        ("AT-LEAST-ONCE", "at-least-once"),
    ],
)
def test_cli_guarantee_flag(value: str, expected: str) -> None:
    assert parse("--guarantee", value).guarantee == expected


def test_cli_environment_sets_the_default_and_the_flag_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cmd.GUARANTEE_ENV, "at-least-once")
    assert parse().guarantee == "at-least-once"
    assert parse("--guarantee", "exactly-once").guarantee == "exactly-once"


@pytest.mark.parametrize("value", ["bogus", "at-most-once", ""])
def test_cli_bad_guarantee_names_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--guarantee", value)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --guarantee" in err
    assert "exactly-once" in err and "at-least-once" in err


def test_cli_bad_environment_value_names_flag_and_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(cmd.GUARANTEE_ENV, "sometimes")
    with pytest.raises(SystemExit) as info:
        parse()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --guarantee" in err and "'sometimes'" in err and cmd.GUARANTEE_ENV in err


@pytest.mark.parametrize("value", ["-1", "1001", "x"])
def test_cli_bad_linger_names_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--linger-ms", value)
    assert "argument --linger-ms" in capsys.readouterr().err


def test_help_explains_the_trade_off(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cmd.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needle in (
        "--guarantee {exactly-once,at-least-once}",
        "read_committed consumers see nothing twice",
        "batch window",
        "lowest latency",
        "a crash can repeat up to one commit interval",
        "seq dedupe",
        "identifiable duplicate",
        cmd.GUARANTEE_ENV,
    ):
        assert needle in out, needle


def test_run_passes_the_guarantee_to_the_router(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import signal

    import streams.router

    seen: list[RouterConfig] = []
    clients: list[dict[str, Any]] = []

    class FakeRouter:
        close_abandoned = False  # the command reads it after the stop

        def __init__(
            self,
            settings: Settings,
            config: RouterConfig,
            metrics: Any = None,
            **client_config: dict[str, Any],
        ) -> None:
            seen.append(config)
            clients.append(client_config)

        def start(self) -> None:
            pass

        def run(self) -> RouterStats:
            return RouterStats(routed=7, offset_commits=3)

        def close(self) -> None:
            pass

        def request_stop(self) -> None:
            pass

    monkeypatch.setattr(streams.router, "Router", FakeRouter, raising=False)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.delenv(cmd.CLIENT_DEBUG_ENV, raising=False)
    args = parse(
        "--guarantee",
        "at-least-once",
        "--linger-ms",
        "2",
        "--batch-ms",
        "250",
        "--fetch-wait-ms",
        "40",
        "--fetch-min-bytes",
        "1",
    )
    caplog.set_level("INFO", logger="streams.router")
    assert cmd.run(args) == 0
    c = seen[0]
    assert (c.guarantee, c.linger_ms, c.batch_max_ms, c.fetch_wait_max_ms, c.fetch_min_bytes) == (
        "at-least-once",
        2,
        250,
        40,
        1,
    )
    assert "stopped: routed 7, dead-lettered 0, 3 offset commits" in caplog.text
    assert "(at-least-once)" in caplog.text
    # no --client-debug: the clients get no debug setting
    assert clients[0] == {"extra_consumer_config": {}, "extra_producer_config": {}}
    monkeypatch.setenv(cmd.CLIENT_DEBUG_ENV, "cgrp")
    assert cmd.run(parse()) == 0
    assert clients[1] == {
        "extra_consumer_config": {"debug": "cgrp"},
        "extra_producer_config": {"debug": "cgrp"},
    }
    assert cmd.run(parse("--client-debug", "cgrp,eos")) == 0  # the flag wins
    assert clients[2]["extra_producer_config"] == {"debug": "cgrp,eos"}


# -- status line and metrics -------------------------------------------------------
def test_status_line_names_the_modes_commits() -> None:
    a = RouterStats(at_s=1.0)
    b = RouterStats(routed=10, offset_commits=4, failed_commits=1, transactions=0, at_s=2.0)
    line = format_status(a, b, 3, "at-least-once")
    assert "offset-commits 4 failed 1" in line and "txns" not in line
    assert "txns 0 aborts 0" in format_status(a, b, 3)


def test_metrics_at_least_once_count_at_the_flush() -> None:
    m = RouterMetrics()
    m.set_guarantee("exactly-once")
    m.set_guarantee("at-least-once")  # only the current mode is exposed
    m.on_accepted("message")
    m.on_accepted("message")
    m.on_rejected("MalformedMessageError")
    m.on_flushed(0.002)
    m.on_offsets_commit(0.005)
    m.on_accepted("message")
    m.on_flushed(0.001)
    m.on_offsets_commit(0.003, ok=False)  # delivered, the commit was refused
    s = samples(m)
    assert s[("trajectory_router_guarantee", (("guarantee", "at-least-once"),))] == 1
    assert ("trajectory_router_guarantee", (("guarantee", "exactly-once"),)) not in s
    assert not [k for k in s if k[0] == "trajectory_router_shard"]  # a group member
    m.set_shard(1, 2)
    s = samples(m)
    assert s[("trajectory_router_shard", (("count", "2"), ("index", "1")))] == 1
    assert s[("trajectory_router_events_total", (("type", "message"),))] == 3
    assert s[("trajectory_router_dlq_total", (("reason_class", "MalformedMessageError"),))] == 1
    assert s[("trajectory_router_offset_commits_total", ())] == 1
    assert s[("trajectory_router_failed_offset_commits_total", ())] == 1
    assert s[("trajectory_router_transactions_total", ())] == 0
    # the loop is blocked for the flush only: the offset commit is asynchronous
    assert s[("trajectory_router_commit_seconds_count", ())] == 2
    assert s[("trajectory_router_commit_seconds_sum", ())] == pytest.approx(0.003)
    assert s[("trajectory_router_flush_seconds_sum", ())] == pytest.approx(0.003)
    assert s[("trajectory_router_offset_commit_seconds_sum", ())] == pytest.approx(0.008)


# -- the router with fake clients ------------------------------------------------
class FakeMessage:
    def __init__(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> None:
        self._topic, self._offset, self._value, self._key = topic, offset, value, key

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class World:
    """What the fakes saw, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.producers: list[FakeProducer] = []
        self.consumer: FakeConsumer | None = None
        self.queue: list[FakeMessage] = []
        self.delivery_errors: list[KafkaError] = []  # served on the next poll/flush
        self.undelivered = 0  # what flush() reports as left
        self.commit_error: KafkaError | None = None


class FakeProducer(FakeProduce):
    def __init__(self, world: World, conf: dict[str, Any]) -> None:
        self.world, self.conf = world, conf
        world.producers.append(self)

    def init_transactions(self, timeout: float) -> None:
        self.world.log.append(("init_transactions", self.conf.get("transactional.id")))

    def produced(
        self, topic: str, value: bytes | None, key: bytes | None, timestamp: int, headers: Any
    ) -> None:
        self.world.log.append(("produce", topic, key))

    def _serve(self) -> None:
        while self.world.delivery_errors:
            err = self.world.delivery_errors.pop(0)
            self.conf["on_delivery"](err, FakeMessage("p.events", -1, None, None))

    def poll(self, timeout: float) -> int:
        self._serve()
        return 0

    def flush(self, timeout: float) -> int:
        self.world.log.append(("flush",))
        self._serve()
        return self.world.undelivered


class FakeConsumer:
    def __init__(self, world: World, conf: dict[str, Any]) -> None:
        self.world, self.conf = world, conf
        world.consumer = self
        self.positions: dict[tuple[str, int], int] = {}
        self.callbacks: dict[str, Any] = {}
        self.assigned = False
        self.answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def _assign(self) -> None:
        if not self.assigned:
            self.assigned = True
            self.callbacks["on_assign"](
                self, [TopicPartition("p.session.a", 0), TopicPartition("p.session.b", 0)]
            )

    def _answer(self) -> None:
        """Serve the answers of asynchronous offset commits, as librdkafka does from
        inside consume(), poll() and close()."""
        while self.answers:
            err, offsets = self.answers.pop(0)
            self.conf["on_commit"](err, offsets)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self._assign()
        self._answer()
        out, self.world.queue = (
            self.world.queue[:num_messages],
            self.world.queue[num_messages:],
        )
        for m in out:
            self.positions[(m.topic(), 0)] = m.offset() + 1
        return out

    def poll(self, timeout: float) -> None:
        self._assign()
        self._answer()
        return None

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1))
            for tp in tps
        ]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.world.log.append(("pause", tuple(tp.topic for tp in tps)))

    def resume(self, tps: list[TopicPartition]) -> None:
        pass  # (called for every newly assigned partition; nothing is paused here)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous is True  # never a commit the loop would wait for
        self.answers.append((self.world.commit_error, list(offsets)))
        if self.world.commit_error is None:  # ("commit": the broker took them)
            self.world.log.append(("commit", tuple((tp.topic, tp.offset) for tp in offsets)))

    def close(self) -> None:
        self.world.log.append(("close",))
        self.callbacks["on_revoke"](self, [TopicPartition("p.session.a", 0)])
        self._answer()  # (librdkafka answers the commits in flight before it closes)

    def list_topics(self, timeout: float) -> None:
        return None


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()
    monkeypatch.setattr(router_mod, "Producer", lambda conf: FakeProducer(w, conf))
    monkeypatch.setattr(router_mod, "Consumer", lambda conf: FakeConsumer(w, conf))
    monkeypatch.setattr(router_mod, "ensure_topics", lambda settings, config: None)
    return w


def make_router(**kw: Any) -> router_mod.Router:
    cfg = RouterConfig(status_interval_s=0, **kw)
    return router_mod.Router(Settings(prefix="p"), cfg, decoder=SERDE)


def events(n: int, start: int = 0, sid: str = "a") -> list[FakeMessage]:
    return [
        FakeMessage(
            f"p.session.{sid}",
            i,
            SERDE.encode(TraceEvent(type="message", session_id=sid, seq=i, timestamp_ms=i)),
            sid.encode(),
        )
        for i in range(start, start + n)
    ]


def commits(world: World) -> list[dict[str, int]]:
    return [dict(e[1]) for e in world.log if e[0] == "commit"]


def test_at_least_once_producer_is_idempotent_and_not_transactional(world: World) -> None:
    r = make_router(guarantee="at-least-once")
    r.start()
    fencer, producer = world.producers
    # a leftover transaction of an exactly-once predecessor is aborted first
    assert world.log[0] == ("init_transactions", "p.router.0")
    assert fencer.conf["transactional.id"] == "p.router.0"
    conf = producer.conf
    assert "transactional.id" not in conf
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert conf["linger.ms"] == 1 and conf["partitioner"] == "murmur2_random"
    assert world.consumer is not None
    assert world.consumer.conf["group.instance.id"] == "p.router.0"
    assert world.consumer.conf["enable.auto.commit"] is False


def test_exactly_once_producer_is_transactional(world: World) -> None:
    r = make_router()
    r.start()
    (producer,) = world.producers
    assert producer.conf["transactional.id"] == "p.router.0"
    assert producer.conf["linger.ms"] == 5
    assert "enable.idempotence" not in producer.conf


def test_at_least_once_produces_at_once_then_flushes_before_committing(world: World) -> None:
    world.queue = events(3)
    r = make_router(guarantee="at-least-once", batch_max_ms=1)
    r.start()
    stats = r.run(until=lambda s: s.routed >= 3, max_seconds=10)
    r.close()
    ops = [e[0] for e in world.log]
    assert ops[:4] == ["init_transactions", "produce", "produce", "produce"]
    first_commit = ops.index("commit")
    assert ops[first_commit - 1] == "flush"  # never a commit without a flush just before
    assert commits(world) == [{"p.session.a": 3}]
    assert stats.routed == 3 and stats.transactions == 0
    # the commit's answer comes with a later consume / close (it is asynchronous)
    assert r.stats().offset_commits == 1


def test_at_least_once_delivery_error_stops_without_committing(world: World) -> None:
    world.queue = events(2)
    world.delivery_errors = [KafkaError(KafkaError._MSG_TIMED_OUT)]
    r = make_router(guarantee="at-least-once", batch_max_ms=1000)
    r.start()
    with pytest.raises(DeliveryError, match=r"could not be delivered.*Message timed out"):
        r.run(max_seconds=10)
    r.close()  # must not commit either (the revoke on close sees the failure)
    assert not [e for e in world.log if e[0] == "commit"]
    assert ("flush",) in world.log  # close() still flushes what can be delivered


def test_at_least_once_undelivered_after_the_flush_timeout_stops_without_committing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_mod, "FLUSH_TIMEOUT_S", 0.05)
    world.queue = events(2)
    world.undelivered = 2
    r = make_router(guarantee="at-least-once", batch_max_ms=1)
    r.start()
    with pytest.raises(DeliveryError, match=r"2 message\(s\) still undelivered"):
        r.run(max_seconds=10)
    r.close()
    assert not [e for e in world.log if e[0] == "commit"]


def test_at_least_once_commits_only_the_partitions_that_moved(world: World) -> None:
    world.queue = events(2) + events(1, sid="b")
    r = make_router(guarantee="at-least-once", batch_max_ms=1)
    r.start()
    r.run(until=lambda s: s.routed >= 3, max_seconds=10)
    assert commits(world) == [{"p.session.a": 2, "p.session.b": 1}]
    world.queue = events(1, start=2)
    r.run(until=lambda s: s.routed >= 4, max_seconds=10)
    r.close()  # nothing moved since: nothing more to commit
    assert commits(world) == [{"p.session.a": 2, "p.session.b": 1}, {"p.session.a": 3}]


def test_at_least_once_refused_commit_is_retried_by_the_next_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_mod, "REFUSED_RETRY_S", 0.005)
    world.queue = events(2) + events(1, sid="b")
    world.commit_error = KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rejoining")
    r = make_router(guarantee="at-least-once", batch_max_ms=1, max_consecutive_aborts=1000)
    r.start()
    r.run(max_seconds=0.1)  # (retried after REFUSED_RETRY_S, with no new batch)
    assert r.stats().routed == 3 and r.stats().failed_commits >= 2
    assert r.stats().offset_commits == 0 and commits(world) == []
    world.commit_error = None
    world.queue = events(1, start=2)  # only a moves now; b's refused offset is kept
    r.run(until=lambda s: s.routed >= 4, max_seconds=10)
    r.close()
    assert commits(world) == [{"p.session.a": 3, "p.session.b": 1}]
    assert r.stats().offset_commits == 1


def test_at_least_once_gives_up_after_too_many_refused_commits(world: World) -> None:
    world.commit_error = KafkaError(KafkaError.ILLEGAL_GENERATION, "fenced generation")
    r = make_router(guarantee="at-least-once", batch_max_ms=1, max_consecutive_aborts=2)
    r.start()
    with pytest.raises(DeliveryError, match="2 offset commits in a row were refused"):
        for i in range(3):
            world.queue = events(1, start=i)
            target = i + 1
            r.run(until=lambda s: s.routed >= target, max_seconds=10)  # noqa: B023
    r.close()
    assert not [e for e in world.log if e[0] == "commit"]
