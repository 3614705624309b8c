"""deploy/docker-compose.yml cannot be run here (no Docker engine): check it is
valid YAML and consistent with itself and with what streams.broker configures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.broker.config import KAFKA_VERSION

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_kafka_service_matches_the_local_broker(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 1
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == 0
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    listeners = {
        item.split("://")[0]: item.split("://")[1]
        for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    }
    assert listeners["EXTERNAL"] == "127.0.0.1:9092"
    assert "127.0.0.1:9092:9092" in kafka["ports"]
    protocol_map = dict(
        pair.split(":") for pair in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    declared = {item.split("://")[0] for item in env["KAFKA_LISTENERS"].split(",")}
    assert declared == set(protocol_map)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in declared
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in declared


def test_project_services_reach_kafka_on_its_internal_listener(compose: dict[str, Any]) -> None:
    services = compose["services"]
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    internal = dict(item.split("://") for item in advertised.split(","))["INTERNAL"]
    for name in ("router", "worker"):
        service = services[name]
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert service["environment"]["KAFKA_BOOTSTRAP"] == internal
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["command"][0] == name
    worker_volume = services["worker"]["volumes"][0].split(":")[0]
    assert worker_volume in compose["volumes"]


def test_dockerfile_installs_the_project() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms == ["FROM python:3.11-slim"]
    assert "RUN pip install ." in text
    assert 'ENTRYPOINT ["trajectory"]' in text
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for needed in ("!pyproject.toml", "!README.md", "!streams/**"):
        assert needed in ignore
