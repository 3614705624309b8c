"""The router's admin requests in a child process (streams.router.admin).

No broker: a child whose bootstrap is unreachable, or a stand-in child (a small
Python script speaking the same line protocol) for the timing cases.  The real
requests against the real broker: tests/integration/test_router_admin_child.py.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from streams.router import admin as admin_mod
from streams.router.admin import AdminProcess, serve

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}

#: A stand-in child: answers "reaches_cluster" at once, sleeps ``args.sleep_s``
#: first for "describe_group", and exits with status 3 on "exit".
STAND_IN = """
import json, sys, time
sys.stdin.readline()  # the configuration
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "exit":
        sys.exit(3)
    if req["op"] == "describe_group":
        time.sleep(req["args"].get("sleep_s", 0))
        result = {"state": "STABLE", "members": [
            {"member_id": "m-" + req["args"]["group"], "instance_id": None, "topics": ["t"]}]}
    else:
        result = True
    print(json.dumps({"id": req["id"], "ok": True, "result": result}), flush=True)
"""


@pytest.fixture
def stand_in() -> Iterator[AdminProcess]:
    proc = AdminProcess(UNREACHABLE, command=[sys.executable, "-c", STAND_IN])
    yield proc
    proc.close()


def test_a_late_answer_is_never_taken_for_the_next_requests_answer(
    stand_in: AdminProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_mod, "REPLY_MARGIN_S", 0.2)
    t0 = time.monotonic()
    late = stand_in._call("describe_group", {"group": "late", "sleep_s": 1.0}, 0.1)
    assert late is None
    assert time.monotonic() - t0 < 0.9  # gave up at its own deadline, not the answer's
    # the next request gets its own answer, not the late one queued before it
    got = stand_in._call("describe_group", {"group": "next"}, 2.0)
    assert got["members"][0]["member_id"] == "m-next"
    assert stand_in.deaths == 0


def test_a_child_that_dies_is_logged_counted_and_replaced(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_mod, "RESPAWN_MIN_INTERVAL_S", 0.0)
    deaths: list[int] = []
    proc = AdminProcess(UNREACHABLE, on_death=lambda: deaths.append(1))  # the real child
    try:
        assert proc.reaches_cluster(0.2) is False  # answered (an error), not dead
        assert proc.deaths == 0 and proc._proc is not None
        pid = proc._proc.pid
        os.kill(pid, signal.SIGABRT)  # what librdkafka's failed assertion does
        with caplog.at_level(logging.WARNING, logger="streams.router.admin"):
            assert proc.describe_group("g", 0.2) is None
        assert proc.deaths == 1 and deaths == [1]  # (the router's metric)
        assert f"pid {pid}) died (signal SIGABRT)" in caplog.text
        assert proc.reaches_cluster(0.2) is False  # a new child answers
        assert proc._proc is not None and proc._proc.pid != pid
        assert proc.deaths == 1
    finally:
        proc.close()


def test_a_child_that_exits_is_replaced_no_sooner_than_the_respawn_interval(
    stand_in: AdminProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_mod, "RESPAWN_MIN_INTERVAL_S", 60.0)
    monkeypatch.setattr(stand_in, "_spawned_at", -60.0)
    assert stand_in.reaches_cluster(2.0) is True
    assert stand_in._call("exit", {}, 2.0) is None
    assert stand_in.deaths == 1
    assert stand_in.reaches_cluster(2.0) is False  # not respawned within the interval
    assert stand_in._proc is None


def test_secrets_reach_the_child_on_stdin_not_its_command_line() -> None:
    proc = AdminProcess({**UNREACHABLE, "sasl.password": "s3cret"})
    try:
        proc.reaches_cluster(0.2)
        assert proc._proc is not None
        assert "s3cret" not in " ".join(map(str, proc._proc.args))
        with open(f"/proc/{proc._proc.pid}/cmdline", "rb") as f:
            assert b"s3cret" not in f.read()
    finally:
        proc.close()


def test_close_ends_the_child() -> None:
    proc = AdminProcess(UNREACHABLE)
    proc.reaches_cluster(0.2)
    child = proc._proc
    assert child is not None
    proc.close()
    assert child.returncode == 0
    proc.close()  # twice is harmless


def test_serve_answers_each_request_and_sends_errors_back() -> None:
    requests = [
        {"id": 1, "op": "reaches_cluster", "args": {"timeout_s": 0.2}},
        {"id": 2, "op": "describe_group", "args": {"group": "g", "timeout_s": 0.2}},
    ]
    stdin = io.StringIO(
        json.dumps(UNREACHABLE) + "\n" + "".join(json.dumps(r) + "\n" for r in requests)
    )
    stdout = io.StringIO()
    serve(stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [1, 2]
    assert not any(a["ok"] for a in answers)  # nothing reachable: each says why
    assert "KafkaException" in answers[0]["error"]


def test_the_helper_gets_the_routers_security_settings_as_plain_values(tmp_path: Any) -> None:
    """Before: only ``extra_consumer_config``'s security keys, so on a SASL cluster
    configured through ``Settings.security`` every admin request of the checks
    failed to authenticate and the checks silently decided nothing."""
    from streams.router import Router
    from streams.security import SecurityConfig
    from streams.settings import Settings

    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    security = SecurityConfig(protocol="SASL_SSL", username="svc", password_file=str(pw))
    router = Router(Settings(bootstrap="127.0.0.1:1", prefix="t", security=security))
    config = router.admin_config()
    assert config["bootstrap.servers"] == "127.0.0.1:1"
    assert config["security.protocol"] == "SASL_SSL"
    assert (config["sasl.username"], config["sasl.password"]) == ("svc", "s3cret")
    assert json.loads(json.dumps(config)) == config  # no callback: it travels as JSON
