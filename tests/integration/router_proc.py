"""``RouterProc``: the ingest router as a subprocess, for the pipeline tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]


class RouterProc:
    """``python -m streams.commands.router`` on ``settings``, logging to ``log``."""

    def __init__(self, settings: Settings, log: Path, *extra: str) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streams.commands.router",
                "--bootstrap",
                settings.bootstrap,
                "--prefix",
                settings.prefix,
                "--partitions",
                str(settings.events_partitions),
                *extra,
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Stop it (SIGTERM commits the open transaction); kill after ``timeout_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code
