"""Fault driver for the chaos suite (issue #15): one broker, one router, one worker
(or several, with partitions on the move), a steady SDK load, malformed inputs,
SIGKILLs and a broker restart; then figures.

Used by ``tests/bench/bench_chaos.py`` (prints the figures) and by
``tests/chaos/test_chaos_faults.py`` (asserts the correctness outcomes at a small
size).  Everything runs on this machine's loopback: a dedicated
:class:`~streams.broker.LocalBroker` on free ports in a temporary directory, and
``python -m streams.commands.router`` / ``...worker`` subprocesses of this checkout.

What a run does (all random choices from ``random.Random(seed)``):

1. start the broker, create the topics, start the router and the worker
   (``--worker-id``, ``--data-dir``, ``--max-sessions-in-memory`` small: eviction
   pressure);
2. a load thread runs ``sessions`` concurrent SDK sessions (``Publisher.session``
   API: ``session_start`` ... ``session_end``) of ``events_per_session`` events
   each, back to back, at ``rate`` events/s in total, until the faults are done;
3. an injector thread produces the malformed inputs of
   :mod:`chaos_inputs` (raw bytes, its own idempotent producer) spread over the
   run, into the live sessions' topics and its own abuse sessions' topics;
4. the fault loop SIGKILLs router or worker at seeded moments, restarts each at
   once (the worker with the same ``--worker-id`` and data dir) and measures the
   recovery time (router: first event committed to ``<prefix>.events`` after the
   restart; worker: first event applied by the new process, ``/stats``); once,
   midway, it stops the broker and starts it again on the same ports and data dir;
   a process that exits on its own is recorded (an *unexpected exit*) and restarted;
   with ``workers`` > 1 a worker kill picks one of them, every ``wipe_every``-th
   restarts with an emptied data dir, and ``joins`` scale-out faults start an extra
   worker (partitions move to it, restored from the changelogs) and stop it again
   (SIGTERM, then SIGKILL in turn: its partitions move back);
5. it lets the pipeline drain, then reads the worker's state of every session
   (``/sessions/{id}/state``), the DLQ, the output topics, and runs
   ``python -m streams replay --compare-live``.

Figures are measured, never assumed: a check that cannot be made (a session
whose state cannot be read) counts against the outcome, not for it.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_inputs import DLQ_CLASSES, ChaosInput, expected_abuse_state, generate

REPO = Path(__file__).resolve().parents[2]
PREFIX = "chaos"
PARTITIONS = 3
#: no routed event for this long while the load runs (the broker outage aside): the
#: router is diagnosed (SIGUSR1: every thread's stack, and a py-spy dump, into its log)
ROUTING_STALL_S = 20.0
#: an arrival monitor that saw nothing for this long while records are past its
#: positions replaces its consumer (:meth:`ArrivalMonitor.run`)
MONITOR_STALL_S = 10.0


@dataclass(frozen=True)
class ChaosConfig:
    """Size of a run.  The CI default is small; :meth:`full` is the issue's size."""

    kills: int = 3
    sessions: int = 6
    rate: float = 120.0
    malformed: int = 500
    seed: int = 15
    events_per_session: int = 60
    max_sessions_in_memory: int = 2
    #: seconds between a recovery and the next fault (uniform in this range)
    gap_s: tuple[float, float] = (2.0, 5.0)
    broker_down_s: tuple[float, float] = (5.0, 10.0)
    broker_restart: bool = True
    #: give up waiting for one recovery after this long (recorded as "none")
    recovery_timeout_s: float = 45.0
    #: the same after the broker restart: on a busy 2-core box the broker's stop and
    #: start took 113 s in all (2026-12-02 CI), the clients' sessions, transactions
    #: and connection backoffs expired meanwhile, and their recovery needs longer
    broker_recovery_timeout_s: float = 120.0
    #: after the load stops: wait this long at most for the state to settle
    drain_timeout_s: float = 90.0
    #: how long to wait for the worker to flush every waiting session before
    #: compare-live: twice the default --engine-flush-interval and some
    flush_wait_s: float = 75.0
    compare_live_timeout_s: float = 240.0
    #: input classes left out (diagnosis only: see chaos_inputs.class_counts)
    exclude: tuple[str, ...] = ()
    #: the router's --guarantee (at-least-once: dead letters and events may repeat
    #: after a kill; the outcomes allow identical repeats either way)
    guarantee: str = "exactly-once"
    #: worker processes: static members ``chaos-w1`` .. ``chaos-wN``, each with its
    #: own data dir and web port; a worker kill picks one of them
    workers: int = 1
    #: every this-many-th worker kill (the first, then every N-th) restarts the worker
    #: with an emptied data dir (the local store lost: its partitions are restored
    #: from the changelogs alone); 0: never
    wipe_every: int = 0
    #: scale-out faults: an extra worker (a new id, an empty data dir) joins, takes
    #: partitions over (restored from the changelogs) and leaves again, by SIGTERM
    #: and by SIGKILL in turn (then its partitions move back after the group's
    #: session timeout); its recovery is its first event applied
    joins: int = 0
    #: the share of kills that hit the router (the rest: a worker)
    router_share: float = 0.5
    #: partitions of ``<prefix>.events``: more than ``workers`` for a joining worker
    #: to get any
    partitions: int = PARTITIONS
    #: router processes (``--transactional-id chaos.router.N``: each its own static
    #: member of the router group); a router kill picks one of them
    routers: int = 1
    #: run the routers as static shards (``--shard N/routers``: no group, each its
    #: own share of the session topics) instead of members of the router group
    static_shards: bool = False
    #: more arguments for the router (diagnosis, e.g. ``("--client-debug", "cgrp")``)
    router_args: tuple[str, ...] = ()

    @classmethod
    def full(cls, **changes: Any) -> ChaosConfig:
        """Issue #15's full size: >= 20 kills, >= 10,000 malformed inputs."""
        base: dict[str, Any] = {"kills": 20, "malformed": 10_000, "sessions": 20, "rate": 150.0}
        base.update(changes)
        return cls(**base)

    @classmethod
    def fleet(cls, **changes: Any) -> ChaosConfig:
        """Partitions on the move: two workers, two thirds of the kills on them,
        every third of those with the store lost, four scale-out joins and leaves, on top
        of :meth:`full`'s faults at a third of its size."""
        base: dict[str, Any] = {
            "kills": 8,
            "malformed": 2_000,
            "sessions": 12,
            "rate": 150.0,
            "workers": 2,
            "wipe_every": 3,
            "joins": 4,
            "router_share": 0.34,
        }
        base.update(changes)
        return cls(**base)


@dataclass
class KillRecord:
    index: int
    #: "router", "worker" (a SIGKILL, restarted at once) or "join" (an extra worker
    #: started; recovery_s: until it applied an event)
    target: str
    at_s: float
    recovery_s: float | None
    #: the process ("worker-2", "join-1"); "+wiped": restarted with an empty data dir,
    #: "+sigterm" / "+sigkill": how a joined worker left
    proc: str = ""


