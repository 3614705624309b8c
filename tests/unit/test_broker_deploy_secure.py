"""deploy/docker-compose.secure.yml cannot be run here (no Docker engine): check it is
consistent with itself, with the base file, and with what streams/broker/secure.py
configures for ``trajectory broker start --secure`` (through ``trajectory broker certs``,
which the compose ``certs`` service runs)."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.broker.config import parse_properties
from streams.broker.container import (
    CONTAINER_SECURITY_DIR,
    ContainerBroker,
    write_container_material,
)
from streams.broker.secure import (
    ADMIN_USER,
    CLIENT_MECHANISM,
    SCRAM_MECHANISMS,
    SecureFiles,
    secure_overrides,
)
from streams.cli import build_parser
from streams.tenancy import ROLES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def secure() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.secure.yml").read_text())
    assert isinstance(data, dict)
    return data


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _certs_args(secure: dict[str, Any]) -> Any:
    """The ``certs`` service's command, parsed by the real CLI parser."""
    command = secure["services"]["certs"]["command"]
    return build_parser().parse_args(command)


@pytest.fixture
def generated(secure: dict[str, Any], tmp_path: Path) -> tuple[Path, dict[str, str], Any]:
    """Run what the certs service runs (``--out`` redirected to a temp dir)."""
    from streams.commands.broker import run

    args = _certs_args(secure)
    assert args.out == Path(CONTAINER_SECURITY_DIR)
    args.out = tmp_path
    assert run(args) == 0
    props = parse_properties((tmp_path / "server.properties").read_text())
    return tmp_path, props, args


def _listeners(value: str) -> dict[str, str]:
    return dict(item.split("://", 1) for item in value.split(","))


