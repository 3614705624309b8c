"""Name a worker that has stopped handling events, with what it waits on.

Why: two fresh-clone CI runs (2026-12-03) ended with a restarted worker that
applied nothing more and logged nothing about it; its HTTP view still answered, so
from outside it looked healthy.  Faust has several waits that fail silently (a
recovery step that times out ends the recovery service with a ``log.dev`` line;
aiokafka retries an offset fetch forever at DEBUG), and a stalled partition
looks like an idle one unless lag is compared with progress.  A serious stream
processor names that state: Kafka Streams has a thread state and per-task lag,
Flink back-pressure and checkpoint-stall alerts.

What: :class:`StallWatch` is pure (no Faust, no Kafka).  The worker's consumer
reports, every few seconds, one :class:`PartitionFetch` per assigned
``<prefix>.events`` partition (:class:`FetchReport`); a partition is *held* when
something keeps it from being handled (records behind its high watermark, paused,
not in Faust's active set, no seek yet in this assignment, the flow stopped) and
*stalled* when it stays held with its progress (next offset to handle and fetch
position) unchanged for ``stall_s``.
The watch returns one WARNING text the first time a partition stalls (with the
whole report, so the line says what the worker waits on; partitions stalling at
the same look share one line) and one INFO text when it moves again; an idle
partition (nothing to fetch) is never stalled.

Invariant: a partition is reported at most once per stall episode; the episode
ends when its progress moves, its assignment changes (it leaves the report), or
it is no longer held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_STALL_S", "FetchReport", "PartitionFetch", "StallWatch"]

#: A partition held with no progress for this long is named at WARNING.
DEFAULT_STALL_S = 20.0


@dataclass(frozen=True)
class PartitionFetch:
    """The fetch state of one assigned events partition, as the worker sees it."""

    partition: int
    #: next offset the fetch loop will hand the handler (None: none since the seek)
    next_offset: int | None
    #: aiokafka's fetch position (None: none yet, e.g. a reset pending)
    position: int | None
    #: last fetched high watermark (None: nothing fetched yet)
    highwater: int | None
    #: in Faust's active set (Faust pauses every partition at an assignment)
    active: bool
    #: paused in aiokafka's subscription state
    paused: bool
    #: a seek of this assignment positioned it (the fetch loop's gate)
    seeked: bool
    #: seconds its batches have been held back for the assignment's first seek
    held_s: float | None = None

    @property
    def progress(self) -> tuple[int | None, int | None]:
        """What moves while the partition is handled: a stall is this unchanged."""
        return (self.next_offset, self.position)

    def reasons(self, flow_active: bool) -> list[str]:
        """What keeps this partition from being handled; empty when it is idle
        (fetched up to its high watermark, nothing in the way)."""
        out = []
        if self.highwater is not None and (self.position is None or self.position < self.highwater):
            if self.position is None:
                out.append(f"no fetch position, high watermark {self.highwater}")
            else:
                out.append(
                    f"{self.highwater - self.position} record(s) not fetched below its "
                    f"high watermark {self.highwater}"
                )
        if not flow_active:
            out.append("the flow is stopped")
        if not self.active:
            out.append("not in Faust's active partitions")
        if self.paused:
            out.append("paused in aiokafka")
        if not self.seeked:
            out.append("no seek of this assignment yet")
        return out

    def describe(self) -> str:
        held = f", held back {self.held_s:.0f} s" if self.held_s is not None else ""
        return (
            f"[{self.partition}] next {self.next_offset}, position {self.position}, "
            f"high watermark {self.highwater}, active {self.active}, paused "
            f"{self.paused}, seeked {self.seeked}{held}"
        )


@dataclass(frozen=True)
class FetchReport:
    """One look at the worker's fetching, taken by its consumer."""

    topic: str
    generation: int
    flow_active: bool
    rebalancing: bool
    seek_round: int
    commit_under_way: bool
    handler_locked: bool
    #: calls waiting for a worker of the consumer thread's method queue
    thread_calls: int | None
    partitions: Sequence[PartitionFetch]
    #: seconds the batch in the handler has taken so far (None: no batch in it)
    batch_s: float | None = None
    #: seconds the seek to the committed offsets under way has taken (None: none)
    seek_s: float | None = None

    def blockers(self) -> list[str]:
        """Worker-wide waits that keep every partition from being handled."""
        out = []
        if self.batch_s is not None:
            out.append(f"a batch has been in the handler for {self.batch_s:.0f} s")
        if self.seek_s is not None:
            out.append(f"a seek to the committed offsets has run for {self.seek_s:.0f} s")
        return out

    def describe(self) -> str:
        batch = f"{self.batch_s:.1f} s" if self.batch_s is not None else "none"
        seek = f"{self.seek_s:.1f} s" if self.seek_s is not None else "none"
        head = (
            f"consumer generation {self.generation}, flow active {self.flow_active}, "
            f"rebalancing {self.rebalancing}, seek round {self.seek_round}, seek under "
            f"way {seek}, batch in the handler {batch}, commit under way "
            f"{self.commit_under_way}, handler lock held {self.handler_locked}, "
            f"consumer-thread calls queued {self.thread_calls}"
        )
        parts = "; ".join(p.describe() for p in self.partitions) or "no events partition assigned"
        return f"{head}; {self.topic} {parts}"


