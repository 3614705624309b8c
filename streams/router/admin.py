"""The router's admin requests, made in a child process.

Why a child process: librdkafka (2.16, confluent-kafka 2.16) can abort or crash
the whole process in its admin client when a coordinator-bound admin request
(``describe_consumer_groups``, ``list_consumer_group_offsets``) cannot be sent
because the coordinator's connection just dropped: the error path frees the
request's ``eonce`` while the coordinator code still holds it, and the dummy
error response then touches freed memory (``rd_kafka_enq_once_del_source_return:
Assertion 'eonce->refcnt > 0' failed``, or SIGSEGV).  Upstream: librdkafka#4605,
#3663, fix proposed in librdkafka#5397 (open).  A broker restart is exactly when
that happens: in ``tests/bench/bench_router_restarts.py`` the router died this way
in 2 of 13 cycles.  No Python code can catch it, so the router makes no admin
request itself: :class:`AdminProcess` sends each one, as a JSON line, to
``python -m streams.router.admin`` (:func:`serve`), which makes it with its own
``AdminClient`` (:class:`AdminOps`).  A child that dies is logged with its
signal, counted (:attr:`AdminProcess.deaths`) and replaced at the next request;
the request it was answering counts as failed, which every caller already treats
as "decide nothing, ask again at the next check".

Invariants: a call never blocks longer than its ``timeout_s`` plus
:data:`REPLY_MARGIN_S`; an answer is only ever matched to the request it
answers (by id; late answers to given-up requests are dropped); secrets in the
client configuration reach the child on its stdin, never on its command line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

log = logging.getLogger(__name__)

#: How much longer than a request's own timeout the parent waits for its answer
#: (the child's spawn, JSON, the pipe).
REPLY_MARGIN_S = 1.5
#: A child that died is not replaced more often than this (a child that dies at
#: start, e.g. a broken installation, must not turn every check into a spawn).
RESPAWN_MIN_INTERVAL_S = 1.0

Key = tuple[str, int]


@dataclass(frozen=True)
class GroupMember:
    """A member of a consumer group and the topics assigned to it."""

    member_id: str
    instance_id: str | None
    topics: frozenset[str]


@dataclass(frozen=True)
class GroupView:
    """A consumer group as ``describe_consumer_groups`` reports it."""

    state: str
    members: tuple[GroupMember, ...]


@dataclass(frozen=True)
class OffsetsView:
    """End offsets (read_committed: the last stable offset) of the partitions that
    were answered in time without an error, and, when asked for, the group's
    committed offsets (None: not answered; a partition without a committed offset
    is absent or negative)."""

    ends: Mapping[Key, int]
    committed: Mapping[Key, int] | None


class RouterAdmin(Protocol):
    """The admin requests the router's periodic checks make.  Each returns a
    failure value (None, an empty view, False) instead of raising when the
    cluster does not answer in time: the checks then decide nothing."""

    def describe_group(self, group: str, timeout_s: float) -> GroupView | None: ...

    def offsets(
        self, keys: Sequence[Key], timeout_s: float, *, committed_of: str | None = None
    ) -> OffsetsView: ...

    def reaches_cluster(self, timeout_s: float) -> bool: ...

    def close(self) -> None: ...


# -- the child's side: the requests themselves ---------------------------------
class AdminOps:
    """The requests, made with a confluent-kafka ``AdminClient`` in this process.

    Run in the child (:func:`serve`); never in the router's own process (module
    docstring).  Answers are plain JSON values.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient(dict(config))

    def describe_group(self, group: str, timeout_s: float) -> dict[str, Any]:
        futures = self._admin.describe_consumer_groups([group], request_timeout=timeout_s)
        desc = futures[group].result(timeout=timeout_s + 1.0)
        members = []
        for member in desc.members or ():
            assignment = member.assignment
            tps = (assignment.topic_partitions if assignment is not None else None) or ()
            members.append(
                {
                    "member_id": member.member_id,
                    "instance_id": member.group_instance_id,
                    "topics": sorted({tp.topic for tp in tps}),
                }
            )
        return {"state": str(desc.state), "members": members}

    def offsets(
        self, keys: list[list[Any]], timeout_s: float, committed_of: str | None
    ) -> dict[str, Any]:
        """One ListOffsets request (and one OffsetFetch), waited for once for all
        partitions together; partitions not answered in time, or answered with an
        error, are left out."""
        from confluent_kafka import (
            ConsumerGroupTopicPartitions,
            IsolationLevel,
            TopicPartition,
        )
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        tps = [TopicPartition(t, p) for t, p in keys]
        group_future = None
        if committed_of is not None:
            group_future = self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(committed_of, tps)], request_timeout=timeout_s
            )[committed_of]
        futures = self._admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout_s,
        )
        waited = [*futures.values(), *([group_future] if group_future is not None else [])]
        concurrent.futures.wait(waited, timeout=timeout_s + 1.0)
        ends = []
        for tp, fut in futures.items():
            if not fut.done():
                continue
            try:
                ends.append([tp.topic, tp.partition, fut.result().offset])
            except Exception as exc:  # e.g. the topic was deleted: left out, logged
                log.debug("end offset of %s[%d]: %s", tp.topic, tp.partition, exc)
        committed = None
        if group_future is not None and group_future.done():
            try:
                listed = group_future.result().topic_partitions or []
                committed = [[tp.topic, tp.partition, tp.offset] for tp in listed]
            except Exception as exc:  # not answered: the caller decides nothing
                log.debug("committed offsets of %s: %s", committed_of, exc)
        return {"ends": ends, "committed": committed}

    def reaches_cluster(self, timeout_s: float) -> bool:
        self._admin.list_topics(timeout=timeout_s)
        return True


