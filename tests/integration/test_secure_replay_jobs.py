"""``trajectory replay --jobs N`` with security given as flags (not environment variables).

The CLI installs the flags' SecurityConfig in its own process
(``streams.security.configure``); the replay workers are *spawned* processes,
which start from the environment alone.  They must get the parent's credential
explicitly (``replay_parallel(security=...)``), else they connect in PLAINTEXT to a
SASL_SSL listener and the replay fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SecureKafka  # tests/integration is on sys.path

from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_parallel_replay_workers_use_the_flags_credential(
    secure_kafka: SecureKafka, topic_prefix: str, tmp_path: Path
) -> None:
    from streams.commands.acl import apply
    from streams.sdk import Publisher
    from streams.tenancy import bindings

    agent = secure_kafka.credential("agent-acme")
    apply(secure_kafka.admin(), bindings("agent", "agent-acme", topic_prefix, "acme"))
    analyst = secure_kafka.credential("analyst")
    apply(secure_kafka.admin(), bindings("analyst", "analyst", topic_prefix))
    settings = Settings(bootstrap=secure_kafka.bootstrap, prefix=topic_prefix, security=agent)
    with Publisher(settings) as pub, pub.session("acme.jobs-1", agent_id="a") as s:
        for _ in range(6):
            cid = s.tool_call("bash", {"command": "pytest -x"})
            s.tool_result(cid, {"exit_code": 1}, is_error=True, error="1 failed")

    password = tmp_path / "analyst.pw"
    password.write_text(analyst.password + "\n")
    out = tmp_path / "replay.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJECTORY_")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams",
            "replay",
            "--session",
            "acme.jobs-1",
            "--jobs",
            "2",
            "--bootstrap",
            secure_kafka.bootstrap,
            "--prefix",
            topic_prefix,
            "--output",
            "jsonl",
            "--out",
            str(out),
            # security as flags only: nothing in the environment
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            analyst.sasl_mechanism,
            "--sasl-username",
            "analyst",
            "--sasl-password-file",
            str(password),
            "--ssl-ca-file",
            str(secure_kafka.files.ca_cert),
        ],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "doom" in out.read_text().lower(), out.read_text()[:2000]
