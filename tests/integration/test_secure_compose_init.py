"""The secured compose stack's ``acl-init`` step, run for real on the secured test broker.

No Docker engine runs here, so deploy/docker-compose.secure.yml never runs as a
whole.  Its ``acl-init`` script is plain sh + ``trajectory acl``, though: this test
runs it as written against the session's secured broker (``secure_kafka``), with
only what a container provides substituted (the volume path, the ``trajectory``
entry point, and user names made unique so the session's other credentials stay
valid), twice (compose reruns it on every ``up``), then connects with the router's
credential exactly as the compose file configures it, and with the example agent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import SecureKafka  # tests/integration is on sys.path

from streams.broker.container import CONTAINER_SECURITY_DIR
from streams.security import SecurityConfig, SecurityError, verify_connection
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "docker-compose.secure.yml"

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_acl_init_script_makes_working_service_and_agent_credentials(
    secure_kafka: SecureKafka, topic_prefix: str, tmp_path: Path
) -> None:
    from streams.sdk import Publisher
    from streams.topics import ensure_worker_topics

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    script = services["acl-init"]["command"][0].replace("$$", "$")
    volume = tmp_path / "security"
    volume.mkdir()
    script = script.replace(CONTAINER_SECURITY_DIR, str(volume))
    script = script.replace("trajectory acl", f"{sys.executable} -m streams acl")
    script = script.replace("python -c", f"{sys.executable} -c")
    suffix = uuid.uuid4().hex[:6]
    names = {u: f"{u}-{suffix}" for u in ("svc", "analyst", "agent-acme")}
    # user names only (the roles `service`, `analyst`, `agent` stay as written)
    script = re.sub(
        r"for user in [^;]*",
        lambda m: re.sub(r"\b(svc|analyst|agent-acme)\b", lambda n: names[n.group(1)], m[0]),
        script,
    )
    script = re.sub(r"--user (\S+)", lambda m: f"--user {names.get(m[1], m[1])}", script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJECTORY_")}
    env.update(
        KAFKA_BOOTSTRAP=secure_kafka.bootstrap,
        TRAJECTORY_PREFIX=topic_prefix,
        TRAJECTORY_KAFKA_PROPERTIES=str(secure_kafka.files.admin_properties),
        PYTHONPATH=str(REPO),
    )
    for attempt in (1, 2):  # the second run reuses the passwords and re-grants
        run = subprocess.run(
            ["/bin/sh", "-c", script],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert run.returncode == 0, (attempt, run.stdout, run.stderr)
    for user in names.values():
        assert (volume / "users" / f"{user}.password").stat().st_mode & 0o077 == 0

    # the router's credential, as the compose file sets it (paths into the volume)
    router_env = {
        k: str(v).replace(CONTAINER_SECURITY_DIR, str(volume))
        for k, v in services["router"]["environment"].items()
    }
    router_env["TRAJECTORY_SASL_USERNAME"] = names[router_env["TRAJECTORY_SASL_USERNAME"]]
    router_env["TRAJECTORY_SASL_PASSWORD_FILE"] = str(
        volume / "users" / f"{router_env['TRAJECTORY_SASL_USERNAME']}.password"
    )
    router_env["TRAJECTORY_SSL_CA_FILE"] = str(secure_kafka.files.ca_cert)  # the test CA
    svc = SecurityConfig.from_sources(None, environ=router_env)
    verify_connection(secure_kafka.bootstrap, svc, timeout_s=30)
    service = Settings(bootstrap=secure_kafka.bootstrap, prefix=topic_prefix, security=svc)
    ensure_worker_topics(service)  # the service role creates the deployment's topics

    # the example agent: its tenant's sessions, nothing else
    agent = SecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism=router_env["TRAJECTORY_SASL_MECHANISM"],
        username=names["agent-acme"],
        password_file=str(volume / "users" / f"{names['agent-acme']}.password"),
        ca_file=str(secure_kafka.files.ca_cert),
    )
    acme = service.with_(security=agent)
    with Publisher(acme) as pub:
        pub.ensure_session_topic("acme.compose-1")
        with pytest.raises(SecurityError, match="TOPIC_AUTHORIZATION_FAILED"):
            pub.ensure_session_topic("globex.compose-1")