def test_certs_service_is_the_projects_generator(secure: dict[str, Any]) -> None:
    certs = secure["services"]["certs"]
    assert certs["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert certs["command"][:2] == ["broker", "certs"]
    mount = certs["volumes"][0].split(":")
    assert mount[:2] == ["trajectory-security", CONTAINER_SECURITY_DIR]
    assert len(mount) == 2  # read-write: it writes the material
    assert "trajectory-security" in secure["volumes"]
    # the Dockerfile makes the mount point the image user's, so a fresh volume is writable
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert CONTAINER_SECURITY_DIR in dockerfile and "--uid 10001" in dockerfile


def test_generated_broker_matches_the_local_secured_broker(
    generated: tuple[Path, dict[str, str], Any],
) -> None:
    out, props, _args = generated
    local = secure_overrides("127.0.0.1", 19092, 9093, SecureFiles(out))
    for key in (
        "authorizer.class.name",
        "allow.everyone.if.no.acl.found",
        "super.users",
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
        "inter.broker.listener.name",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.truststore.location",
        "ssl.endpoint.identification.algorithm",
    ):
        assert props[key] == local[key], key
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == f"User:{ADMIN_USER};User:ANONYMOUS"
    assert props["sasl.enabled.mechanisms"] == ",".join(SCRAM_MECHANISMS)
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    local_protocols = dict(p.split(":") for p in local["listener.security.protocol.map"].split(","))
    listeners = _listeners(props["listeners"])
    advertised = _listeners(props["advertised.listeners"])
    assert set(listeners) == set(protocols)
    assert set(advertised) == set(listeners) - {"CONTROLLER"}
    # every client listener is SASL_SSL; the controller listener is as locally
    assert {protocols[name] for name in advertised} == {"SASL_SSL"}
    assert protocols["CONTROLLER"] == local_protocols["CONTROLLER"] == "PLAINTEXT"
    assert props["inter.broker.listener.name"] in advertised
    # CONTROLLER's principal is the super user ANONYMOUS: loopback only, as locally
    assert listeners["CONTROLLER"].startswith("127.0.0.1:")
    assert props["controller.quorum.voters"] == f"1@{listeners['CONTROLLER']}"
    # each SASL listener has the admin's login for every SCRAM mechanism
    for name in advertised:
        for mech in SCRAM_MECHANISMS:
            jaas = props[f"listener.name.{name.lower()}.{mech.lower()}.sasl.jaas.config"]
            assert f'username="{ADMIN_USER}"' in jaas and "ScramLoginModule" in jaas


def test_start_script_formats_with_the_admins_scram_users_and_runs_that_config(
    generated: tuple[Path, dict[str, str], Any],
) -> None:
    out, _props, _args = generated
    script = (out / "kafka-start.sh").read_text().splitlines()
    fmt = shlex.split(next(line for line in script if "kafka-storage.sh format" in line))
    assert "--ignore-formatted" in fmt
    assert _flag(fmt, "-c") == str(out / "server.properties")
    assert _flag(fmt, "-t") == (out / "cluster.id").read_text().strip()
    password = (out / "admin.password").read_text().strip()
    scram = [fmt[i + 1] for i, arg in enumerate(fmt) if arg == "--add-scram"]
    assert scram == [f"{m}=[name={ADMIN_USER},password={password}]" for m in SCRAM_MECHANISMS]
    assert script[-1] == f"exec /opt/kafka/bin/kafka-server-start.sh {out / 'server.properties'}"
    for secret in ("kafka-start.sh", "server.properties", "admin.password", "ca.key"):
        assert stat.S_IMODE((out / secret).stat().st_mode) & 0o077 == 0, secret


def test_rerunning_certs_keeps_the_ca_passwords_and_cluster_id(tmp_path: Path) -> None:
    broker = ContainerBroker()
    write_container_material(tmp_path, broker)
    before = {
        name: (tmp_path / name).read_bytes()
        for name in ("ca.pem", "server.pem", "admin.password", "cluster.id", "kafka-start.sh")
    }
    write_container_material(tmp_path, broker)
    assert before == {name: (tmp_path / name).read_bytes() for name in before}


def test_server_certificate_names_the_compose_host(
    generated: tuple[Path, dict[str, str], Any],
) -> None:
    from cryptography import x509

    out, _props, args = generated
    pem = (out / "server.pem").read_bytes()
    cert = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE") :])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName))
    addresses = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    assert args.host in names and "127.0.0.1" in addresses


def test_kafka_service_runs_the_generated_broker(
    base: dict[str, Any], secure: dict[str, Any], generated: tuple[Path, dict[str, str], Any]
) -> None:
    out, props, _args = generated
    kafka = secure["services"]["kafka"]
    assert base["services"]["kafka"]["image"].startswith("apache/kafka:")
    assert kafka["entrypoint"] == ["/bin/bash", f"{CONTAINER_SECURITY_DIR}/kafka-start.sh"]
    assert kafka["volumes"] == [f"trajectory-security:{CONTAINER_SECURITY_DIR}:ro"]
    assert kafka["depends_on"]["certs"]["condition"] == "service_completed_successfully"
    # the user that owns the volume (the project's image user), with logs it can write
    assert kafka["user"].split(":")[0] == "10001"
    assert kafka["environment"]["LOG_DIR"].startswith("/tmp/")
    advertised = _listeners(props["advertised.listeners"])
    # containers use the same internal address as in the base file
    internal = _listeners(base["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    assert advertised[props["inter.broker.listener.name"]] == internal["INTERNAL"]
    # the host reaches the EXTERNAL listener through the base file's published port
    host_port = advertised["EXTERNAL"]
    assert f"{host_port}:{host_port.split(':')[1]}" in base["services"]["kafka"]["ports"]
    # the healthcheck logs in as admin on the internal listener
    check = kafka["healthcheck"]["test"][1]
    assert f"--bootstrap-server {internal['INTERNAL']}" in check
    assert f"--command-config {CONTAINER_SECURITY_DIR}/admin.java.properties" in check
    java = parse_properties((out / "admin.java.properties").read_text())
    assert java["security.protocol"] == "SASL_SSL"
    assert java["sasl.mechanism"] == CLIENT_MECHANISM
    assert java["ssl.truststore.location"] == str(out / "ca.pem")


def test_acl_init_creates_the_users_the_services_log_in_as(
    base: dict[str, Any], secure: dict[str, Any]
) -> None:
    services = secure["services"]
    init = services["acl-init"]
    env = init["environment"]
    assert env["TRAJECTORY_KAFKA_PROPERTIES"] == f"{CONTAINER_SECURITY_DIR}/admin.properties"
    assert env["KAFKA_BOOTSTRAP"] == base["services"]["router"]["environment"]["KAFKA_BOOTSTRAP"]
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    script = init["command"][0]
    users_line = next(line for line in script.splitlines() if line.startswith("for user in"))
    users = users_line.removeprefix("for user in").removesuffix("; do").split()
    grants = [
        shlex.split(line.strip())
        for line in script.splitlines()
        if line.strip().startswith("trajectory acl grant")
    ]
    granted = {_flag(g, "--user"): g[3] for g in grants}
    assert set(granted) == set(users) and set(granted.values()) == set(ROLES)
    assert "users=/etc/trajectory/security/users" in script
    # every role's grant parses as `trajectory acl` would take it
    for grant in grants:
        args = build_parser().parse_args(grant[1:])
        assert args.action == "grant" and args.args[0] in ROLES
        assert (args.tenant is not None) == (args.args[0] == "agent")
    for name in ("router", "worker", "otlp"):
        service = services[name]
        cred = service["environment"]
        assert cred["TRAJECTORY_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert cred["TRAJECTORY_SASL_MECHANISM"] == CLIENT_MECHANISM
        assert cred["TRAJECTORY_SASL_MECHANISM"] in SCRAM_MECHANISMS
        assert cred["TRAJECTORY_SSL_CA_FILE"] == f"{CONTAINER_SECURITY_DIR}/ca.pem"
        user = cred["TRAJECTORY_SASL_USERNAME"]
        assert granted[user] == "service", name
        assert cred["TRAJECTORY_SASL_PASSWORD_FILE"] == (
            f"{CONTAINER_SECURITY_DIR}/users/{user}.password"
        )
        assert f"trajectory-security:{CONTAINER_SECURITY_DIR}:ro" in service["volumes"]
        assert service["depends_on"]["acl-init"]["condition"] == "service_completed_successfully"
        assert name in base["services"]  # an override of an existing service


def test_readme_says_the_secured_stack_is_untested() -> None:
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("## Secured stack") :]
    section = section[: section.index("\n## ", 1)]
    assert "docker-compose.secure.yml" in section
    assert "**Untested:**" in section and "without a\nDocker engine" in section