def serve(stdin: IO[str], stdout: IO[str]) -> None:
    """The child's loop: the first line is the client configuration, each next
    line a request ``{"id", "op", "args"}``; each answer is one line ``{"id",
    "ok", "result" | "error"}``.  Ends at end of input (the router closed the pipe
    or died)."""
    first = stdin.readline()
    if not first:
        return
    ops = AdminOps(json.loads(first))
    for line in stdin:
        request = json.loads(line)
        try:
            result = getattr(ops, request["op"])(**request["args"])
            answer = {"id": request["id"], "ok": True, "result": result}
        except Exception as exc:  # sent back: the router logs it and asks again later
            answer = {"id": request["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


# -- the router's side ----------------------------------------------------------
class AdminProcess:
    """:class:`RouterAdmin` through a child process (module docstring).

    Single-threaded: call from one thread.  The child is started at the first
    request, and again after it died; ``on_death`` (e.g. a metric) is called once
    per death.  ``command`` (tests) replaces the child's command line.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        on_death: Callable[[], None] | None = None,
        command: Sequence[str] | None = None,
    ):
        self._config = dict(config)
        self._on_death = on_death
        self._command = list(command or [sys.executable, "-m", "streams.router.admin"])
        self._proc: subprocess.Popen[str] | None = None
        self._next_id = 0
        self._buffer = b""
        self._spawned_at = -RESPAWN_MIN_INTERVAL_S
        #: children that died (each logged with its exit status)
        self.deaths = 0

    @property
    def pid(self) -> int | None:
        """The running child's pid (None before the first request or after a death);
        the benches add its CPU to the router's."""
        return None if self._proc is None else self._proc.pid

    # -- the requests
    def describe_group(self, group: str, timeout_s: float) -> GroupView | None:
        got = self._call("describe_group", {"group": group, "timeout_s": timeout_s}, timeout_s)
        if got is None:
            return None
        return GroupView(
            state=got["state"],
            members=tuple(
                GroupMember(m["member_id"], m["instance_id"], frozenset(m["topics"]))
                for m in got["members"]
            ),
        )

    def offsets(
        self, keys: Sequence[Key], timeout_s: float, *, committed_of: str | None = None
    ) -> OffsetsView:
        args = {
            "keys": [[t, p] for t, p in keys],
            "timeout_s": timeout_s,
            "committed_of": committed_of,
        }
        got = self._call("offsets", args, timeout_s)
        if got is None:
            return OffsetsView({}, None)
        committed = got["committed"]
        return OffsetsView(
            {(t, p): o for t, p, o in got["ends"]},
            None if committed is None else {(t, p): o for t, p, o in committed},
        )

    def reaches_cluster(self, timeout_s: float) -> bool:
        return self._call("reaches_cluster", {"timeout_s": timeout_s}, timeout_s) is True

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _end(proc)  # closing its input ends it

    # -- the pipe
    def _call(self, op: str, args: dict[str, Any], timeout_s: float) -> Any:
        """Send one request and wait for its answer; None when the child failed the
        request (logged), did not answer in time, or died (logged as a warning)."""
        proc = self._running()
        if proc is None:
            return None
        assert proc.stdin is not None
        self._next_id += 1
        request_id = self._next_id
        try:
            proc.stdin.write(json.dumps({"id": request_id, "op": op, "args": args}) + "\n")
            proc.stdin.flush()
        except OSError:  # BrokenPipeError: it died since the last request
            self._reap(proc)
            return None
        deadline = time.monotonic() + timeout_s + REPLY_MARGIN_S
        while True:
            line = self._read_line(proc, deadline)
            if line is None:
                log.debug("admin %s: no answer within %.1f s", op, timeout_s + REPLY_MARGIN_S)
                return None
            if not line:  # end of output: it died
                self._reap(proc)
                return None
            answer = json.loads(line)
            if answer["id"] != request_id:
                continue  # the late answer to a request given up earlier
            if not answer["ok"]:
                log.debug("admin %s failed: %s", op, answer["error"])
                return None
            return answer["result"]

    def _read_line(self, proc: subprocess.Popen[str], deadline: float) -> str | None:
        """The child's next output line; "" at end of output; None at the deadline."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def _running(self) -> subprocess.Popen[str] | None:
        if self._proc is not None:
            return self._proc
        now = time.monotonic()
        if now - self._spawned_at < RESPAWN_MIN_INTERVAL_S:
            return None
        self._spawned_at = now
        self._buffer = b""
        proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the child's own messages (e.g. librdkafka's abort) go to ours
            text=True,
        )
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(self._config) + "\n")
            proc.stdin.flush()
        except OSError:  # it died at start (logged with its status)
            self._reap(proc)
            return None
        self._proc = proc
        return proc

    def _reap(self, proc: subprocess.Popen[str]) -> None:
        """The child is gone: log how it ended; the next request starts a new one."""
        self._proc = None
        code = _end(proc)
        self.deaths += 1
        if self._on_death is not None:
            self._on_death()
        how = f"exit status {code}"
        if code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        log.warning(
            "the router's admin helper (pid %d) died (%s); its request counts as failed "
            "and a new helper starts at the next check.  A SIGABRT or SIGSEGV here is "
            "librdkafka's admin-client crash around broker outages (librdkafka#4605), "
            "which is why the router makes its admin requests in a child process",
            proc.pid,
            how,
        )


def _end(proc: subprocess.Popen[str]) -> int:
    """Close the child's pipes (its input first: a live child ends at end of input),
    wait for it (killed after 5 s), and return its exit status."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):  # (a broken pipe: nothing to flush)
                stream.close()
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # still running: end it
        proc.kill()
        return proc.wait()


if __name__ == "__main__":
    # Ctrl-C in the router's terminal reaches this process group too: the router
    # closes the pipe when it stops, and this loop then ends by itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=os.environ.get("TRAJECTORY_ADMIN_HELPER_LOG", "WARNING"),
        format="%(asctime)s admin-helper %(levelname)s %(message)s",
    )
    serve(sys.stdin, sys.stdout)
