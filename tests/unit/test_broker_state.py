"""Unit tests: state file handling, stale pid detection, the jar cache's completeness rules.

The jar-cache tests put a stand-in ``mvn`` script on PATH (it copies fake jars
or fails on purpose) so the download bookkeeping is tested without the network;
the real download is exercised by the integration tests.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from streams.broker import jars
from streams.broker.local import LocalBroker
from streams.broker.state import (
    BrokerState,
    is_our_broker,
    pid_alive,
    read_state,
    remove_state,
    write_state,
)
from streams.errors import BrokerError


def _state(tmp_path: Path, pid: int) -> BrokerState:
    return BrokerState(
        pid=pid,
        host="127.0.0.1",
        port=19092,
        controller_port=19093,
        data_dir=str(tmp_path),
        properties=str(tmp_path / "server.properties"),
        kafka_version="3.9.1",
        started_at_ms=1_700_000_000_000,
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_state_round_trip_and_removal(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    assert read_state(path) is None
    state = _state(tmp_path, 1234)
    write_state(path, state)
    assert read_state(path) == state
    assert state.bootstrap == "127.0.0.1:19092"
    assert not (tmp_path / "broker.json.tmp").exists()
    remove_state(path)
    assert read_state(path) is None
    remove_state(path)  # idempotent


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"version": 99}', "version 99"),
        ('{"version": 1, "pid": 3}', "missing"),
    ],
)
def test_unreadable_state_is_an_error_naming_the_file(
    tmp_path: Path, content: str, match: str
) -> None:
    path = tmp_path / "broker.json"
    path.write_text(content)
    with pytest.raises(BrokerError, match=match) as info:
        read_state(path)
    assert str(path) in str(info.value)


def test_state_with_wrong_types_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    raw = json.loads(json.dumps(_state(tmp_path, 5).__dict__))
    raw["pid"] = "5"
    path.write_text(json.dumps(raw))
    with pytest.raises(BrokerError, match="pid must be an integer"):
        read_state(path)


def test_pid_alive_distinguishes_live_dead_and_zombie() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(_dead_pid())
    assert not pid_alive(0)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        # not waited for: it stays a zombie, which os.kill(pid, 0) alone calls alive
        while time.monotonic() < deadline and Path(f"/proc/{zombie.pid}").exists():
            stat_text = Path(f"/proc/{zombie.pid}/stat").read_text()
            if stat_text.rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        if not Path("/proc").is_dir():
            pytest.skip("no /proc: zombie detection is Linux-only")
        assert not pid_alive(zombie.pid)
    finally:
        zombie.wait()


def test_recycled_pid_is_not_our_broker(tmp_path: Path) -> None:
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("no /proc: cannot check a pid's command line")
    # this very process is alive but is not a kafka.Kafka JVM with that properties file
    assert not is_our_broker(_state(tmp_path, os.getpid()))
    assert not is_our_broker(_state(tmp_path, _dead_pid()))


def test_status_reports_stale_state_and_stop_cleans_it(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path, port=1, controller_port=2)  # ports never opened
    write_state(broker.config.state_path, replace(_state(tmp_path, _dead_pid()), port=1))
    status = broker.status()
    assert status.condition == "stale"
    assert not status.running
    assert "stale state file" in status.message
    assert broker.stop() is False
    assert not broker.config.state_path.exists()
    assert broker.status().condition == "stopped"


# -- jar cache ---------------------------------------------------------------

FAKE_MVN = """#!{python}
import os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_MVN_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if os.environ.get("FAKE_MVN_FAIL"):
    print("[ERROR] Could not resolve dependencies (fake)")
    sys.exit(1)
out = next(a.split("=", 1)[1] for a in args if a.startswith("-DoutputDirectory="))
os.makedirs(out, exist_ok=True)
for name in os.environ["FAKE_MVN_JARS"].split(","):
    with open(os.path.join(out, name), "wb") as fh:
        fh.write(b"PK fake jar")
