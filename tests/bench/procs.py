"""Processes for benchmark scripts: start/stop our commands, read their CPU time.

``bench_worker`` and ``bench_latency`` start ``python -m streams.commands.*``
subprocesses and report CPU seconds per process; this is their one copy of that
code.  Linux only for the CPU figures (``/proc``); elsewhere they read 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spawn(args: list[str], log: Path, *, profile: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m <args>`` from the repo, output to ``log``, in its own session.

    ``profile``: run it under cProfile, writing the stats there on a clean exit.
    """
    fh = log.open("wb")
    prefix = [sys.executable] + (["-m", "cProfile", "-o", str(profile)] if profile else [])
    return subprocess.Popen(
        [*prefix, "-m", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=fh,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (our commands commit and shut down cleanly), SIGKILL after 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def worker_args(bootstrap: str, prefix: str, data_dir: Path, web_port: int) -> list[str]:
    """``streams.commands.worker`` with a fresh data dir and its HTTP view on ``web_port``."""
    return [
        "streams.commands.worker",
        "--bootstrap",
        bootstrap,
        "--prefix",
        prefix,
        "--data-dir",
        str(data_dir),
        "--web-port",
        str(web_port),
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 if unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(tid: int) -> float:
    """User + system CPU seconds of thread ``tid`` of this process (0 if unreadable).

    ``threading.get_native_id()`` / ``Thread.native_id`` give the id: a bench that
    runs a measuring consumer in a thread of its own process subtracts its share.
    """
    try:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid(port: int) -> int | None:
    """The pid of the Kafka broker JVM listening on ``port`` (for its CPU figure), if found."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(c.endswith(b"kafka.Kafka") for c in cmd):
            continue
        props = next(
            (c for c in cmd if c.endswith(b".properties") and not c.startswith(b"-")), None
        )
        if props is None:
            continue
        try:
            text = Path(props.decode()).read_text()
        except OSError:
            continue
        if f":{port}" in text:
            return int(proc.name)
    return None
