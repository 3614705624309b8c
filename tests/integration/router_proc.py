"""``RouterProc``: the ingest router as a subprocess, for the pipeline tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def spawn_router(
    settings: Settings, log_path: Path, *extra: str, partitions: int | None = None
) -> subprocess.Popen[bytes]:
    """``python -m streams.commands.router`` on ``settings`` plus ``extra`` flags; its
    output is appended to ``log_path`` (a restart adds to the same log)."""
    n = partitions if partitions is not None else settings.events_partitions
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streams.commands.router",
            "--bootstrap",
            settings.bootstrap,
            "--prefix",
            settings.prefix,
            "--partitions",
            str(n),
            *extra,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
    )


class RouterProc:
    """A router subprocess (:func:`spawn_router`) with ``stop`` and ``log_tail``."""

    def __init__(self, settings: Settings, log: Path, *extra: str) -> None:
        self.log_path = log
        self.proc = spawn_router(settings, log, *extra)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Stop it (SIGTERM commits the open transaction); kill after ``timeout_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