"""


@pytest.fixture
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(python=sys.executable))
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "mvn.log"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_MVN_LOG", str(log))
    monkeypatch.setenv("FAKE_MVN_JARS", "kafka_2.13-3.9.1.jar,kafka-clients-3.9.1.jar")
    monkeypatch.setenv("TRAJECTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAJECTORY_KAFKA_LIBS", raising=False)
    return log


def test_download_writes_marker_last_and_is_reused(fake_mvn: Path, tmp_path: Path) -> None:
    libs = jars.ensure_jars("3.9.1")
    assert libs == tmp_path / "cache" / "kafka" / "3.9.1" / "libs"
    assert (libs / jars.MARKER).read_text().split() == [
        "kafka-clients-3.9.1.jar",
        "kafka_2.13-3.9.1.jar",
    ]
    assert jars.libs_complete(libs)
    assert "dependency:copy-dependencies" in fake_mvn.read_text()
    jars.ensure_jars("3.9.1")
    assert len(fake_mvn.read_text().splitlines()) == 1  # cached: mvn not run again
    assert not list(libs.parent.glob("libs.partial-*"))


def test_half_finished_download_is_not_trusted(fake_mvn: Path, tmp_path: Path) -> None:
    libs = tmp_path / "cache" / "kafka" / "3.9.1" / "libs"
    libs.mkdir(parents=True)
    (libs / "kafka_2.13-3.9.1.jar").write_bytes(b"truncated")  # no marker: interrupted
    assert not jars.libs_complete(libs)
    jars.ensure_jars("3.9.1")
    assert len(fake_mvn.read_text().splitlines()) == 1
    assert jars.libs_complete(libs)
    # a jar listed by the marker that disappeared also invalidates the cache
    (libs / "kafka-clients-3.9.1.jar").unlink()
    assert not jars.libs_complete(libs)
    jars.ensure_jars("3.9.1")
    assert len(fake_mvn.read_text().splitlines()) == 2
    assert jars.libs_complete(libs)


def test_failed_download_raises_with_output_and_leaves_nothing(
    fake_mvn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    with pytest.raises(BrokerError, match="Could not resolve dependencies"):
        jars.ensure_jars("3.9.1")
    home = tmp_path / "cache" / "kafka" / "3.9.1"
    assert not (home / "libs").exists()
    assert not list(home.glob("libs.partial-*"))


def test_download_without_the_main_jar_is_refused(
    fake_mvn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_JARS", "kafka-clients-3.9.1.jar")
    with pytest.raises(BrokerError, match=r"kafka_2\.13-3\.9\.1\.jar is not among"):
        jars.ensure_jars("3.9.1")
    assert not (tmp_path / "cache" / "kafka" / "3.9.1" / "libs").exists()


def test_missing_mvn_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing in it
    monkeypatch.setenv("TRAJECTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAJECTORY_KAFKA_LIBS", raising=False)
    with pytest.raises(BrokerError, match=r"mvn .* is not on PATH"):
        jars.ensure_jars("3.9.1")


def test_libs_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJECTORY_KAFKA_LIBS", str(tmp_path))
    with pytest.raises(BrokerError, match=r"no kafka_2\.13"):
        jars.ensure_jars()
    (tmp_path / "kafka_2.13-3.9.1.jar").write_bytes(b"PK")
    assert jars.ensure_jars() == tmp_path
    monkeypatch.setenv("TRAJECTORY_KAFKA_LIBS", str(tmp_path / "absent"))
    with pytest.raises(BrokerError, match="not a directory"):
        jars.ensure_jars()


def test_cache_root_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJECTORY_CACHE_DIR", str(tmp_path))
    assert jars.cache_root() == tmp_path.resolve()
    assert jars.kafka_home("3.9.1") == tmp_path.resolve() / "kafka" / "3.9.1"
    monkeypatch.delenv("TRAJECTORY_CACHE_DIR")
    assert jars.cache_root() == Path(__file__).resolve().parents[2] / ".cache"


def test_broker_runs_g1_unless_jvm_opts_pick_a_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAJECTORY_BROKER_JVM_OPTS", raising=False)
    cmd = LocalBroker(data_dir=tmp_path).java_command("java", "/libs")
    assert [o for o in cmd if o.startswith("-XX:+Use")] == ["-XX:+UseG1GC"]
    assert "-XX:MaxGCPauseMillis=20" in cmd
    assert cmd[-2] == "kafka.Kafka"

    # a collector named in the variable replaces ours (the JVM refuses two)
    monkeypatch.setenv("TRAJECTORY_BROKER_JVM_OPTS", "-XX:+UseParallelGC")
    cmd = LocalBroker(data_dir=tmp_path).java_command("java", "/libs")
    assert [o for o in cmd if o.startswith("-XX:+Use")] == ["-XX:+UseParallelGC"]
    assert "-XX:MaxGCPauseMillis=20" not in cmd

    # other flags come after ours and keep our collector
    monkeypatch.setenv("TRAJECTORY_BROKER_JVM_OPTS", "-Xlog:gc:file=/tmp/gc.log")
    cmd = LocalBroker(data_dir=tmp_path).java_command("java", "/libs")
    assert cmd.index("-Xlog:gc:file=/tmp/gc.log") > cmd.index("-XX:+UseG1GC")
    assert cmd.index("-Xlog:gc:file=/tmp/gc.log") < cmd.index("kafka.Kafka")
