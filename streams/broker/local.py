"""Run a single-node KRaft Kafka on 127.0.0.1 from a data directory.

``LocalBroker(data_dir, port, controller_port)`` owns everything under
``data_dir``: ``server.properties``, ``log4j.properties``, ``data/`` (topics and
the KRaft metadata log), ``logs/`` and the state file ``broker.json``.

Contract:

* ``start()`` is idempotent: if this data dir's broker already runs and answers,
  it returns at once; a stale state file is replaced; a port held by anything
  else is an error that names the port.  It returns only once the broker answers
  a Metadata request listing itself (see :mod:`streams.broker.probe`), else it
  kills what it started and raises :class:`BrokerError` quoting the log's tail.
* ``stop()`` sends SIGTERM (Kafka's controlled shutdown), waits, SIGKILLs after
  the timeout, and removes the state file; afterwards the ports are free.
* ``status()`` tells the truth: "running" means the recorded pid is alive, is this
  broker's JVM, and answers on the port.
* The JVM runs detached (own session) so ``trajectory broker start`` can return;
  as a context manager the broker is stopped on exit if this object started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from streams.broker.config import (
    KAFKA_VERSION,
    BrokerConfig,
    log4j_properties,
    random_cluster_id,
    render_properties,
    server_properties,
)
from streams.broker.jars import ensure_jars
from streams.broker.probe import kafka_ready, port_in_use
from streams.broker.secure import (
    SecureFiles,
    ensure_material,
    scram_format_args,
    secure_overrides,
    secure_ready,
)
from streams.broker.state import (
    BrokerState,
    is_our_broker,
    pid_alive,
    read_state,
    remove_state,
    write_state,
)
from streams.errors import BrokerError

Condition = Literal["running", "unresponsive", "stopped", "stale", "foreign"]

DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status()`` found.  ``running`` is True only for a broker that answers."""

    condition: Condition
    bootstrap: str
    data_dir: Path
    pid: int | None
    message: str

    @property
    def running(self) -> bool:
        return self.condition == "running"


def default_data_dir() -> Path:
    """``<cache_root>/broker`` (next to the jar cache), overridable per call."""
    from streams.broker.jars import cache_root

    return cache_root() / "broker"


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError(
            "java is not on PATH (and JAVA_HOME is unset): Kafka 3.9 needs Java 11+ "
            "(e.g. `apt-get install openjdk-17-jre-headless`)"
        )
    return java


def _was_secure(cfg: BrokerConfig) -> bool:
    """Did this data dir's last start use ``--secure``?  (Its server.properties says.)"""
    try:
        text = cfg.properties_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return "SASL_SSL://" in text