@dataclass
class ChaosResult:
    """Everything a run measured (see :func:`format_figures` for the meaning)."""

    config: ChaosConfig
    duration_s: float = 0.0
    sessions: int = 0
    valid_published: int = 0
    publish_failures: list[str] = field(default_factory=list)
    events_lost: int = 0
    sessions_regressed: list[str] = field(default_factory=list)
    sessions_unreadable: list[str] = field(default_factory=list)
    seq_gaps: int = 0
    redeliveries_ignored: int = 0
    output_identical_repeats: int = 0
    output_conflicting_duplicates: int = 0
    kills: list[KillRecord] = field(default_factory=list)
    broker_down_s: float | None = None
    #: of broker_down_s: the clean stop (SIGKILL after 30 s) and the start to ready
    broker_stop_s: float | None = None
    #: monotonic times of the broker's stop and of its start (ready)
    broker_window: tuple[float, float] | None = None
    broker_start_s: float | None = None
    router_recovery_after_broker_s: float | None = None
    #: the longest time no routed event arrived while the load ran, outside the
    #: broker outage (and its recovery window): (seconds, at run second)
    longest_routing_gap: tuple[float, float] | None = None
    worker_recovery_after_broker_s: float | None = None
    unexpected_exits: list[str] = field(default_factory=list)
    processes_up_at_end: dict[str, bool] = field(default_factory=dict)
    malformed_by_class: dict[str, int] = field(default_factory=dict)
    malformed_produced: int = 0
    dlq_expected: int = 0
    dlq_matched_with_reason: int = 0
    dlq_matched_without_reason: int = 0
    dlq_missing_by_class: dict[str, int] = field(default_factory=dict)
    dlq_duplicates: int = 0
    #: inputs dead-lettered more than once with differing content (a consumer
    #: cannot tell which is right); identical repeats are allowed
    dlq_conflicting_duplicates: int = 0
    #: for up to 3 such inputs: the input's class and, per differing record, its
    #: dlq.source.* (None when matched by value digest), class, reason and value
    #: digest, so a failure says what differed
    dlq_conflict_examples: list[str] = field(default_factory=list)
    dlq_other_records: int = 0
    abuse_sessions_wrong: list[str] = field(default_factory=list)
    compare_live_rc: int | None = None
    compare_live_output: str = ""
    #: per process: its last WARNING-or-worse lines and its last lines
    logs: dict[str, str] = field(default_factory=dict)
    #: what the harness saw when a recovery it waited for did not come
    #: (:meth:`ArrivalMonitor.describe`, the workers' /stats)
    notes: list[str] = field(default_factory=list)
    #: each time the arrival monitor replaced its own stuck consumer
    #: (:attr:`ArrivalMonitor.replaced`): a router recovery seen right after one of
    #: these is an upper bound
    monitor_replaced: list[str] = field(default_factory=list)
    #: where the run's logs and data stay
    workdir: str = ""

    @property
    def dlq_share(self) -> float:
        return self.dlq_matched_with_reason / self.dlq_expected if self.dlq_expected else 1.0

    @property
    def compare_live_verdict(self) -> str:
        rc = self.compare_live_rc
        if rc is None:
            return "not run (timed out or could not start)"
        if "Traceback (most recent call last)" in self.compare_live_output:
            return f"crashed (exit {rc}, traceback below)"
        return {0: "clean (exit 0)", 1: "differences (exit 1)"}.get(rc, f"error (exit {rc})")


# --------------------------------------------------------------------------
# processes


