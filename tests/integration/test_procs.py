"""The process harness itself (tests/integration/procs.py): no broker needed.

What must hold: a process started through procs and left running by a test is
stopped by the autouse teardown (``_reap_test_processes``), and named.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from procs import WorkerProc, _track, reap_processes


def test_reap_stops_what_a_test_left_running_and_names_it() -> None:
    done = _track(subprocess.Popen([sys.executable, "-c", "pass"]))
    done.wait(30)
    left = _track(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
    assert left.poll() is None
    named = reap_processes(timeout_s=10)
    assert left.poll() is not None  # stopped (SIGTERM) and waited for
    assert named == [f"pid {left.pid} (import time; time.sleep(120))"]  # not the finished one
    assert reap_processes() == []  # nothing is reaped twice


def test_every_integration_test_gets_the_reaping_teardown(request: pytest.FixtureRequest) -> None:
    assert "_reap_test_processes" in request.fixturenames


def test_worker_log_tail_still_reads_after_stop_closed_the_log(tmp_path: Path) -> None:
    """``assert worker.stop() == 0, worker.log_tail()``: stop() closes the log, and the
    message must then show the log, not raise "flush of closed file" (which hid why
    three test_detection workers exited non-zero).  Built without a process: only the
    log handling is under test."""
    worker = WorkerProc.__new__(WorkerProc)
    worker.log_path = tmp_path / "worker.log"
    worker._log = worker.log_path.open("wb")
    worker._log.write(b"Traceback (most recent call last): boom\n")
    worker._log.close()  # what stop() does once the process exited
    assert "boom" in worker.log_tail()
