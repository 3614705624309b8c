"""Obtain (with ``mvn``) and run a local single-node KRaft Kafka on 127.0.0.1.

Stdlib only: the broker is a JVM child process; readiness is checked with a raw
Kafka Metadata request, so this package imports no Kafka client.

    from streams.broker import LocalBroker
    with LocalBroker("/tmp/kafka-dev", port=19092, controller_port=19093) as broker:
        print(broker.bootstrap)          # 127.0.0.1:19092

See ``trajectory broker --help`` for the command line.
"""

from streams.broker.config import KAFKA_VERSION, BrokerConfig, server_properties
from streams.broker.jars import cache_root, ensure_jars, kafka_home
from streams.broker.local import BrokerStatus, LocalBroker, default_data_dir, find_java
from streams.broker.probe import free_port, free_ports, kafka_ready, parse_bootstrap, port_in_use
from streams.broker.state import BrokerState, read_state

__all__ = [
    "KAFKA_VERSION",
    "BrokerConfig",
    "BrokerState",
    "BrokerStatus",
    "LocalBroker",
    "cache_root",
    "default_data_dir",
    "ensure_jars",
    "find_java",
    "free_port",
    "free_ports",
    "kafka_home",
    "kafka_ready",
    "parse_bootstrap",
    "port_in_use",
    "read_state",
    "server_properties",
]
