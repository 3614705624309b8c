"""Kafka for integration tests: a real broker, never a mock.

``kafka_bootstrap`` (session) is, in order of preference:

1. under ``pytest --docker``: the ``kafka`` service of ``deploy/docker-compose.yml``
   (pytest-docker brings it up and tears it down);
2. ``$KAFKA_BOOTSTRAP`` if set (it must answer, else the tests fail: a set but dead
   address is a broken environment, not a reason to skip);
3. under pytest-xdist (``make test`` runs ``-n 2``): one broker shared by all xdist
   workers of the run, started by the first worker that needs it (a file lock in
   ``$TRAJECTORY_TEST_SHARED_DIR``, which the controller creates in
   ``tests/conftest.py``) and stopped by the controller when the run ends; set
   ``TRAJECTORY_TEST_BROKER_PER_WORKER=1`` to give each xdist worker its own instead;
4. otherwise a :class:`~streams.broker.LocalBroker` started for this session on
   free ports in a temporary directory, stopped when the session ends.

Tests that restart, stop or secure a broker start their own (``secure_kafka``,
test_broker_lifecycle.py), never touching the shared one.

Isolation between tests (and between engineers sharing one broker) comes from
``topic_prefix``: unique per test, so no test ever sees another's topics.  On a
``$KAFKA_BOOTSTRAP`` broker, which outlives the run, each test's topics are deleted
when it ends (``_reap_test_processes``); the suite's own brokers go with the run.

The session broker does not auto-create topics (code under test must create what
it uses); set ``TRAJECTORY_TEST_BROKER_AUTO_CREATE=1`` to turn that on.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from procs import Pipeline, RouterProc, WorkerProc, reap_processes

from streams.broker import LocalBroker, ensure_jars, free_ports, kafka_ready, parse_bootstrap
from streams.errors import BrokerError
from streams.settings import Settings

DOCKER_BOOTSTRAP = "127.0.0.1:9092"
START_ATTEMPTS = 3


def _session_broker(base: Path) -> LocalBroker:
    """Start a broker on fresh free ports; retry if another process grabbed a port."""
    ensure_jars()  # outside the retry loop: a missing mvn must fail once, clearly
    auto_create = os.environ.get("TRAJECTORY_TEST_BROKER_AUTO_CREATE", "") in ("1", "true")
    errors: list[str] = []
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = free_ports(2)
        broker = LocalBroker(
            base / f"broker-{attempt}",
            port=ports[0],
            controller_port=ports[1],
            auto_create_topics=auto_create,
        )
        try:
            broker.start()
        except BrokerError as exc:
            errors.append(f"attempt {attempt}: {exc}")
            continue
        return broker
    raise BrokerError("could not start the session's Kafka broker:\n" + "\n".join(errors))


SHARED_DIR_ENV = "TRAJECTORY_TEST_SHARED_DIR"
PER_WORKER_ENV = "TRAJECTORY_TEST_BROKER_PER_WORKER"


def _shared_broker_bootstrap(shared: Path) -> str:
    """The run's shared broker: started by the first xdist worker that asks (under a
    file lock), recorded in ``kafka.json``; the controller stops it at the end
    (``pytest_unconfigure`` in tests/conftest.py)."""
    record = shared / "kafka.json"
    with FileLock(str(shared / "kafka.lock")):
        if record.exists():
            info = json.loads(record.read_text())
        else:
            broker = _session_broker(shared / "kafka")
            info = {"bootstrap": broker.bootstrap, "data_dir": str(broker.data_dir)}
            record.write_text(json.dumps(info))
    host, port = parse_bootstrap(info["bootstrap"])
    if not kafka_ready(host, port, timeout_s=10.0):
        raise BrokerError(f"the run's shared broker ({info}) does not answer: see its log")
    return str(info["bootstrap"])


@pytest.fixture(scope="session")
def kafka_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """``host:port`` of a Kafka 3.9 broker that answers (see the module docstring)."""
    if request.config.getoption("--docker"):
        services = request.getfixturevalue("docker_services")
        host, port = parse_bootstrap(DOCKER_BOOTSTRAP)
        services.wait_until_responsive(
            timeout=180.0, pause=1.0, check=lambda: kafka_ready(host, port)
        )
        yield DOCKER_BOOTSTRAP
        return
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        host, port = parse_bootstrap(env)
        if not kafka_ready(host, port, timeout_s=5.0):
            pytest.fail(
                f"KAFKA_BOOTSTRAP={env} is set but no Kafka broker answers there: start one "
                "(`trajectory broker start`) or unset it to let the suite start its own",
                pytrace=False,
            )
        yield env
        return
    shared = os.environ.get(SHARED_DIR_ENV)
    if shared and os.environ.get(PER_WORKER_ENV, "") not in ("1", "true"):
        yield _shared_broker_bootstrap(Path(shared))
        return
    broker = _session_broker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(autouse=True)
def _reap_test_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Teardown that always runs: stop any router or worker (started through
    tests/integration/procs.py) that the test left running, e.g. a router whose
    worker failed to start, or processes of a test that failed before its
    ``finally``.  Leftovers of a test are named in a warning.

    Then, on a broker that outlives the run (``$KAFKA_BOOTSTRAP``: a developer's
    ``trajectory broker start``), delete the test's topics (:func:`_delete_topics_of`).
    """
    yield
    left = reap_processes()
    if left:
        warnings.warn(f"processes left running by the test, now stopped: {left}", stacklevel=1)
    prefix = getattr(request.node, "funcargs", {}).get("topic_prefix")
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if prefix and bootstrap and not request.config.getoption("--docker"):
        _delete_topics_of(bootstrap, prefix)