class Proc:
    """One of our commands as a subprocess that the driver kills and restarts."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log: Path,
        web_port: int | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.args = args
        self.log = log
        #: a worker's: its HTTP view, and the folder its tables live in
        self.web_port = web_port
        self.data_dir = data_dir
        self.popen: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        with self.log.open("ab") as fh:
            fh.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n".encode())
        self.popen = subprocess.Popen(
            [sys.executable, "-m", *self.args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(30)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def diagnose(self) -> None:
        """A worker that does not recover, a router that routes nothing: SIGUSR1 (a
        worker logs its fetch state at WARNING, then every thread's and task's stack;
        a router every thread's stack) and a py-spy dump, into its log, so the
        report's log lines say where it waits."""
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        spy = shutil.which("py-spy")
        if spy:
            with self.log.open("ab") as fh:
                subprocess.run(
                    [spy, "dump", "--pid", str(self.popen.pid)],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    timeout=30,
                    check=False,
                )

    def warnings(self, last: int = 12, width: int = 1500) -> str:
        """Its last WARNING-or-worse lines (a stall, a SIGUSR1 fetch state): the tail
        alone shows only the stacks that came after them."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        lines = [
            line[:width]
            for line in text.splitlines()
            if "[WARNING]" in line or "[ERROR]" in line or "[CRITICAL]" in line
        ]
        return "\n".join(lines[-last:])

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _http_json(url: str, timeout: float = 3.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, None
    except (OSError, ValueError):
        return 0, None


# --------------------------------------------------------------------------
# load


class Load(threading.Thread):
    """``slots`` concurrent SDK sessions, back to back, until :attr:`stopping`."""

    def __init__(self, settings: Any, cfg: ChaosConfig, rng: random.Random) -> None:
        super().__init__(daemon=True, name="chaos-load")
        from streams.sdk import Publisher

        self.cfg = cfg
        self.rng = rng
        self.publisher = Publisher(
            settings,
            producer_config={"message.timeout.ms": 600_000, "linger.ms": 5},
            admin_timeout_s=20.0,
        )
        self.lock = threading.Lock()
        #: session id -> seqs sent (in order); complete once the session ended
        self.published: dict[str, list[int]] = {}
        #: slot -> (session id, events sent so far in that session)
        self.current: dict[int, tuple[str, list[Any]]] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.done = threading.Event()
        self._counter = 0

    def live(self, slot: int) -> tuple[str, list[Any]] | None:
        with self.lock:
            cur = self.current.get(slot)
            return None if cur is None else (cur[0], list(cur[1]))

    def _event(self, sid: str, seq: int) -> Any:
        from streams.core.events import TraceEvent

        now = int(time.time() * 1000)
        r = self.rng.random()
        if r < 0.35:
            # repeated identical calls: the doom-loop detector fires, so outputs exist
            return TraceEvent(
                type="tool_call",
                session_id=sid,
                seq=seq,
                timestamp_ms=now,
                call_id=f"c{seq}",
                tool_name="bash",
                input={"cmd": f"pytest -k t{self.rng.randrange(3)}"},
            )
        if r < 0.7:
            return TraceEvent(
                type="tool_result",
                session_id=sid,
                seq=seq,
                timestamp_ms=now,
                call_id=f"c{seq - 1}",
                tool_name="bash",
                output={"rc": 1},
                is_error=self.rng.random() < 0.5,
                error_message="boom",
            )
        if r < 0.85:
            return TraceEvent(
                type="model_step",
                session_id=sid,
                seq=seq,
                timestamp_ms=now,
                input_tokens=self.rng.randrange(1, 400),
                output_tokens=self.rng.randrange(1, 100),
            )
        return TraceEvent(type="message", session_id=sid, seq=seq, timestamp_ms=now, text="ok")

    def _retry(self, what: str, fn: Callable[[], Any]) -> Any:
        """Admin calls block while the broker is down: retry for up to 180 s."""
        deadline = time.monotonic() + 180
        while True:
            try:
                return fn()
            except Exception as exc:
                if time.monotonic() > deadline:
                    self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
                    raise
                time.sleep(1.0)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.errors.append(f"load stopped: {type(exc).__name__}: {exc}")
        finally:
            self.done.set()

    def _run(self) -> None:
        cfg = self.cfg
        open_sessions: dict[int, Any] = {}
        tick = cfg.sessions / cfg.rate
        next_at = time.monotonic()
        while True:
            stopping = self.stopping.is_set()
            for slot in range(cfg.sessions):
                sess = open_sessions.get(slot)
                if sess is None:
                    if stopping:
                        continue
                    sid = f"s{slot}-{self._counter}"
                    self._counter += 1
                    sess = self.publisher.session(sid, agent_id=f"agent{slot}", flush_on_exit=False)
                    with self.lock:
                        self.published[sid] = []
                    self._retry(f"start {sid}", sess.start)
                    with self.lock:
                        self.published[sid].append(0)
                        # live for the injector only once start() created its topic: a
                        # slot input produced before then (start() retries while the
                        # broker is down) hit UNKNOWN_TOPIC_OR_PART and stopped it
                        self.current[slot] = (sid, [])
                    open_sessions[slot] = sess
                    continue
                sid = sess.session_id
                with self.lock:
                    sent = len(self.published[sid])
                if stopping or sent >= cfg.events_per_session - 1:
                    sess.end()
                    with self.lock:
                        self.published[sid].append(sent)
                    del open_sessions[slot]
                    continue
                ev = sess.emit(self._event(sid, sent))
                with self.lock:
                    self.published[sid].append(ev.seq)
                    self.current[slot][1].append(ev)
            if stopping and not open_sessions:
                break
            next_at += tick
            time.sleep(max(0.0, next_at - time.monotonic()))
        try:
            self.publisher.flush(120)
        except Exception as exc:
            self.errors.append(f"final flush: {type(exc).__name__}: {exc}")
        self.publisher.close(30)


# --------------------------------------------------------------------------
# malformed inputs


class Injector(threading.Thread):
    """Produces the generated inputs over ``duration_s``, recording where each landed."""

    def __init__(self, bootstrap: str, settings: Any, items: list[ChaosInput], load: Load) -> None:
        super().__init__(daemon=True, name="chaos-inject")
        from confluent_kafka import Producer

        self.settings = settings
        self.items = items
        self.load = load
        self.duration_s = 30.0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.max.bytes": 4 * 1024 * 1024,
                "message.timeout.ms": 600_000,
            }
        )
        #: input index -> (topic, partition, offset)
        self.landed: dict[int, tuple[str, int, int]] = {}
        #: input index -> sha1 of the produced value (to match a worker-side DLQ copy)
        self.digests: dict[str, int] = {}
        self.errors: list[str] = []
        self.produced = 0
        self.skipped: Counter[str] = Counter()
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.errors.append(f"injector stopped: {type(exc).__name__}: {exc}")
        finally:
            self.done.set()

    def _run(self) -> None:
        from streams.errors import DeliveryError
        from streams.serde import EventSerde

        serde = EventSerde()
        t0 = time.monotonic()
        n = max(1, len(self.items))
        slots = self.load.cfg.sessions
        for i, item in enumerate(self.items):
            due = t0 + self.duration_s * i / n
            while (wait := due - time.monotonic()) > 0:
                self.producer.poll(min(0.2, wait))
            if item.session is not None:
                topic = self.settings.session_topic(item.session)
                self._produce(item, topic, item.session.encode(), item.payload())
                continue
            assert item.slot is not None
            live = None
            deadline = time.monotonic() + 60
            while live is None and time.monotonic() < deadline:
                live = self.load.live(item.slot)
                if live is None:
                    self.producer.poll(0.2)
            if live is None:
                self.skipped[item.kind] += 1
                continue
            sid, events = live
            if item.kind == "duplicate_seq":
                # A duplicate re-sends an event that reached Kafka.  One still in the
                # SDK's producer (e.g. buffered while the broker is down) would land
                # *after* this copy, which makes the copy an out-of-order future seq in
                # a valid session (the worker then applies it and ignores the late
                # originals below it: docs/guarantees.md, seq strictly increasing).
                # That is the out_of_order_seq class, tested in its own sessions.
                candidates = list(events)
                if candidates:
                    try:
                        self.load.publisher.flush(60)
                    except DeliveryError:  # still undelivered: nothing delivered to copy yet
                        self.skipped[item.kind] += 1  # reported with the inputs produced
                        continue
                if not candidates:
                    self.skipped[item.kind] += 1
                    continue
                value = serde.encode(candidates[int(item.pick * len(candidates))])
            else:
                other = next(
                    (
                        cur[0]
                        for k in range(1, slots)
                        if (cur := self.load.live((item.slot + k) % slots)) and cur[0] != sid
                    ),
                    "nobody-else",
                )
                value = item.payload(sid, other)
            self._produce(item, self.settings.session_topic(sid), sid.encode(), value)
        left = self.producer.flush(300)
        if left:
            self.errors.append(f"{left} inputs still undelivered after 300 s")

    def _produce(self, item: ChaosInput, topic: str, key: bytes, value: bytes) -> None:
        def cb(err: Any, msg: Any, index: int = item.index) -> None:
            if err is not None:
                self.errors.append(f"input #{index}: {err}")
            else:
                self.landed[index] = (msg.topic(), msg.partition(), msg.offset())

        while True:
            try:
                self.producer.produce(topic, value, key, on_delivery=cb)
                break
            except BufferError:
                self.producer.poll(0.5)
        self.producer.poll(0)
        if item.expect == "dlq":
            self.digests[hashlib.sha1(value).hexdigest()] = item.index
        self.produced += 1


# --------------------------------------------------------------------------
# observers


class ArrivalMonitor(threading.Thread):
    """Notes when committed events arrive on ``<prefix>.events`` (router recovery)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
        super().__init__(daemon=True, name="chaos-monitor")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.last_arrival = 0.0
        self.arrivals = 0
        #: monotonic time of each consume() that returned committed events
        self.arrived_at: list[float] = []
        #: partition -> this consumer's position, read about every 2 s (with when):
        #: a recovery it did not see can then be told from a consumer of its own that
        #: stopped fetching (:meth:`describe`)
        self.positions: dict[int, int] = {}
        self.positions_at = 0.0
        #: each time this monitor replaced its own consumer, stuck behind records
        #: that a fresh client sees: (monotonic time, what it saw)
        self.replaced: list[tuple[float, str]] = []
        self.stop_event = threading.Event()

    def describe(self) -> str:
        """This monitor's positions against the topic's end offsets now (a fresh
        client), for a recovery it did not see: positions behind the ends mean
        records it did not fetch, not a pipeline that routed nothing."""
        ends = self._end_offsets()
        age = time.monotonic() - self.positions_at
        return (
            f"arrival monitor: {self.arrivals} record(s) seen, the last "
            f"{time.monotonic() - self.last_arrival:.0f}s ago; its positions {self.positions} "
            f"(read {age:.0f}s ago), {self.topic}'s end offsets now "
            f"{'not readable' if ends is None else ends}"
        )

    def first_arrival_after(self, t: float) -> float | None:
        """Seconds from ``t`` to the first arrival after it so far (None: none yet)."""
        arrived = self.arrived_at
        i = bisect.bisect_right(arrived, t)  # appended in time order by this thread
        return arrived[i] - t if i < len(arrived) else None

    def first_after(self, t: float, timeout_s: float) -> float | None:
        """Seconds from ``t`` to the first arrival after it (None: none within timeout)."""
        deadline = t + timeout_s
        while time.monotonic() < deadline:
            if (seen := self.first_arrival_after(t)) is not None:
                return seen
            time.sleep(0.05)
        return None

    def _end_offsets(self) -> dict[int, int] | None:
        """The topic's end offsets, read by a fresh client (None: not readable now,
        e.g. while the broker is down)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        probe = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-monitor-probe"})
        try:
            return {
                p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)[1]
                for p in range(self.partitions)
            }
        except KafkaException:
            return None
        finally:
            probe.close()

    def _consumer(self, starts: dict[int, int]) -> Any:
        """A read_committed consumer of the topic, each partition from ``starts``
        (its end where not given)."""
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "chaos-monitor",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.assign(
            [
                TopicPartition(self.topic, p, starts.get(p, OFFSET_END))
                for p in range(self.partitions)
            ]
        )
        return consumer

    def run(self) -> None:
        """Consume, noting arrivals; a consumer that sees nothing for
        ``MONITOR_STALL_S`` while a fresh client sees records past its positions is
        replaced by one that starts at those positions.

        Why: after a broker restart this consumer once saw nothing for the rest of a
        CI run while the broker's log shows the router committing from ~10 s after
        the restart: the probe, not the pipeline, had stopped (the router guards its
        own consumer against the same librdkafka behaviour, docs/kafka-notes.md "Router:
        a consumer that stops fetching after a broker restart").  A replacement reads
        the same records, so what the run measures stays true, only later: a recovery
        first seen right after a replacement is an upper bound (``replaced`` says when).
        """
        from confluent_kafka import TopicPartition

        consumer = self._consumer({})
        since = time.monotonic()  # of this consumer: a stall is counted from here or an arrival
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            while not self.stop_event.is_set():
                batch = consumer.consume(1000, timeout=0.1)
                got = [m for m in batch if m.error() is None]
                if got:
                    # first arrival of this batch; keep the earliest after a restart mark
                    self.last_arrival = time.monotonic()
                    self.arrivals += len(got)
                    self.arrived_at.append(self.last_arrival)
                now = time.monotonic()
                if now - self.positions_at < 2.0:
                    continue
                self.positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
                self.positions_at = now
                if now - max(self.last_arrival, since) < MONITOR_STALL_S:
                    continue
                ends = self._end_offsets()
                if not behind(self.positions, ends or {}):
                    continue
                self.replaced.append(
                    (
                        now,
                        f"nothing seen for {now - max(self.last_arrival, since):.0f}s at "
                        f"positions {self.positions}, end offsets {ends}",
                    )
                )
                # the old consumer may be wedged in librdkafka: closed in the background
                threading.Thread(target=consumer.close, daemon=True).start()
                consumer = self._consumer({p: o for p, o in self.positions.items() if o >= 0})
                since = time.monotonic()
        finally:
            consumer.close()


def behind(positions: dict[int, int], ends: dict[int, int]) -> list[int]:
    """The partitions whose end offset is past a consumer's known position (a
    position below 0 is not known yet: nothing fetched since an assignment at the end)."""
    return sorted(p for p, pos in positions.items() if pos >= 0 and ends.get(p, -1) > pos)


def _read_topic(bootstrap: str, topic: str, committed: bool = True) -> list[Any]:
    """Every record of ``topic`` up to its high watermarks now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-reader",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if md is None or md.error is not None:
            return []
        ends: dict[int, int] = {}
        parts = []
        for p in md.partitions:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi > lo:
                ends[p] = hi
                parts.append(TopicPartition(topic, p, lo))
        if not parts:
            return []
        consumer.assign(parts)
        out: list[Any] = []
        done: set[int] = set()
        deadline = time.monotonic() + 120
        while len(done) < len(ends) and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                if m.error() is not None:
                    continue
                out.append(m)
                if m.offset() >= ends[m.partition()] - 1:
                    done.add(m.partition())
            # read_committed: transaction markers occupy offsets; the position tells
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        return out
    finally:
        consumer.close()


# --------------------------------------------------------------------------
# the run


def router_command(
    bootstrap: str, guarantee: str = "exactly-once", partitions: int = PARTITIONS
) -> list[str]:
    """``python -m`` arguments of the router the chaos runs start (and restart)."""
    return [
        "streams.commands.router",
        "--bootstrap",
        bootstrap,
        "--prefix",
        PREFIX,
        "--partitions",
        str(partitions),
        "--status-every",
        "0",
        "--guarantee",
        guarantee,
    ]


def _worker_proc(
    bootstrap: str, cfg: ChaosConfig, workdir: Path, name: str, worker_id: str, web_port: int
) -> Proc:
    """A worker subprocess: static member ``worker_id``, tables under
    ``workdir/worker-data/<worker_id>``, its HTTP view on ``web_port``."""
    return Proc(
        name,
        [
            "streams.commands.worker",
            "--bootstrap",
            bootstrap,
            "--prefix",
            PREFIX,
            "--data-dir",
            str(workdir / "worker-data"),
            "--worker-id",
            worker_id,
            "--web-port",
            str(web_port),
            "--max-sessions-in-memory",
            str(cfg.max_sessions_in_memory),
        ],
        workdir / f"{name}.log",
        web_port=web_port,
        data_dir=workdir / "worker-data" / worker_id,
    )


def _fault_plan(cfg: ChaosConfig, rng: random.Random) -> list[str]:
    """The faults in order: "router", "worker" (SIGKILL, restart) and "join"."""
    if cfg.router_share == 0.5:  # (the draws of every seed before router_share)
        targets = [rng.choice(("router", "worker")) for _ in range(cfg.kills)]
    else:
        targets = [
            "router" if rng.random() < cfg.router_share else "worker" for _ in range(cfg.kills)
        ]
    if cfg.kills >= 2 and len(set(targets)) == 1:
        targets[-1] = "worker" if targets[0] == "router" else "router"
    for _ in range(cfg.joins):
        targets.insert(rng.randrange(len(targets) + 1), "join")
    return targets


def run_chaos(cfg: ChaosConfig, workdir: Path, log: Callable[[str], None] = print) -> ChaosResult:
    """One chaos run in ``workdir`` (logs and data stay there); see the module docstring."""
    from streams.broker import LocalBroker, ensure_jars, free_ports
    from streams.settings import Settings
    from streams.topics import ensure_worker_topics

    rng = random.Random(cfg.seed)
    result = ChaosResult(config=cfg, workdir=str(workdir))
    workdir.mkdir(parents=True, exist_ok=True)
    ensure_jars()
    # `worker --worker-id X --data-dir NEW` fails with FileNotFoundError today (issue
    # #15, "also seen"): create the data dir so the run measures the faults, not that.
    (workdir / "worker-data").mkdir(exist_ok=True)
    kafka_port, controller_port, *web_ports = free_ports(2 + cfg.workers + cfg.joins)
    broker = LocalBroker(
        workdir / "broker", port=kafka_port, controller_port=controller_port, heap="768m"
    )
    t_begin = time.monotonic()
    broker.start()
    settings = Settings(bootstrap=broker.bootstrap, prefix=PREFIX, events_partitions=cfg.partitions)
    ensure_worker_topics(settings)
    log(f"chaos: broker at {broker.bootstrap}, workdir {workdir}")

    routers = [
        Proc(
            "router" if cfg.routers == 1 else f"router-{n}",
            [
                *router_command(broker.bootstrap, cfg.guarantee, cfg.partitions),
                *(
                    ["--shard", f"{n - 1}/{cfg.routers}"]
                    if cfg.static_shards
                    else ["--transactional-id", f"{PREFIX}.router.{n}"]
                    if cfg.routers > 1
                    else []
                ),
                *cfg.router_args,
            ],
            workdir / ("router.log" if cfg.routers == 1 else f"router-{n}.log"),
        )
        for n in range(1, cfg.routers + 1)
    ]
    workers = [
        _worker_proc(
            broker.bootstrap,
            cfg,
            workdir,
            "worker" if cfg.workers == 1 else f"worker-{n}",
            f"chaos-w{n}",
            web_ports[n - 1],
        )
        for n in range(1, cfg.workers + 1)
    ]
    procs: dict[str, Proc] = {**{r.name: r for r in routers}, **{w.name: w for w in workers}}
    joined: list[Proc] = []  # extra workers of the scale-out faults (their logs)
    # per worker process lifetime: the last /stats "duplicates" seen
    dup_seen: dict[int, int] = {}

    def stats_of(proc: Proc) -> dict[str, Any] | None:
        if proc.web_port is None or not proc.alive():
            return None
        status, body = _http_json(f"http://127.0.0.1:{proc.web_port}/stats", timeout=2.0)
        if status == 200 and isinstance(body, dict) and proc.popen is not None:
            dup_seen[proc.popen.pid] = int(body.get("duplicates", 0))
            return body
        return None

    def sample_stats() -> dict[str, Any] | None:
        """Every running worker's /stats; "applied" summed (None: none answered)."""
        bodies = [b for p in procs.values() if (b := stats_of(p)) is not None]
        if not bodies:
            return None
        return {"applied": sum(int(b.get("applied", 0)) for b in bodies)}

    killed_by_us: set[int] = set()

    def watchdog() -> None:
        for proc in list(procs.values()):
            if proc.popen is not None and proc.popen.poll() is not None:
                if proc.popen.pid in killed_by_us:
                    continue
                rc = proc.popen.returncode
                last = [ln for ln in proc.tail(40).splitlines() if ln.strip()][-1:] or ["?"]
                result.unexpected_exits.append(
                    f"{proc.name} exited rc={rc} at {time.monotonic() - t_begin:.0f}s: {last[0]}"
                )
                log(f"chaos: {proc.name} exited on its own (rc={rc}); restarting it")
                time.sleep(3.0)  # a crash loop (poison pill) must not eat the CPU
                proc.start()

    # routing watch: a router that lives but routes nothing for this long while the
    # load runs is asked where it waits (SIGUSR1 + py-spy into its log), once per
    # process; the figures report the gap (routing_never_stalled judges it)
    quiet = {"broker": False, "faults_from": float("inf")}
    diagnosed: set[int] = set()

    def watch_routing() -> None:
        if quiet["broker"] or load.stopping.is_set():
            return
        for router in routers:
            if not router.alive():
                continue
            assert router.popen is not None
            since = max(monitor.last_arrival, router.started_at, quiet["faults_from"])
            if time.monotonic() - since > ROUTING_STALL_S and router.popen.pid not in diagnosed:
                diagnosed.add(router.popen.pid)
                log(f"chaos: no routed event for {ROUTING_STALL_S:.0f}s: diagnosing {router.name}")
                router.diagnose()

    def pause(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            watchdog()
            watch_routing()
            sample_stats()
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))

    def worker_recovery(proc: Proc, since: float) -> float | None:
        """Seconds from ``since`` until ``proc`` applied an event (None: not within
        the recovery timeout)."""
        deadline = since + cfg.recovery_timeout_s
        while time.monotonic() < deadline:
            body = stats_of(proc)
            if body is not None and int(body.get("applied", 0)) > 0:
                return time.monotonic() - since
            watchdog()
            watch_routing()
            sample_stats()
            time.sleep(0.2)
        return None

    def join_and_leave(i: int, n: int, at: float) -> None:
        """Scale-out fault ``n``: an extra worker joins, applies, and leaves."""
        extra = _worker_proc(
            broker.bootstrap,
            cfg,
            workdir,
            f"join-{n}",
            f"chaos-x{n}",
            web_ports[cfg.workers + n - 1],
        )
        joined.append(extra)
        procs[extra.name] = extra
        extra.start()
        rec = worker_recovery(extra, extra.started_at)
        if rec is None:
            extra.diagnose()
        how = "sigterm" if n % 2 else "sigkill"
        result.kills.append(KillRecord(i, "join", round(at, 1), rec, f"{extra.name}+{how}"))
        log(f"chaos: fault {i + 1} {extra.name} joined at {at:.0f}s, applying after {rec}")
        pause(rng.uniform(*cfg.gap_s))
        del procs[extra.name]
        if extra.popen is not None:
            killed_by_us.add(extra.popen.pid)
        if how == "sigterm":
            extra.stop()
        else:
            extra.kill()
        log(f"chaos: {extra.name} left ({how})")

    monitor = ArrivalMonitor(broker.bootstrap, settings.events_topic, cfg.partitions)
    load = Load(settings, cfg, random.Random(rng.getrandbits(64)))
    items = generate(rng.getrandbits(63), cfg.malformed, slots=cfg.sessions, exclude=cfg.exclude)
    result.malformed_by_class = dict(Counter(i.kind for i in items))
    abuse = sorted({i.session for i in items if i.session is not None})
    injector = Injector(broker.bootstrap, settings, items, load)
    try:
        for router in routers:
            router.start()
        for w in workers:
            w.start()
        load.publisher.ensure_session_topics(abuse)
        for sid in abuse:
            load.publisher.announce(sid, settings.session_topic(sid), {"agent_id": None})
        monitor.start()
        load.start()
        # spread the inputs over roughly the fault phase (a guess; leftovers go at the end)
        mean_gap = sum(cfg.gap_s) / 2
        injector.duration_s = max(10.0, (cfg.kills + 2 * cfg.joins) * (mean_gap + 8.0))
        injector.start()
        t0 = time.monotonic()
        first = [worker_recovery(w, t0) for w in workers]
        log(f"chaos: workers applying events after {first}s; faults begin")
        plan = _fault_plan(cfg, rng)
        t_faults = quiet["faults_from"] = time.monotonic()
        broker_at = len(plan) // 2 if cfg.broker_restart else -1
        joins = worker_kills = 0
        for i, target in enumerate(plan):
            pause(rng.uniform(*cfg.gap_s))
            if i == broker_at:
                quiet["broker"] = True
                _restart_broker(broker, cfg, rng, result, monitor, sample_stats, log, pause)
                quiet["broker"] = False
            at = time.monotonic() - t_begin
            if target == "join":
                joins += 1
                join_and_leave(i, joins, at)
                continue
            if target == "router":
                proc = routers[0] if len(routers) == 1 else rng.choice(routers)
            else:
                proc = workers[0] if len(workers) == 1 else rng.choice(workers)
            wiped = target == "worker" and cfg.wipe_every > 0 and worker_kills % cfg.wipe_every == 0
            worker_kills += target == "worker"
            if proc.popen is not None:
                killed_by_us.add(proc.popen.pid)
            proc.kill()
            if wiped and proc.data_dir is not None:
                shutil.rmtree(proc.data_dir, ignore_errors=True)
            pause(rng.uniform(0.0, 1.0))
            proc.start()
            since = proc.started_at
            if target == "router":
                rec = monitor.first_after(since, cfg.recovery_timeout_s)
                if rec is None:
                    result.notes.append(f"router kill #{i + 1}: {monitor.describe()}")
            else:
                rec = worker_recovery(proc, since)
                if rec is None:
                    proc.diagnose()  # (where the restarted worker waits, into its log)
            name = proc.name + ("+wiped" if wiped else "")
            result.kills.append(KillRecord(i, target, round(at, 1), rec, name))
            log(f"chaos: fault {i + 1}/{len(plan)} kill {name} at {at:.0f}s, recovery {rec}")
        load.stopping.set()
        while not (load.done.is_set() and injector.done.is_set()):
            pause(0.5)
        result.longest_routing_gap = _longest_gap(
            monitor.arrived_at, t_faults, time.monotonic(), result, cfg, t_begin
        )
        result.monitor_replaced = [
            f"run second {at - t_begin:.0f}: {what}" for at, what in monitor.replaced
        ]
        log("chaos: load and inputs done; draining")
        ports = [w.web_port for w in workers if w.web_port is not None]
        _drain(cfg, load, items, ports, pause)
        result.duration_s = round(time.monotonic() - t_begin, 1)
        _collect(result, cfg, settings, load, injector, items, ports, procs, broker, log)
    finally:
        load.stopping.set()
        monitor.stop_event.set()
        for proc in procs.values():
            proc.stop()
        result.logs = {
            name: (f"{w}\n---- last lines ----\n" if (w := proc.warnings()) else "") + proc.tail(30)
            for name, proc in {**procs, **{p.name: p for p in joined}}.items()
        }
        broker.stop()
        monitor.join(10)
    return result


