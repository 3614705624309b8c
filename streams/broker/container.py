"""The secured broker in a container: what ``trajectory broker certs`` writes.

``deploy/docker-compose.secure.yml`` runs the same secured single-node KRaft broker
as ``trajectory broker start --secure``, from the same code: a one-shot ``certs``
service runs ``trajectory broker certs --out /etc/trajectory/security --host kafka``,
which writes into a volume shared with the other services

* the material of :func:`streams.broker.secure.ensure_material` (``ca.pem``,
  ``ca.key``, ``server.pem`` with SANs ``kafka``, ``127.0.0.1``, ``localhost``,
  ``admin.password``, ``admin.properties`` for the project's clients);
* ``server.properties``: :func:`streams.broker.config.server_properties` plus
  :func:`streams.broker.secure.secure_overrides` (authorizer, super users, SCRAM
  mechanisms, PEM key/trust stores), with the listeners a container needs: the
  ``SASL_SSL`` listener of ``secure_overrides`` on ``0.0.0.0:<internal>``
  advertised as ``<host>:<internal>`` (other containers, and the broker itself),
  a second SASL_SSL listener ``EXTERNAL`` advertised as ``127.0.0.1:<external>``
  (the host, through the published port), and the ``CONTROLLER`` listener on
  127.0.0.1 only, as locally: its principal is the super user ``User:ANONYMOUS``,
  so it must not be reachable from the network;
* ``admin.java.properties``: the admin login for Kafka's own Java tools (the
  compose healthcheck runs ``kafka-broker-api-versions.sh --command-config`` with it);
* ``kafka-start.sh``: formats the storage with the admin's SCRAM credentials
  (:func:`streams.broker.secure.scram_format_args`, ``--ignore-formatted``) and
  execs ``kafka-server-start.sh`` on that ``server.properties``: the compose
  ``kafka`` service runs it instead of the image's env-var entrypoint, whose
  SSL checks want JKS keystores.

Invariant: files are made once and reused (the CA, the passwords and the cluster
id survive a rerun of the ``certs`` service); ``server.properties`` and the script
are rewritten from them on every run.  Secrets are mode 0600.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from streams.broker.config import (
    BrokerConfig,
    random_cluster_id,
    render_properties,
    server_properties,
)
from streams.broker.secure import (
    ADMIN_USER,
    CLIENT_MECHANISM,
    SCRAM_MECHANISMS,
    SecureFiles,
    _jaas,
    _write_private,
    ensure_material,
    scram_format_args,
    secure_overrides,
)

#: Where the compose services mount the material (the same path in every container).
CONTAINER_SECURITY_DIR = "/etc/trajectory/security"
#: Kafka's install dir in the ``apache/kafka`` image.
KAFKA_HOME = "/opt/kafka"
EXTERNAL_LISTENER = "EXTERNAL"


@dataclass(frozen=True)
class ContainerBroker:
    """How the containerised secured broker listens (defaults: deploy/docker-compose.yml)."""

    host: str = "kafka"
    internal_port: int = 19092
    external_port: int = 9092
    external_host: str = "127.0.0.1"
    controller_port: int = 9093
    data_dir: str = "/tmp/trajectory-kafka"


def container_properties(files: SecureFiles, broker: ContainerBroker) -> dict[str, str]:
    """``server.properties`` of the secured broker in a container (see the module doc)."""
    cfg = BrokerConfig(
        Path(broker.data_dir),
        port=broker.internal_port,
        controller_port=broker.controller_port,
        host="127.0.0.1",  # controller.quorum.voters: the controller is this process
    )
    props = server_properties(cfg)
    props.update(secure_overrides("127.0.0.1", broker.internal_port, broker.controller_port, files))
    del props["listener.name.ssl.ssl.client.auth"]  # no mTLS listener here
    props["listeners"] = (
        f"SASL_SSL://0.0.0.0:{broker.internal_port},"
        f"{EXTERNAL_LISTENER}://0.0.0.0:{broker.external_port},"
        f"CONTROLLER://127.0.0.1:{broker.controller_port}"
    )
    props["advertised.listeners"] = (
        f"SASL_SSL://{broker.host}:{broker.internal_port},"
        f"{EXTERNAL_LISTENER}://{broker.external_host}:{broker.external_port}"
    )
    props["listener.security.protocol.map"] = (
        f"SASL_SSL:SASL_SSL,{EXTERNAL_LISTENER}:SASL_SSL,CONTROLLER:PLAINTEXT"
    )
    for mech in SCRAM_MECHANISMS:
        props[f"listener.name.{EXTERNAL_LISTENER.lower()}.{mech.lower()}.sasl.jaas.config"] = _jaas(
            ADMIN_USER, files.admin_password()
        )
    return props


def admin_java_properties(files: SecureFiles) -> dict[str, str]:
    """The admin's login for Kafka's Java command-line tools (``--command-config``)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": CLIENT_MECHANISM,
        "sasl.jaas.config": _jaas(ADMIN_USER, files.admin_password()),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca_cert),
    }


def start_script(files: SecureFiles, cluster_id: str) -> str:
    """Format (with the admin's SCRAM credentials, once) and run the broker."""
    props = files.root / "server.properties"
    fmt = [
        f"{KAFKA_HOME}/bin/kafka-storage.sh",
        "format",
        "--ignore-formatted",
        "-t",
        cluster_id,
        "-c",
        str(props),
        *scram_format_args(files),
    ]
    return (
        "#!/bin/bash\n"
        "# Generated by `trajectory broker certs` (streams/broker/container.py); rewritten\n"
        "# on every run.  Holds the admin password: mode 0600.\n"
        "set -euo pipefail\n"
        f"{shlex.join(fmt)}\n"
        f"exec {KAFKA_HOME}/bin/kafka-server-start.sh {shlex.quote(str(props))}\n"
    )


def write_container_material(out: Path, broker: ContainerBroker) -> SecureFiles:
    """Everything the compose services need, in ``out`` (see the module doc)."""
    files = ensure_material(SecureFiles(out), broker.host)
    cluster = out / "cluster.id"
    if not cluster.is_file():
        cluster.write_text(random_cluster_id() + "\n", encoding="utf-8")
    header = "Generated by `trajectory broker certs` (streams/broker/container.py)."
    _write_private(
        out / "server.properties",
        render_properties(container_properties(files, broker), header).encode(),
    )
    _write_private(
        out / "admin.java.properties",
        render_properties(admin_java_properties(files), header).encode(),
    )
    script = out / "kafka-start.sh"
    cluster_id = cluster.read_text(encoding="utf-8").strip()
    _write_private(script, start_script(files, cluster_id).encode())
    os.chmod(script, 0o700)
    return files


__all__ = [
    "CONTAINER_SECURITY_DIR",
    "EXTERNAL_LISTENER",
    "KAFKA_HOME",
    "ContainerBroker",
    "admin_java_properties",
    "container_properties",
    "start_script",
    "write_container_material",
]
