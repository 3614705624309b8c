"""Opt-in (``pytest --docker``): the compose stack comes up and its services run.

Skipped with the reason when no Docker engine answers.  UNTESTED where written.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams.broker import kafka_ready

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def test_compose_stack_runs(docker_services: Any) -> None:
    docker_services.wait_until_responsive(
        timeout=300.0, pause=2.0, check=lambda: kafka_ready("127.0.0.1", 9092)
    )
    running = docker_services._docker_compose.execute("ps --services --status running")
    names = set(running.decode().split())
    assert {"kafka", "router", "worker"} <= names, names
