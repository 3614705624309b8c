"""``RouterProc``: the ingest router as a subprocess, for the pipeline tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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


class SessionStreamPublisher(threading.Thread):
    """Publishes ``rounds`` events per session to their session topics at ~1000
    events/s, and keeps going until :attr:`killed` is set (bounded: 120 s), so a
    stream is still flowing whenever a test kills its router.

    ``published`` lists ``(session_id, seq)`` in order; ``errors`` holds delivery
    errors; ``done`` is set after the final flush.
    """

    def __init__(
        self,
        settings: Settings,
        sessions: list[str],
        rounds: int,
        encode: Callable[[str, int], bytes],
    ) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.sessions = sessions
        self.rounds = rounds
        self.encode = encode
        self.published: list[tuple[str, int]] = []
        self.errors: list[str] = []
        self.done = threading.Event()
        self.killed = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        settings = self.settings
        producer = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})

        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors.append(str(err))

        seq = 0
        give_up = time.monotonic() + 120
        while (seq < self.rounds or not self.killed.is_set()) and time.monotonic() < give_up:
            for sid in self.sessions:
                producer.produce(
                    settings.session_topic(sid), self.encode(sid, seq), sid.encode(), on_delivery=cb
                )
                self.published.append((sid, seq))
            seq += 1
            producer.poll(0)
            time.sleep(0.008)  # ~1000 events/s over 8 sessions
        producer.flush(30)
        self.done.set()