class StallWatch:
    """Tells, from successive :class:`FetchReport` s, which partitions stalled.

    ``observe(now_s, report)`` returns the log lines to write, as
    ``(level, text)`` with level ``"warning"`` or ``"info"``.
    """

    def __init__(self, stall_s: float = DEFAULT_STALL_S) -> None:
        if not stall_s > 0:
            raise ValueError(f"stall_s must be positive, got {stall_s!r}")
        self.stall_s = stall_s
        #: partition -> (progress seen, since when held with it, reported)
        self._held: dict[int, tuple[tuple[int | None, int | None], float, bool]] = {}
        #: stall episodes reported so far (the /stats figure)
        self.stalls = 0

    def stalled(self) -> list[int]:
        """Partitions currently in a reported stall."""
        return sorted(p for p, (_, _, reported) in self._held.items() if reported)

    def observe(self, now_s: float, report: FetchReport) -> list[tuple[str, str]]:
        """The lines to log after this look: at most one WARNING (every partition
        that stalled at this look, in one line: a worker-wide wait stalls them all
        at once) and at most one INFO (every partition that moved again)."""
        stalled: list[tuple[PartitionFetch, list[str], float]] = []
        resumed: list[tuple[PartitionFetch, float]] = []
        seen = set()
        for part in report.partitions:
            seen.add(part.partition)
            reasons = part.reasons(report.flow_active) + report.blockers()
            prev = self._held.get(part.partition)
            if not reasons:
                if prev is not None and prev[2]:
                    resumed.append((part, now_s - prev[1]))
                self._held.pop(part.partition, None)
                continue
            if prev is None or prev[0] != part.progress:
                if prev is not None and prev[2]:
                    resumed.append((part, now_s - prev[1]))
                self._held[part.partition] = (part.progress, now_s, False)
                continue
            offset, since, reported = prev
            if not reported and now_s - since >= self.stall_s:
                self._held[part.partition] = (offset, since, True)
                self.stalls += 1
                stalled.append((part, reasons, now_s - since))
        for gone in set(self._held) - seen:
            del self._held[gone]
        out: list[tuple[str, str]] = []
        if stalled:
            out.append(("warning", self._stalled(report, stalled)))
        if resumed:
            out.append(("info", self._resumed(report, resumed)))
        return out

    @staticmethod
    def _stalled(
        report: FetchReport, stalled: Sequence[tuple[PartitionFetch, list[str], float]]
    ) -> str:
        numbers = ",".join(str(part.partition) for part, _, _ in stalled)
        held_s = max(s for _, _, s in stalled)
        if len(stalled) == 1:
            why = ", ".join(stalled[0][1])
        else:
            why = "; ".join(f"[{part.partition}] {', '.join(r)}" for part, r, _ in stalled)
        return (
            f"{report.topic}[{numbers}]: no event handled for {held_s:.0f} s: {why}.  "
            f"The worker's fetch state: {report.describe()}.  (Expected while a large "
            "table recovery runs; otherwise the worker is stuck: send it SIGUSR1 for "
            "the stacks of every thread and task, then restart it; nothing is lost, "
            "docs/guarantees.md)"
        )

    @staticmethod
    def _resumed(report: FetchReport, resumed: Sequence[tuple[PartitionFetch, float]]) -> str:
        numbers = ",".join(str(part.partition) for part, _ in resumed)
        after_s = max(s for _, s in resumed)
        offsets = ", ".join(str(part.next_offset) for part, _ in resumed)
        plural = "s" if len(resumed) > 1 else ""
        return (
            f"{report.topic}[{numbers}]: handling again after a stall of {after_s:.0f} s "
            f"(next offset{plural} {offsets})"
        )