def _longest_gap(
    arrived_at: list[float],
    start: float,
    end: float,
    result: ChaosResult,
    cfg: ChaosConfig,
    t_begin: float,
) -> tuple[float, float] | None:
    """The longest stretch of ``[start, end]`` (the load under faults) in which no
    routed event arrived, leaving out any stretch that overlaps the broker outage
    until the router routed again after it: (seconds, run second it began)."""
    times = [start, *sorted(t for t in arrived_at if start < t < end), end]
    excluded = None
    if result.broker_window is not None:
        down, up = result.broker_window
        back = result.router_recovery_after_broker_s
        excluded = (down, up + (cfg.broker_recovery_timeout_s if back is None else back))
    best: tuple[float, float] | None = None
    for a, b in itertools.pairwise(times):
        if excluded is not None and a < excluded[1] and b > excluded[0]:
            continue
        if best is None or b - a > best[0]:
            best = (round(b - a, 1), round(a - t_begin, 1))
    return best


def _restart_broker(
    broker: Any,
    cfg: ChaosConfig,
    rng: random.Random,
    result: ChaosResult,
    monitor: ArrivalMonitor,
    sample_stats: Callable[[], dict[str, Any] | None],
    log: Callable[[str], None],
    pause: Callable[[float], None],
) -> None:
    down = rng.uniform(*cfg.broker_down_s)
    log(f"chaos: stopping the broker for {down:.1f}s")
    t_stop = time.monotonic()
    broker.stop()
    result.broker_stop_s = round(time.monotonic() - t_stop, 1)
    pause(max(0.0, down - (time.monotonic() - t_stop)))
    # the workers' count with the broker down, just before it starts: what they apply
    # from here on came after the restart (a count taken before the stop let events
    # applied during the stop pass for a recovery at 0.0 s)
    before = sample_stats() or {}
    t_start = time.monotonic()
    broker.start()
    up = time.monotonic()
    result.broker_window = (t_stop, up)
    result.broker_start_s = round(up - t_start, 1)
    result.broker_down_s = round(up - t_stop, 1)
    baseline = int(before.get("applied", 0))
    deadline = up + cfg.broker_recovery_timeout_s
    body = None
    # Both probes in one loop: until 2026-12-08 the router's wait took the whole
    # timeout when its monitor saw nothing, and the workers' probe then had none left
    # (CI at 2d82bce: "worker after the broker restart" not seen while they applied).
    while time.monotonic() < deadline and (
        result.router_recovery_after_broker_s is None
        or result.worker_recovery_after_broker_s is None
    ):
        if result.router_recovery_after_broker_s is None:
            seen = monitor.first_arrival_after(up)
            result.router_recovery_after_broker_s = None if seen is None else round(seen, 2)
        if result.worker_recovery_after_broker_s is None:
            body = sample_stats()
            if body is not None and int(body.get("applied", 0)) > baseline:
                result.worker_recovery_after_broker_s = round(time.monotonic() - up, 2)
        pause(0.2)
    if result.router_recovery_after_broker_s is None:
        result.notes.append(f"after the broker restart: {monitor.describe()}")
    if result.worker_recovery_after_broker_s is None:
        result.notes.append(
            f"after the broker restart: the workers' applied events summed {baseline} with "
            f"the broker down, {body.get('applied') if body else 'no answer'} at the deadline"
        )
    log(
        f"chaos: broker back after {result.broker_down_s}s down (stop "
        f"{result.broker_stop_s}s, start {result.broker_start_s}s); router recovery "
        f"{result.router_recovery_after_broker_s}, worker {result.worker_recovery_after_broker_s}"
    )


