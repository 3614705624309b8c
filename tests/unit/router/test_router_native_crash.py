"""A native abort inside librdkafka must not kill the router silently.

Seen after a broker restart (at-least-once, bench_router_restarts.py): the router
died of ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'
failed`` and its log said nothing about what it was doing.  ``trajectory router``
enables :mod:`faulthandler`, so a fatal signal prints every Python thread's stack.
No broker is needed: the router keeps retrying an unreachable one, and the test
sends the process SIGABRT (what a failed C assertion raises).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_native_abort_prints_every_thread_stack() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONFAULTHANDLER", None)  # the router must enable it itself
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "router", "--bootstrap", "127.0.0.1:1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    first = b""
    try:
        # Wait until it is in its broker calls: librdkafka's first complaint about the
        # unreachable broker comes after faulthandler is enabled and the clients are
        # made.  (A fixed 3 s sleep signalled a router still importing on a loaded
        # machine, before faulthandler was on: stderr stayed empty.)
        assert proc.stderr is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            deadline = time.monotonic() + 120
            while b"rdkafka" not in first:
                assert time.monotonic() < deadline, f"no librdkafka line in 120 s: {first!r}"
                assert proc.poll() is None, f"the router exited before the signal: {first!r}"
                if sel.select(timeout=1.0):
                    first += proc.stderr.readline()
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = (first + err).decode(errors="replace")
    assert proc.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in text, text[-2000:]
    assert "streams/router/router.py" in text or "streams/commands/router.py" in text, text[-2000:]