def _raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM in --foreground takes the same clean-stop path as Ctrl-C."""
    raise KeyboardInterrupt


def _tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:]) or f"({path} is empty)"


class LocalBroker:
    """A local single-node KRaft Kafka; see the module docstring for the contract."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        port: int = 9092,
        controller_port: int = 9093,
        *,
        host: str = "127.0.0.1",
        auto_create_topics: bool = False,
        heap: str | None = None,
        overrides: Mapping[str, str] | None = None,
        kafka_version: str = KAFKA_VERSION,
        secure: bool | None = False,
        ssl_port: int | None = None,
    ) -> None:
        self.config = BrokerConfig(
            data_dir=Path(data_dir).resolve() if data_dir is not None else default_data_dir(),
            port=port,
            controller_port=controller_port,
            host=host,
            auto_create_topics=auto_create_topics,
            overrides=dict(overrides or {}),
        )
        self.heap = heap or os.environ.get("TRAJECTORY_BROKER_HEAP", "1g")
        #: extra JVM options, after ours (a later ``-XX`` flag wins), e.g. another collector
        self.jvm_opts = os.environ.get("TRAJECTORY_BROKER_JVM_OPTS", "").split()
        self.kafka_version = kafka_version
        #: SASL_SSL + SCRAM + ACLs (streams.broker.secure); None: as this data dir was last run
        self.secure = _was_secure(self.config) if secure is None else secure
        #: with ``secure``: an extra SSL listener requiring client certificates (mTLS)
        self.ssl_port = ssl_port
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_here = False

    # -- introspection -----------------------------------------------------
    @property
    def gc_opts(self) -> list[str]:
        """The collector's flags: G1 with a 20 ms pause goal, unless ``jvm_opts`` picks a
        collector itself (two ``-XX:+Use...GC`` flags make the JVM refuse to start).

        The parallel collector costs the broker ~10 % less CPU at 1,000 events/s over
        1,000 session topics on two cores, but pauses it for ~40 ms at the median and
        0.1-0.5 s in its full collections, against G1's 17 ms median and 53 ms worst
        (docs/kafka-notes.md "Broker: the collector"); the latency aim keeps G1.
        ``TRAJECTORY_BROKER_JVM_OPTS=-XX:+UseParallelGC`` trades the other way.
        """
        if any(o.startswith("-XX:+Use") and o.endswith("GC") for o in self.jvm_opts):
            return []
        return ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]

    def java_command(self, java: str | Path, libs: str | Path) -> list[str]:
        """The broker's command line: heap, collector, ``jvm_opts`` (after ours), main class."""
        cfg = self.config
        return [
            str(java),
            f"-Xmx{self.heap}",
            "-Xms128m",
            *self.gc_opts,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *self.jvm_opts,
            f"-Dlog4j.configuration=file:{cfg.log4j_path}",
            f"-Dkafka.logs.dir={cfg.logs_dir}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(cfg.properties_path),
        ]

    @property
    def security_files(self) -> SecureFiles:
        """Where ``--secure`` keeps its CA, certificates and admin credentials."""
        return SecureFiles(self.config.data_dir / "security")

    def _answers(self, host: str, port: int, timeout_s: float) -> bool:
        if self.secure:
            return secure_ready(host, port, self.security_files, timeout_s)
        return kafka_ready(host, port, timeout_s=timeout_s)

    @property
    def bootstrap(self) -> str:
        return self.config.bootstrap

    @property
    def data_dir(self) -> Path:
        return self.config.data_dir

    def log_tail(self, lines: int = 30) -> str:
        cfg = self.config
        return (
            f"--- {cfg.server_log} (last {lines} lines) ---\n{_tail(cfg.server_log, lines)}\n"
            f"--- {cfg.stdout_log} (last {lines} lines) ---\n{_tail(cfg.stdout_log, lines)}"
        )

    def status(self) -> BrokerStatus:
        cfg = self.config
        state = read_state(cfg.state_path)
        if state is None:
            if self._answers(cfg.host, cfg.port, 1.0):
                return BrokerStatus(
                    "foreign",
                    cfg.bootstrap,
                    cfg.data_dir,
                    None,
                    f"no broker runs from {cfg.data_dir}, but a Kafka broker started "
                    f"elsewhere answers at {cfg.bootstrap}",
                )
            return BrokerStatus(
                "stopped", cfg.bootstrap, cfg.data_dir, None, f"no broker runs from {cfg.data_dir}"
            )
        if not is_our_broker(state):
            return BrokerStatus(
                "stale",
                state.bootstrap,
                cfg.data_dir,
                state.pid,
                f"stale state file {cfg.state_path}: pid {state.pid} is gone or is not this "
                "data dir's broker (it crashed or was killed); `start` replaces it, "
                "`stop` removes it",
            )
        if self._answers(state.host, state.port, 2.0):
            return BrokerStatus(
                "running",
                state.bootstrap,
                cfg.data_dir,
                state.pid,
                f"running at {state.bootstrap} (pid {state.pid})",
            )
        return BrokerStatus(
            "unresponsive",
            state.bootstrap,
            cfg.data_dir,
            state.pid,
            f"pid {state.pid} is alive but {state.bootstrap} does not answer Kafka requests "
            f"(still starting, or hung: see {cfg.server_log})",
        )

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> BrokerStatus:
        """Start (or find running) this data dir's broker; returns once it answers."""
        current = self.status()
        if current.running:
            return current
        if current.condition == "unresponsive":
            return self._wait_ready(timeout_s, current.pid)
        if current.condition == "stale":
            remove_state(self.config.state_path)
            # a just-killed JVM's leader thread is a zombie before its sockets close
            self._wait_ports_free(10.0)
        self._check_ports()
        self._spawn(console=False)
        return self._wait_ready(timeout_s, self._proc.pid if self._proc else None)

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> bool:
        """Stop this data dir's broker.  True if one was running; False if none was."""
        cfg = self.config
        state = read_state(cfg.state_path)
        if state is None:
            return False
        if not is_our_broker(state):
            remove_state(cfg.state_path)
            self._reap()
            return False
        self._terminate(state.pid, timeout_s)
        remove_state(cfg.state_path)
        return True

    def run_foreground(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> int:
        """Run attached, logging to stdout, until Ctrl-C / SIGTERM; then stop cleanly."""
        current = self.status()
        if current.condition in ("running", "unresponsive"):
            raise BrokerError(
                f"a broker from {self.data_dir} already runs (pid {current.pid}); "
                "stop it first with `trajectory broker stop` or use another --data-dir"
            )
        if current.condition == "stale":
            remove_state(self.config.state_path)
            self._wait_ports_free(10.0)
        self._check_ports()
        self._spawn(console=True)
        assert self._proc is not None
        proc = self._proc
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self._wait_ready(timeout_s, proc.pid)
            print(f"broker ready at {self.bootstrap} (Ctrl-C stops it)", flush=True)
            return proc.wait()
        except KeyboardInterrupt:
            self._terminate(proc.pid, DEFAULT_STOP_TIMEOUT_S)
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)
            if proc.poll() is None:
                self._terminate(proc.pid, DEFAULT_STOP_TIMEOUT_S)
            remove_state(self.config.state_path)

    def __enter__(self) -> LocalBroker:
        before = self.status()
        self.start()
        self._started_here = not before.running
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started_here:
            self.stop()

    # -- internals ---------------------------------------------------------
    def _check_ports(self) -> None:
        cfg = self.config
        for name, port in (("port", cfg.port), ("controller port", cfg.controller_port)):
            if not port_in_use(cfg.host, port):
                continue
            hint = ""
            if name == "port" and kafka_ready(cfg.host, port, timeout_s=1.0):
                hint = (
                    f" A Kafka broker (not started from {cfg.data_dir}) already answers there: "
                    f"use it with KAFKA_BOOTSTRAP={cfg.host}:{port}, or"
                )
            flag = "--port" if name == "port" else "--controller-port"
            raise BrokerError(
                f"{name} {port} on {cfg.host} is already in use.{hint} pick a free one with {flag}"
            )

    def _format_storage(self, java: str, libs: Path) -> None:
        cfg = self.config
        marker = self.security_files.root / "formatted-with-scram"
        if (cfg.log_dir / "meta.properties").is_file():
            if self.secure and not marker.is_file():
                raise BrokerError(
                    f"{cfg.log_dir} was formatted without --secure, so it has no SCRAM users: "
                    "start the secured broker with another --data-dir (or delete this one)"
                )
            return  # formatted before: keep the topics
        cmd = [
            java,
            "-Xmx256m",
            f"-Dlog4j.configuration=file:{cfg.log4j_path}",
            "-cp",
            f"{libs}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            random_cluster_id(),
            "-c",
            str(cfg.properties_path),
            "--ignore-formatted",
        ]
        if self.secure:
            cmd += scram_format_args(self.security_files)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting {cfg.log_dir} failed (exit {proc.returncode}): "
                f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
            )
        if self.secure:
            marker.write_text("SCRAM users were added at format time\n", encoding="utf-8")

    def _spawn(self, *, console: bool) -> None:
        cfg = self.config
        libs = ensure_jars(self.kafka_version)
        java = find_java()
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        cfg.logs_dir.mkdir(exist_ok=True)
        header = "Generated by streams.broker (trajectory broker start); rewritten on every start."
        props = server_properties(cfg)
        if self.secure:
            files = ensure_material(self.security_files, cfg.host)
            props.update(
                secure_overrides(cfg.host, cfg.port, cfg.controller_port, files, self.ssl_port)
            )
            props.update(cfg.overrides)
        cfg.properties_path.write_text(render_properties(props, header), encoding="utf-8")
        if self.secure:
            os.chmod(cfg.properties_path, 0o600)  # holds the admin's inter-broker password
        cfg.log4j_path.write_text(
            render_properties(log4j_properties(cfg, console=console), header), encoding="utf-8"
        )
        self._format_storage(java, libs)
        cmd = self.java_command(java, libs)
        out: IO[bytes] | None = None
        if not console:
            out = open(cfg.stdout_log, "ab")  # noqa: SIM115 - handed to the child
        try:
            self._proc = subprocess.Popen(
                cmd,
                cwd=cfg.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                start_new_session=not console,
            )
        finally:
            if out is not None:
                out.close()
        write_state(
            cfg.state_path,
            BrokerState(
                pid=self._proc.pid,
                host=cfg.host,
                port=cfg.port,
                controller_port=cfg.controller_port,
                data_dir=str(cfg.data_dir),
                properties=str(cfg.properties_path),
                kafka_version=self.kafka_version,
                started_at_ms=int(time.time() * 1000),
            ),
        )

    def _wait_ready(self, timeout_s: float, pid: int | None) -> BrokerStatus:
        cfg = self.config
        deadline = time.monotonic() + timeout_s
        while True:
            exited = (
                self._proc.poll() is not None
                if self._proc is not None and self._proc.pid == pid
                else pid is None or not pid_alive(pid)
            )
            if exited:
                remove_state(cfg.state_path)
                raise BrokerError(
                    f"the Kafka broker (pid {pid}) exited during startup "
                    f"(data dir {cfg.data_dir}).\n{self.log_tail()}"
                )
            if self._answers(cfg.host, cfg.port, 2.0):
                return BrokerStatus(
                    "running",
                    cfg.bootstrap,
                    cfg.data_dir,
                    pid,
                    f"running at {cfg.bootstrap} (pid {pid})",
                )
            if time.monotonic() >= deadline:
                if pid is not None:
                    self._terminate(pid, 10.0)
                remove_state(cfg.state_path)
                raise BrokerError(
                    f"the Kafka broker (pid {pid}) did not answer at {cfg.bootstrap} within "
                    f"{timeout_s:.0f}s; it was stopped.\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def _exited(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is not None
        return not pid_alive(pid)

    def _terminate(self, pid: int, timeout_s: float) -> None:
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and not self._exited(pid):
                time.sleep(0.1)
            if self._exited(pid):
                break
        else:
            raise BrokerError(f"pid {pid} survived SIGTERM and SIGKILL; stop it by hand")
        self._reap()
        self._wait_ports_free(10.0)

    def _wait_ports_free(self, timeout_s: float) -> None:
        """Best effort: the ports close a moment after the pid stops being alive.

        (A multi-threaded process's leader shows as a zombie while its other threads
        are still exiting and holding the sockets.)  ``_check_ports`` reports what
        is still held after this.
        """
        cfg = self.config
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (
            port_in_use(cfg.host, cfg.port) or port_in_use(cfg.host, cfg.controller_port)
        ):
            time.sleep(0.1)

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None


__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "BrokerStatus",
    "LocalBroker",
    "default_data_dir",
    "find_java",
]
