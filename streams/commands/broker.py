"""Obtain and run a local single-node Kafka 3.9.1 (KRaft, no ZooKeeper) on 127.0.0.1.

The first `start` downloads Kafka's jars from Maven Central with `mvn` (once;
cached under .cache/kafka/3.9.1, or $TRAJECTORY_CACHE_DIR), formats a data dir
and starts the broker in the background.  Everything it writes lives in the data
dir (default .cache/broker): server.properties, data/, logs/server.log, broker.json.

Examples:
  trajectory broker start                      # 127.0.0.1:9092, prints the bootstrap
  export KAFKA_BOOTSTRAP=127.0.0.1:9092        # what every other command reads
  trajectory broker status                     # exit 0 only if it runs AND answers
  trajectory broker stop                       # SIGTERM, then SIGKILL after --timeout
  trajectory broker start --port 19092 --controller-port 19093 --data-dir /tmp/k2
  trajectory broker start --foreground         # logs to the terminal, Ctrl-C stops
  trajectory broker fetch                      # only download the jars (e.g. in CI)
  trajectory broker start --secure --data-dir .cache/broker-secure --port 9094 \
      --controller-port 9095                   # SASL_SSL + SCRAM + ACLs (docs/security.md)
  trajectory broker certs --out DIR --host kafka   # the same secured broker's CA, certificate,
      # admin login, server.properties and start script for a container
      # (deploy/docker-compose.secure.yml runs this in its one-shot `certs` service)

Topics are NOT auto-created (every process here creates its own topics); pass
--auto-create-topics for third-party tools that rely on it.

The JVM heap is 1g ($TRAJECTORY_BROKER_HEAP, e.g. 2g): at 512m a broker that had
seen ~20,000 topics created and deleted (benchmarks make 1,000 per run) died of
java.lang.OutOfMemoryError after 95 minutes.  The collector is G1 (20 ms pause goal);
$TRAJECTORY_BROKER_JVM_OPTS adds JVM flags after ours, e.g. '-Xlog:gc:file=/tmp/gc.log'
for a GC log, or '-XX:+UseParallelGC' for ~10 % less broker CPU with longer pauses
(docs/kafka-notes.md "Broker: the collector").
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("start", "stop", "status", "fetch", "certs"),
        help="start | stop | status | fetch (download the jars only) | certs (the secured "
        "broker's material for a container, into --out)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("TRAJECTORY_BROKER_PORT", "9092")),
        help="client (PLAINTEXT) port on 127.0.0.1 (default 9092, env TRAJECTORY_BROKER_PORT)",
    )
    parser.add_argument(
        "--controller-port",
        type=int,
        default=int(os.environ.get("TRAJECTORY_BROKER_CONTROLLER_PORT", "9093")),
        help="KRaft controller port on 127.0.0.1 (default 9093)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the broker keeps config, data, logs and its state file "
        "(default .cache/broker, or $TRAJECTORY_CACHE_DIR/broker)",
    )
    parser.add_argument(
        "--foreground",
        action="store_true",
        help="start: stay attached and log to the terminal until Ctrl-C",
    )
    parser.add_argument(
        "--auto-create-topics",
        action="store_true",
        help="start: let the broker create topics on first use (off by default)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="start: a SASL_SSL listener (SCRAM users, a self-signed CA and server certificate "
        "in <data-dir>/security) with the StandardAuthorizer and ACLs; clients connect with "
        "--kafka-properties <data-dir>/security/admin.properties (see docs/security.md)",
    )
    parser.add_argument(
        "--ssl-port",
        type=int,
        default=None,
        help="with --secure: also an SSL listener on this port that requires a client "
        "certificate signed by <data-dir>/security/ca.pem (mTLS; principal = the CN)",
    )
    certs = parser.add_argument_group("certs (deploy/docker-compose.secure.yml)")
    certs.add_argument(
        "--out", type=Path, help="certs: the directory to write (made once, reused after)"
    )
    certs.add_argument(
        "--host",
        default="kafka",
        help="certs: the broker's host name for other containers (advertised, and in the "
        "certificate with 127.0.0.1 and localhost; default kafka)",
    )
    certs.add_argument(
        "--internal-port",
        type=int,
        default=19092,
        help="certs: the SASL_SSL listener other containers use (default 19092)",
    )
    certs.add_argument(
        "--external-port",
        type=int,
        default=9092,
        help="certs: the SASL_SSL listener advertised as 127.0.0.1 for the host (default 9092)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to wait for start (default 120) or for a clean stop (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    from streams.broker import LocalBroker, ensure_jars
    from streams.broker.local import DEFAULT_START_TIMEOUT_S, DEFAULT_STOP_TIMEOUT_S

    if args.action == "certs":
        return _certs(args)
    if args.action == "fetch":
        started = time.monotonic()
        libs = ensure_jars(quiet=False)
        print(f"Kafka jars ready in {libs} ({time.monotonic() - started:.1f}s)")
        return 0

    broker = LocalBroker(
        args.data_dir,
        args.port,
        args.controller_port,
        auto_create_topics=args.auto_create_topics,
        # None: as this data dir was last started (its server.properties says)
        secure=True if args.secure else None,
        ssl_port=args.ssl_port,
    )
    if args.action == "start" and not args.secure and not broker.status().running:
        broker.secure = False  # a fresh start without --secure is the plaintext broker
    if args.action == "start":
        timeout = args.timeout or DEFAULT_START_TIMEOUT_S
        if args.foreground:
            return broker.run_foreground(timeout)
        before = broker.status()
        if before.running:
            print(f"already running: {before.message}")
            print(f"KAFKA_BOOTSTRAP={before.bootstrap}")
            return 0
        if before.condition == "stale":
            print(f"note: {before.message}", file=sys.stderr)
        started = time.monotonic()
        status = broker.start(timeout)
        print(
            f"started Kafka 3.9.1 in {time.monotonic() - started:.1f}s: {status.message}; "
            f"logs in {broker.config.logs_dir}"
        )
        print(f"KAFKA_BOOTSTRAP={status.bootstrap}")
        if broker.secure:
            props = broker.security_files.admin_properties
            print(f"TRAJECTORY_KAFKA_PROPERTIES={props}")
            print(f"TRAJECTORY_SSL_CA_FILE={broker.security_files.ca_cert}")
        return 0
    if args.action == "stop":
        before = broker.status()
        stopped = broker.stop(args.timeout or DEFAULT_STOP_TIMEOUT_S)
        if stopped:
            print(f"stopped the broker at {before.bootstrap} (pid {before.pid})")
        elif before.condition == "stale":
            print(f"no broker was running; removed {before.message}")
        else:
            print(f"no broker was running from {broker.data_dir}")
        return 0
    status = broker.status()
    print(f"{status.condition}: {status.message}")
    if status.running:
        print(f"KAFKA_BOOTSTRAP={status.bootstrap}")
        return 0
    return 1


def _certs(args: argparse.Namespace) -> int:
    from streams.broker.container import ContainerBroker, write_container_material
    from streams.errors import ConfigError

    if args.out is None:
        raise ConfigError("--out", "certs writes into a directory: give --out DIR")
    broker = ContainerBroker(
        host=args.host,
        internal_port=args.internal_port,
        external_port=args.external_port,
        controller_port=args.controller_port,
    )
    files = write_container_material(args.out, broker)
    print(f"secured broker material in {files.root}:")
    for name in (
        "ca.pem",
        "server.pem",
        "server.properties",
        "kafka-start.sh",
        "admin.properties",
        "admin.java.properties",
    ):
        print(f"  {files.root / name}")
    print(f"clients: TRAJECTORY_SSL_CA_FILE={files.ca_cert}")
    return 0


__all__ = ["add_arguments", "run"]
