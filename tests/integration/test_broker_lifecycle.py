"""A real Kafka 3.9.1 started from a temp dir on free ports: start/status/stop tell the truth.

These tests start their own brokers (not the session's ``kafka_bootstrap``) because
what they test is the starting and stopping.  Timing figures are printed (-s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.broker import (
    LocalBroker,
    ensure_jars,
    free_ports,
    kafka_ready,
    port_in_use,
    read_state,
)
from streams.broker.state import pid_alive
from streams.errors import BrokerError

pytestmark = pytest.mark.timeout(300)

CLI = (
    "import argparse, sys\n"
    "from streams.commands import broker\n"
    "from streams.errors import TrajectoryError\n"
    "p = argparse.ArgumentParser(); broker.add_arguments(p)\n"
    "try:\n"
    "    sys.exit(broker.run(p.parse_args(sys.argv[1:])))\n"
    "except TrajectoryError as exc:\n"
    "    print('error:', exc); sys.exit(2)\n"
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``trajectory broker ARGS`` in a separate process (the broker must outlive it)."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_start_status_idempotent_start_and_clean_stop(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    broker = LocalBroker(tmp_path / "kafka", port, controller_port)
    t = time.monotonic()
    ensure_jars()
    print(f"\nensure_jars (download only if the cache is cold): {time.monotonic() - t:.1f}s")
    before = broker.status()
    assert before.condition == "stopped"
    assert not before.running
    assert not kafka_ready("127.0.0.1", port)

    started = time.monotonic()
    status = broker.start()
    startup_s = time.monotonic() - started
    print(f"first broker start (format + JVM + ready): {startup_s:.1f}s")
    try:
        assert status.running
        assert status.bootstrap == f"127.0.0.1:{port}"
        assert kafka_ready("127.0.0.1", port)
        state = read_state(broker.config.state_path)
        assert state is not None
        assert state.pid == status.pid
        assert pid_alive(state.pid)

        # a second start, from another object on the same data dir, finds it running
        again = LocalBroker(tmp_path / "kafka", port, controller_port)
        t = time.monotonic()
        second = again.start()
        assert second.running
        assert second.pid == status.pid
        assert time.monotonic() - t < 5.0
        assert again.status().running

        # the log is readable, not megabytes of noise
        server_log = broker.config.server_log.read_text()
        assert "Kafka Server started" in server_log or "Transition from STARTING" in server_log
        assert len(server_log) < 200_000
    finally:
        stopped = broker.stop()
    assert stopped is True
    assert not pid_alive(status.pid or -1)
    assert not port_in_use("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", controller_port)
    assert not broker.config.state_path.exists()
    assert broker.status().condition == "stopped"
    assert broker.stop() is False

    # the data dir is reused: a restart keeps the formatted storage and is faster
    t = time.monotonic()
    with LocalBroker(tmp_path / "kafka", port, controller_port) as restarted:
        print(f"warm broker restart: {time.monotonic() - t:.1f}s")
        assert restarted.status().running
    assert not port_in_use("127.0.0.1", port)


def test_cli_detached_start_survives_the_cli_and_status_tells_the_truth(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    args = ("--data-dir", str(tmp_path / "k"), "--port", str(port))
    args += ("--controller-port", str(controller_port))
    status = _cli("status", *args)
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.startswith("stopped:")

    start = _cli("start", *args)
    assert start.returncode == 0, start.stdout + start.stderr
    assert f"KAFKA_BOOTSTRAP=127.0.0.1:{port}" in start.stdout
    try:
        # the CLI process has exited; the broker it started is still serving
        assert kafka_ready("127.0.0.1", port)
        status = _cli("status", *args)
        assert status.returncode == 0
        assert status.stdout.startswith("running:")
        again = _cli("start", *args)
        assert again.returncode == 0
        assert again.stdout.startswith("already running")
    finally:
        stop = _cli("stop", *args)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert stop.stdout.startswith("stopped the broker")
    assert not port_in_use("127.0.0.1", port)
    status = _cli("status", *args)
    assert status.returncode == 1
    stop_again = _cli("stop", *args)
    assert stop_again.returncode == 0
    assert "no broker was running" in stop_again.stdout


def test_killed_broker_leaves_stale_state_that_start_replaces(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    broker = LocalBroker(tmp_path / "k", port, controller_port)
    first = broker.start()
    assert first.pid is not None
    try:
        os.kill(first.pid, signal.SIGKILL)
        assert _wait_gone(first.pid)
        stale = LocalBroker(tmp_path / "k", port, controller_port).status()
        assert stale.condition == "stale"
        assert str(first.pid) in stale.message
        second = broker.start()
        assert second.running
        assert second.pid != first.pid
    finally:
        broker.stop()
    assert not port_in_use("127.0.0.1", port)


def test_port_held_by_another_process_is_a_clear_error(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    holder = LocalBroker(tmp_path / "a", port, controller_port)
    holder.start()
    try:
        other = LocalBroker(tmp_path / "b", port, free_ports(1)[0])
        assert other.status().condition == "foreign"
        with pytest.raises(BrokerError, match=f"port {port} on 127.0.0.1 is already in use"):
            other.start()
        assert not (tmp_path / "b" / "broker.json").exists()
    finally:
        holder.stop()


def test_broker_that_cannot_start_raises_with_the_log_tail(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    bad = {"num.network.threads": "-5"}  # Kafka refuses it at config parsing
    # 1. on a fresh data dir the storage format step already refuses it
    with pytest.raises(BrokerError, match=r"formatting .* failed") as info:
        LocalBroker(tmp_path / "fresh", port, controller_port, overrides=bad).start()
    assert "num.network.threads" in str(info.value)
    # 2. on a formatted data dir the JVM starts, then exits: the error quotes the logs
    with LocalBroker(tmp_path / "k", port, controller_port):
        pass
    broker = LocalBroker(tmp_path / "k", port, controller_port, overrides=bad)
    with pytest.raises(BrokerError, match="exited during startup") as info:
        broker.start(timeout_s=120)
    assert "stdout.log" in str(info.value)
    assert "num.network.threads" in str(info.value)
    assert not broker.config.state_path.exists()
    assert not port_in_use("127.0.0.1", port)


def test_foreground_logs_to_the_terminal_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port, controller_port = free_ports(2)
    data_dir = tmp_path / "fg"
    flags = ["--data-dir", str(data_dir), "--port", str(port)]
    flags += ["--controller-port", str(controller_port)]
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "start", "--foreground", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("broker ready at"):
                break
        assert lines and lines[-1].strip().startswith(f"broker ready at 127.0.0.1:{port}"), lines
        assert any("(KafkaRaftServer)" in line for line in lines)  # log4j -> terminal
        status = LocalBroker(data_dir, port, controller_port).status()
        assert status.running
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines) + rest
    assert not (data_dir / "broker.json").exists()
    assert status.pid is not None and _wait_gone(status.pid)
    assert not port_in_use("127.0.0.1", port)
    assert not (data_dir / "logs" / "server.log").exists()  # it logged to the terminal