def _delete_topics_of(bootstrap: str, prefix: str) -> None:
    """Delete ``<prefix>.*`` and ``<prefix>-*`` (the worker's changelogs) on ``bootstrap``.

    Why: the suite's own brokers are thrown away with the run, a developer's broker
    is not.  Each test leaves 20-30 topics there (one prefix per test), and after a
    few runs of the suite or a test loop it held thousands: a full metadata response
    (the router's topic discovery every 3 s) grows with them, and bench_latency.py on
    that broker gave twice the p99 of a clean one (418 against 215 ms; docs/
    benchmarks.md).  A failed deletion is a warning, not a test failure.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        names = [
            t
            for t in admin.list_topics(timeout=10).topics
            if t.startswith((prefix + ".", prefix + "-"))
        ]
        if names:
            for future in admin.delete_topics(names, operation_timeout=30).values():
                future.result(timeout=60)
    except Exception as exc:  # cleanup: reported as a warning, the test's outcome stands
        warnings.warn(f"could not delete the topics of test prefix {prefix}: {exc}", stacklevel=1)


@pytest.fixture
def start_worker(settings: Settings, tmp_path: Path) -> Callable[..., WorkerProc]:
    """``start_worker(name="data", **kw)``: a :class:`procs.WorkerProc` on this test's
    settings with its data dir ``tmp_path/name`` (``kw``: ``store``, ``extra``,
    ``port``).  Stopped at teardown if the test did not stop it."""

    def start(name: str = "data", **kw: Any) -> WorkerProc:
        return WorkerProc(settings, tmp_path / name, **kw)

    return start


@pytest.fixture
def start_router(settings: Settings, tmp_path: Path) -> Callable[..., RouterProc]:
    """``start_router(*flags, log="router.log")``: a :class:`procs.RouterProc` on this
    test's settings.  Stopped at teardown if the test did not stop it."""

    def start(*flags: str, log: str = "router.log") -> RouterProc:
        return RouterProc(settings, tmp_path / log, *flags)

    return start


@pytest.fixture
def pipeline(
    start_worker: Callable[..., WorkerProc], start_router: Callable[..., RouterProc]
) -> Iterator[Pipeline]:
    """The worker (it creates the topics first) and then the router, for this test.

    Teardown always runs and checks what the tests used to check in their
    ``finally``: the router is stopped first (SIGTERM commits its open transaction),
    then the worker, which must exit 0 after a SIGTERM (its log tail is shown if not).
    """
    worker = start_worker()
    router = start_router()
    try:
        yield Pipeline(worker, router)
    finally:
        router.stop()
        code = worker.stop()
    assert code == 0, worker.log_tail()


@pytest.fixture
def topic_prefix() -> str:
    """Unique per test; valid as ``Settings.prefix`` and as a topic name part."""
    return "t" + uuid.uuid4().hex[:16]


