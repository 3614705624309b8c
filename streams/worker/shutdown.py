"""A bounded stop for the worker: a watchdog armed when the worker starts stopping.

Why: under CPU load (load average 10-20 on 2 cores) a worker was seen not to exit
within 60 s of SIGTERM (then SIGKILLed by the caller with nothing in its log to say
where it hung; docs/faust-notes.md "Shutdown").  Faust/mode's stop has unbounded
waits (``Fetcher.on_stop`` loops on a drainer ignoring cancel, ``Service.stop``
gathers its futures without a timeout, ``WorkerThread.stop`` blocks the event loop
on ``threading.Event.wait()``, interpreter exit joins the non-daemon consumer
thread, a consumer rebalance callback has no timeout), so one stuck step holds the
process forever.

What: :class:`ShutdownWatchdog` runs in a daemon *thread* (it must work while the
event loop is blocked).  When the stop budget passes it logs CRITICAL, dumps the
stack of every thread and every asyncio task of the worker's loop to stderr, and
ends the process with :data:`STOP_TIMEOUT_EXIT_CODE`.

Invariant (never lose state): ending the process there is exactly a crash at that
point, which docs/guarantees.md "Crash analysis" shows is safe at any point: offsets
are committed only after the state flush and the producer flush, so events after
the last commit are re-applied on restart (duplicates ignored by seq), and the
changelog never runs ahead of the outputs.  The non-zero exit code says the stop was
not clean.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

import faust

from streams.errors import EXIT_STOP_TIMEOUT, ConfigError

log = logging.getLogger(__name__)

#: Default budget from the start of a stop to the end of the process.
DEFAULT_STOP_TIMEOUT_S = 30.0
#: Exit code of a stop that exceeded its budget: the router's for the same case.
STOP_TIMEOUT_EXIT_CODE = EXIT_STOP_TIMEOUT


def check_stop_timeout(seconds: float) -> float:
    """``--stop-timeout`` must be positive (0 would end every stop at once)."""
    if not seconds > 0:
        raise ConfigError("--stop-timeout", f"{seconds}: give the seconds a stop may take, e.g. 30")
    return seconds


class ShutdownWatchdog:
    """Ends the process if a stop takes longer than ``budget_s``.

    :meth:`arm` starts the countdown once (later calls keep the first deadline);
    :meth:`disarm` cancels it.  On expiry, :meth:`fire` writes the diagnostics and
    calls ``exit`` (``os._exit``: no interpreter shutdown, which may itself join a
    hung thread).
    """

    def __init__(
        self,
        budget_s: float = DEFAULT_STOP_TIMEOUT_S,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        stream: TextIO | None = None,
        exit: Callable[[int], Any] = os._exit,
    ) -> None:
        self.budget_s = check_stop_timeout(budget_s)
        self.loop = loop
        self.stream = stream
        self._exit = exit
        self._timer: threading.Timer | None = None
        self._reason = ""
        self._armed_at = 0.0
        self._lock = threading.Lock()
        #: set once :meth:`fire` has run (tests, and no second firing)
        self.fired = threading.Event()

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, reason: str) -> None:
        with self._lock:
            if self._timer is not None:
                return
            self._reason = reason
            self._armed_at = time.monotonic()
            timer = threading.Timer(self.budget_s, self.fire)
            timer.daemon = True  # never itself keeps the process alive
            timer.name = "stop-watchdog"
            self._timer = timer
            timer.start()
        log.info("stopping (%s): the stop may take up to %.0f s", reason, self.budget_s)

    def disarm(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def fire(self) -> None:
        """Log, dump every thread and asyncio task, then end the process."""
        if self.fired.is_set():
            return
        self.fired.set()
        out = self.stream if self.stream is not None else sys.stderr
        waited = time.monotonic() - self._armed_at
        msg = (
            f"the worker did not stop within {self.budget_s:.0f} s of {self._reason} "
            f"({waited:.1f} s); stacks follow; exiting with {STOP_TIMEOUT_EXIT_CODE} "
            "(like a crash: events after the last commit are re-applied on restart; "
            "raise --stop-timeout if stops are just slow)"
        )
        try:
            log.critical(msg)
            print(f"CRITICAL {msg}", file=out, flush=True)
            try:
                faulthandler.dump_traceback(file=out, all_threads=True)
            except (ValueError, OSError, AttributeError):  # e.g. no fileno (tests)
                print(_thread_stacks(), file=out)
            print(_task_stacks(self.loop), file=out, flush=True)
        finally:
            self._exit(STOP_TIMEOUT_EXIT_CODE)


def _thread_stacks() -> str:
    import traceback

    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"Thread {ident}:\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def _task_stacks(loop: asyncio.AbstractEventLoop | None) -> str:
    """The asyncio tasks of ``loop`` and where each waits (read from another thread:
    best effort, the set may change while it is read)."""
    if loop is None:
        return "asyncio tasks: no loop known"
    import io

    for _ in range(3):
        try:
            tasks = list(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed size during iteration
            continue
        buf = io.StringIO()
        print(f"asyncio tasks of the worker's loop: {len(tasks)}", file=buf)
        for task in tasks:
            try:
                task.print_stack(limit=12, file=buf)
            except Exception as exc:  # a diagnostic must not hide the exit
                print(f"{task!r}: stack unavailable: {exc!r}", file=buf)
        return buf.getvalue()
    return "asyncio tasks: unavailable (the loop kept changing them)"


class BoundedStopWorker(faust.Worker):
    """``faust.Worker`` whose stop is bounded by a :class:`ShutdownWatchdog`: armed on
    SIGTERM/SIGINT (mode's ``_schedule_shutdown``) and on any other stop (a crash, the
    app ending), i.e. in ``stop_and_shutdown``."""

    def __init__(self, *args: Any, stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S, **kw: Any):
        self.watchdog = ShutdownWatchdog(check_stop_timeout(stop_timeout_s))
        super().__init__(*args, **kw)

    def _schedule_shutdown(self, sig: signal.Signals) -> None:
        self.watchdog.loop = self.loop
        self.watchdog.arm(signal.Signals(sig).name)
        super()._schedule_shutdown(sig)

    def _on_sigusr1(self) -> None:
        """SIGUSR1: log the fetch state (streams/worker/stall.py) at WARNING, then
        mode's dump of every thread's stack and every asyncio task's."""
        report_of = getattr(getattr(self.app, "consumer", None), "fetch_report", None)
        if report_of is not None:
            try:
                report = report_of()
            except Exception as exc:  # a diagnostic must still reach the stacks
                log.warning("SIGUSR1: fetch state unavailable: %r", exc)
            else:
                text = report.describe() if report is not None else "no consumer yet"
                log.warning("SIGUSR1: the worker's fetch state: %s", text)
        super()._on_sigusr1()

    def stop_and_shutdown(self) -> None:
        self.watchdog.loop = self.loop
        self.watchdog.arm("the worker stopping")
        super().stop_and_shutdown()


__all__ = [
    "DEFAULT_STOP_TIMEOUT_S",
    "STOP_TIMEOUT_EXIT_CODE",
    "BoundedStopWorker",
    "ShutdownWatchdog",
    "check_stop_timeout",
]
