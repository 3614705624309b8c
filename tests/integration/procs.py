"""The one launcher of each process the integration tests run: router and worker.

``spawn_router`` / :class:`RouterProc` run ``python -m streams.commands.router`` and
:class:`WorkerProc` runs ``python -m streams.commands.worker`` (with its HTTP view on
a free port), each from this checkout (``cwd`` and ``PYTHONPATH`` = the repo, so a
worktree tests its own code), output to a log file the test can tail.

Teardown always runs: every process started here is recorded, and the autouse
fixture ``_reap_test_processes`` (tests/integration/conftest.py) calls
:func:`reap_processes` after each test, so a test that fails half-way (a worker that
never starts after its router did, an assertion before the ``finally``) leaves no
router or worker running.  Tests still stop their processes themselves where the
exit code is part of what they check.

Test modules import these helpers from here, never from one another
(tests/unit/test_test_layout.py enforces it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streams.broker import free_port
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]

#: processes started by this module and not yet reaped (see reap_processes)
_STARTED: list[subprocess.Popen[bytes]] = []


def _track(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    _STARTED.append(proc)
    return proc


def reap_processes(timeout_s: float = 30.0) -> list[str]:
    """Stop every process started here that still runs: SIGTERM, SIGKILL after
    ``timeout_s``.  Returns one line per process it had to stop (empty when the test
    stopped all its own), so the caller can say which were left running."""
    left: list[str] = []
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is not None:
            continue
        left.append(f"pid {proc.pid} ({proc.args[2]})")  # type: ignore[index]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return left


def spawn_router(
    settings: Settings, log_path: Path, *extra: str, partitions: int | None = None
) -> subprocess.Popen[bytes]:
    """``python -m streams.commands.router`` on ``settings`` plus ``extra`` flags; its
    output is appended to ``log_path`` (a restart adds to the same log)."""
    n = partitions if partitions is not None else settings.events_partitions
    return _track(
        subprocess.Popen(
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
    )


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process ``pid`` (a broker) stopped with SIGSTOP for the block, then
    continued, whatever happens in it: a broker that hangs without closing its
    connections (a long GC pause, a network black hole), unlike a stopped one."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


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


class WorkerProc:
    """One ``trajectory worker`` subprocess and its HTTP view."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        store: str = "rocksdb",
        extra: tuple[str, ...] = (),
        port: int | None = None,
        pythonpath: tuple[Path, ...] = (),
    ) -> None:
        """``pythonpath``: directories put before the repo on the worker's PYTHONPATH,
        for test-only code injected into it (e.g. a ``sitecustomize`` that slows a
        Faust internal to make a race deterministic)."""
        from streams.topics import ensure_worker_topics

        # Create <prefix>.events (settings.events_partitions) before anything produces:
        # on a broker with auto-creation a first produce would make a 1-partition topic.
        assert ensure_worker_topics(settings) == settings.events_partitions
        self.port = port or free_port()
        self.log_path = data_dir.parent / f"worker-{self.port}.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (*pythonpath, REPO)))}
        self.proc = _track(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streams.commands.worker",
                    "--bootstrap",
                    settings.bootstrap,
                    "--prefix",
                    settings.prefix,
                    "--store",
                    store,
                    "--data-dir",
                    str(data_dir),
                    "--web-port",
                    str(self.port),
                    "--loglevel",
                    "info",
                    *extra,
                ],
                cwd=REPO,
                env=env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
        )

    def get(self, path: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def log_tail(self) -> str:
        """The last 4000 bytes of the worker's output; works after :meth:`stop` too
        (``assert worker.stop() == 0, worker.log_tail()`` must show why, not fail)."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_bytes()[-4000:].decode("utf-8", "replace")

    def warnings(self, last: int = 30, width: int = 2000) -> str:
        """The worker's last ``last`` WARNING/ERROR/CRITICAL lines (each cut to
        ``width``): a stall (streams/worker/stall.py) or a SIGUSR1 fetch state is
        named there, whatever came after it in the log."""
        if not self._log.closed:
            self._log.flush()
        lines = [
            line[:width]
            for line in self.log_path.read_text(errors="replace").splitlines()
            if "[WARNING]" in line or "[ERROR]" in line or "[CRITICAL]" in line
        ]
        return "\n".join(lines[-last:]) or "(no WARNING or worse)"

    def _spy_dump(self) -> None:
        """py-spy's dump of the worker's threads (if py-spy is installed) appended to
        its log: works even with the event loop blocked."""
        self._log.flush()
        spy = shutil.which("py-spy")
        if spy:
            subprocess.run(
                [spy, "dump", "--pid", str(self.proc.pid)],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                timeout=30,
                check=False,
            )

    def diagnose(self) -> str:
        """A stuck-looking worker, before the test fails: SIGUSR1 (the worker logs
        its fetch state at WARNING, then mode dumps every thread's and task's stack
        into its log) and a py-spy dump (threads, even with the event loop blocked)
        appended to the log.  Returns what a failure message should show: its
        warnings, and where the full log is."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
            if not self._log.closed:
                self._spy_dump()
        return f"worker warnings:\n{self.warnings()}\n(full log with stacks: {self.log_path})"

    def wait_state(self, expected: dict[str, dict[str, Any]], timeout_s: float = 90.0) -> None:
        """Poll until every session's state has ``last_seq`` as expected (or fail)."""
        deadline = time.monotonic() + timeout_s
        pending = dict(expected)
        while pending and time.monotonic() < deadline:
            assert self.proc.poll() is None, f"worker exited:\n{self.log_tail()}"
            for sid in list(pending):
                try:
                    status, body = self.get(f"/sessions/{sid}/state")
                except (urllib.error.URLError, ConnectionError, OSError):
                    break
                if status == 200 and body["state"]["last_seq"] >= pending[sid]["last_seq"]:
                    del pending[sid]
            time.sleep(0.3)
        if pending:
            context = self.diagnose()
            raise AssertionError(f"sessions not caught up: {sorted(pending)}\n{context}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            # Hung: show where before killing it.  py-spy (if installed) dumps the
            # threads even when the event loop is blocked; SIGUSR1 makes mode log the
            # stack of every thread and asyncio task (mode.Worker._on_sigusr1 -> cry).
            self._spy_dump()
            self.proc.send_signal(signal.SIGUSR1)
            try:
                code = self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait(10)
        self._log.close()
        return code


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A running worker and router on one test's prefix (the ``pipeline`` fixture of
    tests/integration/conftest.py starts the worker first: it creates the topics)."""

    worker: WorkerProc
    router: RouterProc
