"""The secured variant of the local broker: SASL_SSL + SCRAM + ACLs (``--secure``).

Everything lives in ``<data_dir>/security/`` and is made once, then reused (the
KRaft metadata log keeps the SCRAM users, so the admin password must outlive a
restart):

* ``ca.pem`` / ``ca.key``: a self-signed CA (10 years, EC P-256);
* ``server.pem``: the broker's key + certificate (SAN ``127.0.0.1``, ``localhost``
  and the configured host), signed by the CA; Kafka reads it as a PEM keystore;
* ``admin.password`` (mode 0600) and ``admin.properties``: the super user's
  librdkafka client properties (``--kafka-properties`` / ``TRAJECTORY_KAFKA_PROPERTIES``
  accepts it as is).

Listeners: ``SASL_SSL`` on the client port (SCRAM-SHA-256 and SCRAM-SHA-512; the
broker talks to itself over it as ``admin``), and the KRaft ``CONTROLLER`` listener
(PLAINTEXT, on 127.0.0.1 only: its principal is ``User:ANONYMOUS``, which must be a
super user for the controller to work; no client API is served there).  The
``StandardAuthorizer`` denies everything that no ACL allows
(``allow.everyone.if.no.acl.found=false``), ``admin`` is the only other super user.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.errors import BrokerError

ADMIN_USER = "admin"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SecureFiles:
    """Paths of the secured broker's material under ``<data_dir>/security``."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def server_pem(self) -> Path:
        return self.root / "server.pem"

    @property
    def admin_password_file(self) -> Path:
        return self.root / "admin.password"

    @property
    def admin_properties(self) -> Path:
        return self.root / "admin.properties"

    def admin_password(self) -> str:
        return self.admin_password_file.read_text(encoding="utf-8").strip()

    def exists(self) -> bool:
        return all(
            p.is_file()
            for p in (self.ca_cert, self.ca_key, self.server_pem, self.admin_password_file)
        )


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(cn: str) -> object:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trajectory-streams local broker"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def issue_certificate(
    files: SecureFiles, cn: str, *, hosts: tuple[str, ...] = (), client: bool = False
) -> tuple[bytes, bytes]:
    """(key PEM, certificate PEM) signed by the local CA: a server or an mTLS client cert."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))  # type: ignore[arg-type]
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH]
                if client
                else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def ensure_material(files: SecureFiles, host: str) -> SecureFiles:
    """Create the CA, the server certificate and the admin password once; reuse after."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    files.root.mkdir(parents=True, exist_ok=True)
    if not (files.ca_cert.is_file() and files.ca_key.is_file()):
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = _name("trajectory-streams local CA")
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)  # type: ignore[arg-type]
            .issuer_name(name)  # type: ignore[arg-type]
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        _write_private(
            files.ca_key,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        files.ca_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files.server_pem.unlink(missing_ok=True)
    if not files.server_pem.is_file():
        hosts = tuple(dict.fromkeys((host, "127.0.0.1", "localhost")))
        key_pem, cert_pem = issue_certificate(files, "localhost", hosts=hosts)
        _write_private(files.server_pem, key_pem + cert_pem)
    if not files.admin_password_file.is_file():
        _write_private(files.admin_password_file, secrets.token_urlsafe(24).encode() + b"\n")
    files.admin_properties.write_text(
        "# librdkafka client properties of the local secured broker's super user.\n"
        "# Use: --kafka-properties THIS_FILE (or TRAJECTORY_KAFKA_PROPERTIES=THIS_FILE)\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={CLIENT_MECHANISM}\n"
        f"sasl.username={ADMIN_USER}\n"
        f"sasl.password={files.admin_password()}\n"
        f"ssl.ca.location={files.ca_cert}\n",
        encoding="utf-8",
    )
    os.chmod(files.admin_properties, 0o600)
    return files


def _jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


def secure_overrides(
    host: str, port: int, controller_port: int, files: SecureFiles, ssl_port: int | None = None
) -> dict[str, str]:
    """``server.properties`` entries that turn the plaintext broker into the secured one.

    ``ssl_port``: also an ``SSL`` listener that requires a client certificate (mTLS)
    signed by the local CA; the principal is the certificate's CN (``User:<CN>``).
    """
    password = files.admin_password()
    mtls = f",SSL://{host}:{ssl_port}" if ssl_port else ""
    props = {
        "listeners": f"SASL_SSL://{host}:{port}{mtls},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{host}:{port}{mtls}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^.*CN=([^,]+).*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": CLIENT_MECHANISM,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.server_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca_cert),
        "ssl.endpoint.identification.algorithm": "https",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
    }
    for mech in SCRAM_MECHANISMS:
        props[f"listener.name.sasl_ssl.{mech.lower()}.sasl.jaas.config"] = _jaas(
            ADMIN_USER, password
        )
    return props


def scram_format_args(files: SecureFiles) -> list[str]:
    """``kafka-storage format`` arguments creating the admin's SCRAM credentials."""
    password = files.admin_password()
    args: list[str] = []
    for mech in SCRAM_MECHANISMS:
        args += ["--add-scram", f"{mech}=[name={ADMIN_USER},password={password}]"]
    return args


def admin_client_config(bootstrap: str, files: SecureFiles) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": CLIENT_MECHANISM,
        "sasl.username": ADMIN_USER,
        "sasl.password": files.admin_password(),
        "ssl.ca.location": str(files.ca_cert),
    }


def secure_ready(host: str, port: int, files: SecureFiles, timeout_s: float = 2.0) -> bool:
    """True if the SASL_SSL listener logs ``admin`` in and lists a broker."""
    if not files.exists():
        return False
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise BrokerError("--secure needs confluent-kafka to probe the broker") from exc
    from streams.broker.probe import port_in_use

    if not port_in_use(host, port):
        return False  # nothing listens yet: no client needed to know that
    conf: dict[str, Any] = dict(admin_client_config(f"{host}:{port}", files))
    conf["log_level"] = 0
    conf["error_cb"] = lambda err: None  # "not up yet" is the expected answer of a probe
    conf["socket.connection.setup.timeout.ms"] = max(1000, int(timeout_s * 1000))
    try:
        md = AdminClient(conf).list_topics(timeout=timeout_s)
    except Exception:  # any failure means "not answering (yet)"
        return False
    return len(md.brokers) > 0


__all__ = [
    "ADMIN_USER",
    "CLIENT_MECHANISM",
    "SCRAM_MECHANISMS",
    "SecureFiles",
    "admin_client_config",
    "ensure_material",
    "issue_certificate",
    "scram_format_args",
    "secure_overrides",
    "secure_ready",
]