@pytest.fixture
def settings(kafka_bootstrap: str, topic_prefix: str) -> Settings:
    """Settings pointing at the test broker with this test's own prefix."""
    return Settings(bootstrap=kafka_bootstrap, prefix=topic_prefix, events_partitions=3)


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> Any:
    """A confluent-kafka ``AdminClient`` for the test broker."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


CreateTopics = Callable[..., list[str]]


@pytest.fixture
def create_topics(admin: Any) -> CreateTopics:
    """``create_topics(name, ..., partitions=1, config=None)``: create and wait.

    Raises if the broker refuses (an existing topic is an error too: prefixes are
    unique, so a clash means a test bug).
    """
    from confluent_kafka.admin import NewTopic

    def create(
        *names: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> list[str]:
        topics = [
            NewTopic(n, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
            for n in names
        ]
        futures = admin.create_topics(topics, operation_timeout=30, request_timeout=30)
        for future in futures.values():
            future.result(timeout=60)
        return list(names)

    return create


# -- the secured broker (issue #10): one per test session, started on first use ------------


class SecureKafka:
    """A ``LocalBroker(secure=True)``: SASL_SSL + SCRAM + the StandardAuthorizer.

    ``credential(user)`` creates (once) a SCRAM user with a random password and
    returns its :class:`~streams.security.SecurityConfig`; ``admin_security`` is the
    super user's.  ``env(config)`` is the environment a subprocess needs to use it.
    """

    def __init__(self, broker: LocalBroker) -> None:
        from streams.security import SecurityConfig

        self.broker = broker
        self.bootstrap = broker.bootstrap
        #: the SSL listener that requires a client certificate (mTLS)
        self.mtls_bootstrap = f"{broker.config.host}:{broker.ssl_port}"
        self.files = broker.security_files
        self.admin_security = SecurityConfig.from_sources(
            {"properties_file": str(self.files.admin_properties)}, environ={}
        )
        self._users: dict[str, Any] = {}

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        from streams.security import client_config

        return AdminClient(
            {"bootstrap.servers": self.bootstrap, **client_config(self.admin_security)}
        )

    def credential(self, user: str) -> Any:
        import secrets

        from streams.commands.acl import add_user
        from streams.security import SecurityConfig

        if user not in self._users:
            password = secrets.token_urlsafe(18)
            add_user(self.admin(), user, password)
            self._users[user] = SecurityConfig(
                protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512",
                username=user,
                password=password,
                ca_file=str(self.files.ca_cert),
            )
        return self._users[user]

    def client_certificate(self, cn: str, where: Path) -> Any:
        """An mTLS :class:`~streams.security.SecurityConfig` for ``User:<cn>``."""
        from streams.broker.secure import issue_certificate
        from streams.security import SecurityConfig

        key_pem, cert_pem = issue_certificate(self.files, cn, client=True)
        (where / f"{cn}.key").write_bytes(key_pem)
        (where / f"{cn}.pem").write_bytes(cert_pem)
        return SecurityConfig(
            protocol="SSL",
            ca_file=str(self.files.ca_cert),
            cert_file=str(where / f"{cn}.pem"),
            key_file=str(where / f"{cn}.key"),
        )

    @staticmethod
    def env(config: Any) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items() if not k.startswith("TRAJECTORY_S")}
        out.pop("TRAJECTORY_KAFKA_PROPERTIES", None)
        out.update(
            {
                "TRAJECTORY_SECURITY_PROTOCOL": config.protocol,
                "TRAJECTORY_SASL_MECHANISM": config.sasl_mechanism or "",
                "TRAJECTORY_SASL_USERNAME": config.username or "",
                "TRAJECTORY_SASL_PASSWORD": config.password or "",
                "TRAJECTORY_SSL_CA_FILE": config.ca_file or "",
            }
        )
        return out


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """One secured broker for the whole session (started on first use, ~10 s)."""
    ensure_jars()
    base = tmp_path_factory.mktemp("kafka-secure")
    errors: list[str] = []
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = free_ports(3)
        broker = LocalBroker(
            base / f"broker-{attempt}",
            port=ports[0],
            controller_port=ports[1],
            secure=True,
            ssl_port=ports[2],
        )
        try:
            broker.start()
        except BrokerError as exc:
            errors.append(f"attempt {attempt}: {exc}")
            continue
        try:
            yield SecureKafka(broker)
        finally:
            broker.stop()
        return
    raise BrokerError("could not start the secured Kafka broker:\n" + "\n".join(errors))
