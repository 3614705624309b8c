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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streams.broker import LocalBroker

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


def broker_unless_running(bootstrap: str, name: str) -> LocalBroker | None:
    """A :class:`~streams.broker.LocalBroker` started on ``bootstrap``'s port in a
    fresh temporary data dir when nothing answers there (the caller stops it), or
    None when a broker already answers (the benches' "use $KAFKA_BOOTSTRAP, or start
    one" rule)."""
    import tempfile

    from streams.broker import LocalBroker, free_port, kafka_ready, parse_bootstrap

    host, port = parse_bootstrap(bootstrap)
    if kafka_ready(host, port):
        return None
    broker = LocalBroker(
        Path(tempfile.mkdtemp(prefix=f"bench-{name}-broker-")),
        port=port,
        controller_port=free_port(),
    )
    print(f"starting a local broker on {bootstrap}", flush=True)
    broker.start()
    return broker


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


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of ``pid`` plus its live descendants' (the router's admin
    helper process, ``streams.router.admin``, is part of the router's cost).

    A descendant that ended since the last reading takes its CPU with it (unless
    its parent waited for it, which then counts it as its own): fine for
    processes that live through the measurement, which is what the benches start.
    """
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu_seconds(p)
        todo.extend(children.get(p, ()))
    return total


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of process ``pid`` so far, MB (``VmHWM``; 0 if unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return 0.0
    return 0.0


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


class BrokerProfile:
    """Java Flight Recorder over a span of a benchmark: where the broker's CPU goes.

    ``start()`` begins a recording on the broker JVM (``jcmd <pid> JFR.start``,
    sampling profile settings), ``stop()`` writes it to ``path`` and returns the
    frames that hold most execution samples, self and inclusive, as printable
    lines.  Needs the JDK's ``jcmd`` and ``jfr`` on ``PATH`` (the broker runs on
    that JDK); without them ``start()`` raises ``FileNotFoundError``, naming what is
    missing, rather than printing an empty profile.
    """

    def __init__(self, pid: int, path: Path) -> None:
        self.pid = pid
        self.path = path
        self.name = f"bench-{os.getpid()}"

    def _jcmd(self, *args: str) -> None:
        out = subprocess.run(
            ["jcmd", str(self.pid), *args], capture_output=True, text=True, check=False
        )
        if out.returncode != 0 or "Could not" in out.stdout:
            raise RuntimeError(f"jcmd {self.pid} {' '.join(args)}: {out.stdout}{out.stderr}")

    def start(self) -> None:
        import shutil

        for tool in ("jcmd", "jfr"):
            if shutil.which(tool) is None:
                raise FileNotFoundError(
                    f"{tool} (from the JDK) is not on PATH: needed by --broker-jfr"
                )
        self._jcmd("JFR.start", f"name={self.name}", "settings=profile")

    def stop(self, top: int = 15) -> list[str]:
        self._jcmd("JFR.stop", f"name={self.name}", f"filename={self.path}")
        return jfr_top_frames(self.path, top)


def jfr_top_frames(path: Path, top: int = 15) -> list[str]:
    """The broker's CPU samples in ``path`` summed by Kafka request (``KafkaApis.handle<X>
    Request`` on the stack, else the thread's name), then the ``top`` frames by self
    and by inclusive share of ``jdk.ExecutionSample``."""
    import collections
    import re

    text = subprocess.run(
        ["jfr", "print", "--stack-depth", "128", "--events", "jdk.ExecutionSample", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    frame = re.compile(r"^\s+([\w$.<>]+)\(", re.M)
    request = re.compile(r"KafkaApis\.handle(\w+?)Request")
    thread = re.compile(r'sampledThread = "([^"]+)"')
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    n = 0
    for sample in text.split("jdk.ExecutionSample {")[1:]:
        head, _, stack = sample.partition("stackTrace = [")
        frames = frame.findall(stack)
        if not frames:
            continue
        n += 1
        own[frames[0]] += 1
        incl.update(set(frames))
        handled = sorted({m.group(1) for f in frames for m in [request.search(f)] if m})
        if handled:
            kinds[f"{handled[0]} requests"] += 1
        else:
            name = thread.search(head)
            kinds["thread " + (re.sub(r"[-\d]+$", "", name.group(1)) if name else "?")] += 1
    lines = [f"broker JFR profile: {n} execution samples ({path})", "  by request or thread:"]
    lines += [f"    {100 * c / max(1, n):5.1f} %  {k}" for k, c in kinds.most_common(8)]
    for title, counts in (("self", own), ("inclusive", incl)):
        lines.append(f"  top {top} frames, {title}:")
        lines += [f"    {100 * c / max(1, n):5.1f} %  {f}" for f, c in counts.most_common(top)]
    return lines


class PySpy:
    """py-spy over a span of a benchmark: where a Python process's CPU goes.

    ``start()`` begins ``py-spy record --format raw`` (collapsed stacks, one line
    per distinct stack with its sample count) on ``pid``; ``mode`` ``"gil"``
    samples only the thread holding the GIL, which is close to where the CPU goes,
    ``"wall"`` every thread whatever it does (a thread waiting for the GIL after a
    socket write then looks busy).  ``stop()`` ends it with SIGINT, which makes
    py-spy write ``path``, and returns the top functions (:func:`pyspy_top_frames`).
    Without py-spy on ``PATH`` ``start()`` raises ``FileNotFoundError``.
    """

    def __init__(self, pid: int, path: Path, mode: str = "gil", rate: int = 200) -> None:
        if mode not in ("gil", "wall"):
            raise ValueError(f"py-spy mode {mode!r}: give 'gil' or 'wall'")
        self.pid, self.path, self.mode, self.rate = pid, path, mode, rate
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import shutil
        import time

        if shutil.which("py-spy") is None:
            raise FileNotFoundError("py-spy is not on PATH (pip install py-spy)")
        self._proc = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(self.pid),
                "--rate",
                str(self.rate),
                "--nonblocking",
                *(["--gil"] if self.mode == "gil" else []),
                "--format",
                "raw",
                "-o",
                str(self.path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # (attached before the span starts)

    def stop(self, top: int = 15) -> list[str]:
        proc, self._proc = self._proc, None
        if proc is None:
            return []
        proc.send_signal(signal.SIGINT)  # py-spy writes its output
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return [f"py-spy did not write {self.path} within 60 s (killed)"]
        return pyspy_top_frames(self.path, top)


def pyspy_top_frames(path: Path, top: int = 15) -> list[str]:
    """The ``top`` functions of a py-spy ``--format raw`` file by self and by
    inclusive share of its samples (a function counted once per stack)."""
    import collections

    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    n = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        # frames "function (file:line)", outermost first; drop the line numbers
        frames = [
            f.rsplit(":", 1)[0] + ")" if ":" in f else f
            for f in stack.split(";")
            if not f.startswith(("process ", "thread ("))  # (--subprocesses, --threads)
        ]
        if not frames:
            continue
        n += k
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    lines = [f"py-spy profile: {n} samples ({path})"]
    for title, counts in (("self", own), ("inclusive", incl)):
        lines.append(f"  top {top} functions, {title}:")
        lines += [f"    {100 * c / max(1, n):5.1f} %  {f}" for f, c in counts.most_common(top)]
    return lines