def _state(web_ports: list[int], sid: str) -> dict[str, Any] | None:
    """``sid``'s counters, from the first worker that answers 200 (each routes the
    request to the partition's owner)."""
    for port in web_ports:
        status, body = _http_json(f"http://127.0.0.1:{port}/sessions/{sid}/state")
        if status == 200 and isinstance(body, dict):
            state = body.get("state")
            return state if isinstance(state, dict) else None
    return None


def _expected(load: Load, items: list[ChaosInput]) -> dict[str, tuple[int, int]]:
    with load.lock:
        out = {sid: (len(seqs), max(seqs, default=-1)) for sid, seqs in load.published.items()}
    out.update(expected_abuse_state(items))
    return out


def _drain(
    cfg: ChaosConfig,
    load: Load,
    items: list[ChaosInput],
    web_ports: list[int],
    pause: Callable[[float], None],
) -> None:
    """Wait until every session's state is as expected, or nothing changed for 20 s,
    or ``drain_timeout_s``."""
    expected = _expected(load, items)
    deadline = time.monotonic() + cfg.drain_timeout_s
    last_view: dict[str, tuple[int, int]] = {}
    last_change = time.monotonic()
    while time.monotonic() < deadline:
        view: dict[str, tuple[int, int]] = {}
        for sid in expected:
            st = _state(web_ports, sid)
            if st is not None:
                view[sid] = (int(st.get("events", 0)), int(st.get("last_seq", -1)))
        if all(view.get(s) == e for s, e in expected.items()):
            return
        if view != last_view:
            last_view, last_change = view, time.monotonic()
        elif time.monotonic() - last_change > 20:
            return
        pause(1.0)


