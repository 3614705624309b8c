"""Suite-wide options, marks and fixtures.

* Everything under ``tests/integration/`` is marked ``integration`` automatically
  (it needs a Kafka broker: see ``tests/integration/conftest.py``).  Deselect with
  ``-m 'not integration'`` for a quick unit run.
* ``--docker`` runs the tests marked ``docker`` against ``deploy/docker-compose.yml``
  through pytest-docker (opt-in; skipped with the reason when no Docker engine
  answers ``docker info``).  Without ``--docker`` those tests are skipped.
* Under pytest-xdist (``make test`` passes ``-n``) the controller makes one
  directory for the run, ``$TRAJECTORY_TEST_SHARED_DIR``, inherited by the xdist
  workers: the first worker that needs Kafka starts the run's one broker there
  (tests/integration/conftest.py) and the controller stops it when the run ends.
* ``trajdata_dir``: the shared real-trajectory corpus (``$TRAJDATA_DIR`` or
  ``<repo>/../shared/trajdata``); tests using it skip cleanly when it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from xdist_scopes import make_scheduler

REPO_ROOT = Path(__file__).resolve().parents[1]
INTEGRATION_DIR = REPO_ROOT / "tests" / "integration"
COMPOSE_FILE = REPO_ROOT / "deploy" / "docker-compose.yml"
SHARED_DIR_ENV = "TRAJECTORY_TEST_SHARED_DIR"
_SHARED_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (make test): one work unit per integration module (its
    module-scoped fixtures run once per run), heavy units first: see
    tests/xdist_scopes.py for why xdist's own ``xdist_group`` is not used."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return None
    return make_scheduler(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trajectory-streams")
    group.addoption(
        "--docker",
        action="store_true",
        default=False,
        help="run against deploy/docker-compose.yml (pytest-docker) instead of a local broker; "
        "needs a running Docker engine",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject; repeated so a run with another ini still knows them.
    config.addinivalue_line("markers", "integration: needs a real Kafka broker")
    config.addinivalue_line("markers", "docker: runs against deploy/docker-compose.yml (--docker)")
    global _CONTROLLER
    _CONTROLLER = _is_xdist_controller(config)
    if _CONTROLLER and SHARED_DIR_ENV not in os.environ:
        # set before the xdist workers start, so they inherit it
        shared = tempfile.mkdtemp(prefix="trajectory-tests-")
        os.environ[SHARED_DIR_ENV] = shared
        config.stash[_SHARED_DIR] = Path(shared)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Controller: stop the run's shared broker (if a worker started one), clean up."""
    shared = config.stash.get(_SHARED_DIR, None)
    if shared is None:
        return
    os.environ.pop(SHARED_DIR_ENV, None)
    record = shared / "kafka.json"
    try:
        if record.exists():
            from streams.broker import LocalBroker

            LocalBroker(json.loads(record.read_text())["data_dir"]).stop()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _is_xdist_controller(config: pytest.Config) -> bool:
    """True in the process that distributes tests to xdist workers (``-n N``, N > 0)."""
    if hasattr(config, "workerinput"):  # an xdist worker
        return False
    return (
        bool(getattr(config.option, "numprocesses", None))
        and getattr(config.option, "dist", "no") != "no"
    )


def docker_unavailable_reason() -> str | None:
    """None if a Docker engine answers, else why not (shown as the skip reason)."""
    docker = shutil.which("docker")
    if docker is None:
        return "--docker: the docker CLI is not on PATH"
    try:
        proc = subprocess.run(
            [docker, "info"], capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired:
        return "--docker: `docker info` did not answer within 20s"
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return f"--docker: no Docker engine answers `docker info` ({last[0]})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    docker_requested = bool(config.getoption("--docker"))
    docker_skip: pytest.MarkDecorator | None = None
    if docker_requested:
        reason = docker_unavailable_reason()
        if reason is not None:
            docker_skip = pytest.mark.skip(reason=reason)
    else:
        docker_skip = pytest.mark.skip(reason="docker tests are opt-in: run pytest --docker")
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)
        if docker_skip is not None and item.get_closest_marker("docker") is not None:
            item.add_marker(docker_skip)
    if docker_requested and docker_skip is not None:
        # Under --docker every Kafka-backed test would otherwise fall back silently.
        for item in items:
            if item.get_closest_marker("integration") is not None:
                item.add_marker(docker_skip)


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    """pytest-docker: the compose file users run (only requested under --docker)."""
    return str(COMPOSE_FILE)


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    """pytest-docker: a fixed project name per checkout, so `docker compose ps` finds it."""
    return "trajectory-streams-test"


@pytest.fixture(scope="session")
def trajdata_dir() -> Path:
    """The shared corpus of real agent trajectories; skips when it is absent."""
    env = os.environ.get("TRAJDATA_DIR")
    path = Path(env) if env else REPO_ROOT / ".." / "shared" / "trajdata"
    if not path.is_dir():
        pytest.skip(f"real trajectories not available at {path} (set TRAJDATA_DIR)")
    return path.resolve()


TIMELINE_ENV = "TRAJECTORY_TEST_TIMELINE"
_CONTROLLER = False  # set by pytest_configure in the xdist controller


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """With ``$TRAJECTORY_TEST_TIMELINE`` set to a file: append ``<end epoch s> <xdist
    worker> <node id>`` when a test (setup, call, teardown) ends, so a run shows
    which unit ended last and what each xdist worker did (docs/testing.md).  The
    durations report cannot tell: it has no clock time and no worker."""
    path = os.environ.get(TIMELINE_ENV)
    if path and not _CONTROLLER:  # the controller sees every test again: not twice
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        with open(path, "a", encoding="utf-8") as f:  # one short line: atomic append
            f.write(f"{time.time():.3f} {worker} {nodeid}\n")


def pytest_report_header(config: pytest.Config) -> str:
    """Say which Kafka the integration tests will use, before anything runs."""
    if config.getoption("--docker"):
        return "kafka: deploy/docker-compose.yml via pytest-docker (--docker)"
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        return f"kafka: KAFKA_BOOTSTRAP={env}"
    return "kafka: a LocalBroker (Kafka 3.9.1, KRaft) started for the session on free ports"