def _wait_flushed(web_ports: list[int], timeout_s: float) -> float | None:
    """Seconds until every worker's ``/stats`` says no changed session waits for its
    flush, plus two commits for the last flush's writes (None: not within
    ``timeout_s``; compare-live then reports what the changelogs still lack)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        waiting = []
        for port in web_ports:
            status, body = _http_json(f"http://127.0.0.1:{port}/stats")
            ok = status == 200 and isinstance(body, dict)
            waiting.append(body.get("engines_waiting") if ok else None)
        if all(w == 0 for w in waiting):
            time.sleep(2.0)
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return None


def _collect(
    result: ChaosResult,
    cfg: ChaosConfig,
    settings: Any,
    load: Load,
    injector: Injector,
    items: list[ChaosInput],
    web_ports: list[int],
    procs: dict[str, Proc],
    broker: Any,
    log: Callable[[str], None],
) -> None:
    from streams.router.validate import (
        DLQ_REASON,
        DLQ_SOURCE_OFFSET,
        DLQ_SOURCE_PARTITION,
        DLQ_SOURCE_TOPIC,
    )

    result.publish_failures = load.errors + injector.errors
    with load.lock:
        published = {sid: list(seqs) for sid, seqs in load.published.items()}
    result.sessions = len(published)
    result.valid_published = sum(len(s) for s in published.values())

    # -- state: lost events, regressed sessions --------------------------------
    for sid, seqs in sorted(published.items()):
        st = _state(web_ports, sid)
        if st is None:
            result.sessions_unreadable.append(sid)
            result.events_lost += len(seqs)
            result.sessions_regressed.append(sid)
            continue
        events, last = int(st.get("events", 0)), int(st.get("last_seq", -1))
        result.seq_gaps += int(st.get("seq_gaps", 0))
        result.events_lost += max(0, len(seqs) - events)
        if events < len(seqs) or last < max(seqs):
            result.sessions_regressed.append(f"{sid} ({events}/{len(seqs)}, last_seq {last})")
    for sid, (events, last) in sorted(expected_abuse_state(items).items()):
        st = _state(web_ports, sid)
        got = None if st is None else (int(st.get("events", 0)), int(st.get("last_seq", -1)))
        if got != (events, last):
            result.abuse_sessions_wrong.append(f"{sid}: expected {(events, last)}, got {got}")

    # -- redeliveries the worker reported --------------------------------------
    for port in web_ports:
        status, body = _http_json(f"http://127.0.0.1:{port}/stats")
        if status == 200 and isinstance(body, dict):
            result.redeliveries_ignored += int(body.get("duplicates", 0))

    # -- outputs: repeats a consumer can / cannot tell apart --------------------
    _outputs(result, settings)

    # -- DLQ ------------------------------------------------------------------
    dlq_items = {i.index: i for i in items if i.expect == "dlq"}
    by_source = {where: idx for idx, where in injector.landed.items() if idx in dlq_items}
    result.malformed_produced = injector.produced
    result.dlq_expected = sum(1 for idx in dlq_items if idx in injector.landed)
    seen: Counter[int] = Counter()
    # a repeat of a dead letter (the worker is at-least-once: a SIGKILL before its
    # offset commit writes it again) is told apart by its dlq.source.*; it is
    # allowed when identical (value, reason, class), like an output repeat
    contents: dict[int, set[tuple[bytes, bytes, bytes]]] = {}
    described: dict[int, list[str]] = {}
    with_reason: set[int] = set()
    for m in _read_topic(settings.bootstrap, settings.dlq_topic):
        headers = {k: (v or b"") for k, v in (m.headers() or [])}
        try:
            source = (
                headers[DLQ_SOURCE_TOPIC].decode(),
                int(headers[DLQ_SOURCE_PARTITION]),
                int(headers[DLQ_SOURCE_OFFSET]),
            )
        except (KeyError, ValueError):
            source = None
        idx = by_source.get(source) if source is not None else None
        if idx is None and m.value() is not None:
            idx = injector.digests.get(hashlib.sha1(m.value()).hexdigest())
        if idx is None:
            result.dlq_other_records += 1
            continue
        seen[idx] += 1
        content = (
            m.value() or b"",
            headers.get(DLQ_REASON, b""),
            headers.get("dlq.error_class", b""),
        )
        if content not in contents.setdefault(idx, set()):
            contents[idx].add(content)
            described.setdefault(idx, []).append(
                f"source={source} at {m.topic()}[{m.partition()}]@{m.offset()} "
                f"class={content[2].decode(errors='replace')!r} "
                f"reason={content[1].decode(errors='replace')[:160]!r} "
                f"value sha1={hashlib.sha1(content[0]).hexdigest()[:12]}"
            )
        if headers.get(DLQ_REASON, b"").strip():
            with_reason.add(idx)
    result.dlq_duplicates = sum(c - 1 for c in seen.values() if c > 1)
    result.dlq_conflicting_duplicates = sum(1 for c in contents.values() if len(c) > 1)
    for idx in sorted(i for i, c in contents.items() if len(c) > 1)[:3]:
        result.dlq_conflict_examples.append(
            f"input #{idx} ({dlq_items[idx].kind}): " + " | ".join(described[idx])
        )
    result.dlq_matched_with_reason = len(with_reason)
    result.dlq_matched_without_reason = len(set(seen) - with_reason)
    missing: Counter[str] = Counter()
    for idx, item in dlq_items.items():
        if idx not in with_reason:
            missing[item.kind] += 1
    result.dlq_missing_by_class = dict(missing)

    # -- processes --------------------------------------------------------------
    result.processes_up_at_end = {name: proc.alive() for name, proc in procs.items()}
    result.processes_up_at_end["broker"] = broker.status().running

    # -- replay --compare-live --------------------------------------------------
    # The changelogs lag the worker's memory by up to about twice
    # --engine-flush-interval (docs/guarantees.md "Sessions wait for their flush"):
    # compare once no changed session waits any more, as a user would.
    waited = _wait_flushed(web_ports, cfg.flush_wait_s)
    log(f"chaos: workers' waiting sessions flushed after {waited}s")
    cmd = [
        sys.executable,
        "-m",
        "streams",
        "replay",
        "--sessions",
        "*",
        "--compare-live",
        "--bootstrap",
        settings.bootstrap,
        "--prefix",
        settings.prefix,
        "--timeout",
        "30",
    ]
    log("chaos: running " + " ".join(cmd[2:]))
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=cfg.compare_live_timeout_s,
            check=False,
        )
        result.compare_live_rc = proc.returncode
        result.compare_live_output = (proc.stdout + proc.stderr).strip()
    except subprocess.TimeoutExpired as exc:
        result.compare_live_output = f"timed out after {exc.timeout}s"


def _outputs(result: ChaosResult, settings: Any) -> None:
    """Repeated outputs: same (session, seq, kind, trigger/type, call_index) twice.

    Identical content: an allowed repeat (docs/guarantees.md, at-least-once outputs).
    Differing content under the same identity: a duplicate a consumer cannot tell
    from a real second record.  Timer assessments depend on wall time: skipped.
    """
    from streams.serde import AssessmentSerde, PatternSerde

    groups: defaultdict[tuple[Any, ...], list[bytes]] = defaultdict(list)
    for topic, serde, kind in (
        (settings.patterns_topic, PatternSerde(), "pattern"),
        (f"{settings.prefix}.assessment-history", AssessmentSerde(), "assessment"),
    ):
        for m in _read_topic(settings.bootstrap, topic, committed=False):
            try:
                rec = serde.decode(m.value())
            except Exception:
                groups[(kind, "undecodable", m.partition(), m.offset())].append(b"")
                continue
            if kind == "assessment":
                if rec.trigger == "timer":
                    continue
                ident = (kind, rec.session_id, rec.seq, rec.trigger, rec.call_index)
            else:
                ident = (kind, rec.session_id, rec.seq, rec.pattern_type, rec.call_index)
            groups[ident].append(bytes(m.value()))
    for values in groups.values():
        if len(values) > 1:
            if len(set(values)) == 1:
                result.output_identical_repeats += len(values) - 1
            else:
                result.output_conflicting_duplicates += len(values) - 1


# --------------------------------------------------------------------------
# figures


def _secs(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f}s"


def format_figures(r: ChaosResult) -> str:
    """The figures table (plain text, one figure a line)."""
    cfg = r.config
    recs = [k.recovery_s for k in r.kills]
    got = sorted(x for x in recs if x is not None)

    def rec_line(target: str) -> str:
        xs = sorted(k.recovery_s for k in r.kills if k.target == target and k.recovery_s)
        none = sum(1 for k in r.kills if k.target == target and k.recovery_s is None)
        if not xs:
            return f"n/a ({none} never recovered within {cfg.recovery_timeout_s:.0f}s)"
        return f"median {xs[len(xs) // 2]:.1f}s, max {xs[-1]:.1f}s over {len(xs)} kills" + (
            f", {none} not within {cfg.recovery_timeout_s:.0f}s" if none else ""
        )

    kills_by = Counter(k.target for k in r.kills)
    lines = [
        f"chaos run: seed {cfg.seed}, {cfg.kills} kills, {cfg.sessions} concurrent sessions x "
        f"{cfg.events_per_session} events, {cfg.rate:.0f} events/s, {cfg.malformed} malformed "
        f"inputs, --max-sessions-in-memory {cfg.max_sessions_in_memory}, "
        f"broker restart {'yes' if cfg.broker_restart else 'no'}, router {cfg.guarantee}"
        + (f", {cfg.routers} routers" if cfg.routers != 1 else "")
        + (" as static shards" if cfg.static_shards else "")
        + f", {cfg.workers} worker{'s' if cfg.workers != 1 else ''}"
        + (f", {cfg.joins} joins" if cfg.joins else "")
        + (f", worker kills 1, {1 + cfg.wipe_every}, ... restarted wiped" if cfg.wipe_every else "")
        + f"; took {r.duration_s:.0f}s",
        "",
        f"{'valid events published':<44} {r.valid_published} in {r.sessions} sessions",
        f"{'publish/inject errors':<44} {len(r.publish_failures)}",
        f"{'valid events lost':<44} {r.events_lost}",
        f"{'sessions with regressed/short state':<44} {len(r.sessions_regressed)}",
        f"{'sessions whose state could not be read':<44} {len(r.sessions_unreadable)}",
        f"{'seq gaps recorded by the worker':<44} {r.seq_gaps}",
        f"{'events applied twice':<44} 0 possible (per-seq counters); "
        f"{r.redeliveries_ignored} redeliveries ignored (last workers' /stats)",
        f"{'outputs repeated, identical (allowed)':<44} {r.output_identical_repeats}",
        f"{'outputs repeated, content differs':<44} {r.output_conflicting_duplicates}",
        f"{'SIGKILLs':<44} {kills_by['router'] + kills_by['worker']} (router "
        f"{kills_by['router']}, worker {kills_by['worker']}"
        + (
            f", of which {sum(1 for k in r.kills if k.proc.endswith('+wiped'))} wiped"
            if cfg.wipe_every
            else ""
        )
        + ")",
        f"{'router recovery after SIGKILL':<44} {rec_line('router')}",
        f"{'worker recovery after SIGKILL':<44} {rec_line('worker')}",
        *([f"{'scale-out joins, applying after':<44} {rec_line('join')}"] if cfg.joins else []),
        f"{'recovery, all kills':<44} "
        + (f"max {got[-1]:.1f}s" if got else "n/a")
        + f", {sum(1 for x in recs if x is None)} not recovered",
        f"{'broker down / router, worker recovery':<44} {r.broker_down_s}s "
        f"(stop {r.broker_stop_s}s, start {r.broker_start_s}s) / "
        f"{_secs(r.router_recovery_after_broker_s)}, {_secs(r.worker_recovery_after_broker_s)}",
        f"{'longest routing gap (broker outage aside)':<44} "
        + (
            f"{r.longest_routing_gap[0]:.1f}s from run second {r.longest_routing_gap[1]:.0f}"
            if r.longest_routing_gap
            else "n/a"
        ),
        f"{'unexpected process exits':<44} {len(r.unexpected_exits)}",
        f"{'processes up at the end':<44} "
        + ", ".join(f"{k} {'up' if v else 'DOWN'}" for k, v in r.processes_up_at_end.items()),
        f"{'malformed/abusive inputs produced':<44} {r.malformed_produced} of {cfg.malformed}",
        f"{'  of which must be dead-lettered':<44} {r.dlq_expected}",
        f"{'  in the DLQ with a dlq.reason':<44} {r.dlq_matched_with_reason} "
        f"({100 * r.dlq_share:.1f}%)",
        f"{'  missing from the DLQ, by class':<44} {r.dlq_missing_by_class or 'none'}",
        f"{'  DLQ repeats identical / differing / other':<44} "
        f"{r.dlq_duplicates - r.dlq_conflicting_duplicates} / {r.dlq_conflicting_duplicates}"
        f" / {r.dlq_other_records}",
        f"{'abuse sessions (ooo seq, clock skew) wrong':<44} {len(r.abuse_sessions_wrong)}",
        f"{'replay --compare-live':<44} {r.compare_live_verdict}",
    ]
    if r.kills:
        lines.append("")
        lines.append(
            "kills: "
            + "; ".join(
                f"#{k.index + 1} {k.proc or k.target} @{k.at_s:.0f}s -> "
                + (f"{k.recovery_s:.1f}s" if k.recovery_s is not None else "none")
                for k in r.kills
            )
        )
    for title, rows in (
        ("recoveries not seen", r.notes),
        ("arrival monitor replaced its stuck consumer", r.monitor_replaced),
        ("unexpected exits", r.unexpected_exits),
        ("regressed sessions", r.sessions_regressed),
        ("abuse sessions wrong", r.abuse_sessions_wrong),
        ("publish/inject errors", r.publish_failures),
    ):
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines.extend(f"  {row}" for row in rows[:12])
            if len(rows) > 12:
                lines.append(f"  ... {len(rows) - 12} more")
    lines.append("")
    lines.append("replay --compare-live output (verbatim, last 25 lines):")
    lines.extend("  " + ln for ln in (r.compare_live_output or "(none)").splitlines()[-25:])
    return "\n".join(lines)


def failure_report(r: ChaosResult) -> str:
    """The figures, then each process's last warnings and lines, and where the full
    logs are: what a failed outcome's message carries."""
    parts = [format_figures(r), "", f"logs and data: {r.workdir}"]
    for name, text in r.logs.items():
        parts += ["", f"---- {name} ----", text]
    return "\n".join(parts)


def run_and_record(cfg: ChaosConfig, workdir: Path) -> ChaosResult:
    """A run for the pytest modules: its log lines and figures printed (``-s``), the
    figures also written to ``chaos-figures.txt`` in ``workdir``."""
    result = run_chaos(cfg, workdir, log=lambda s: print(s, flush=True))
    figures = format_figures(result)
    (workdir / "chaos-figures.txt").write_text(figures + "\n")
    print("\n" + figures)
    return result


def compare_live_differences(output: str) -> int | None:
    """The difference count ``--compare-live`` printed, if a line states one (defensive:
    the format is being extended; None when no such number is found)."""
    m = re.search(r"(\d+)\s+(?:real\s+)?difference", output)
    return int(m.group(1)) if m else None


__all__ = [
    "DLQ_CLASSES",
    "ChaosConfig",
    "ChaosResult",
    "KillRecord",
    "compare_live_differences",
    "failure_report",
    "format_figures",
    "run_and_record",
    "run_chaos",
]
