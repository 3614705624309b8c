"""Unit tests for the pure parts of streams.broker: properties, pom, cluster id, probe parsing."""

from __future__ import annotations

import base64
import socket
import struct
import threading
from pathlib import Path

import pytest

from streams.broker.config import (
    BrokerConfig,
    log4j_properties,
    parse_properties,
    random_cluster_id,
    render_properties,
    server_properties,
)
from streams.broker.jars import generate_pom
from streams.broker.probe import (
    kafka_ready,
    metadata_brokers,
    parse_bootstrap,
    parse_metadata_v0_brokers,
    port_in_use,
)
from streams.errors import BrokerError, ConfigError


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    cfg = BrokerConfig(tmp_path, port=19092, controller_port=19093)
    props = server_properties(cfg)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "data")
    # one node: internal topics must not ask for more replicas than exist
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    # thousands of test partitions: small preallocated (mmapped) index files
    assert props["log.index.size.max.bytes"] == str(1024 * 1024)
    assert cfg.bootstrap == "127.0.0.1:19092"


def test_auto_create_and_overrides_applied_last(tmp_path: Path) -> None:
    cfg = BrokerConfig(
        tmp_path,
        port=1,
        controller_port=2,
        auto_create_topics=True,
        overrides={"num.partitions": "7", "message.max.bytes": "2000000"},
    )
    props = server_properties(cfg)
    assert props["auto.create.topics.enable"] == "true"
    assert props["num.partitions"] == "7"
    assert props["message.max.bytes"] == "2000000"


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"controller_port": -1}, "controller_port"),
        ({"port": 5000, "controller_port": 5000}, "controller_port"),
        ({"overrides": {"a\nb": "x"}}, "overrides.a\nb"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(tmp_path, **kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


def test_properties_round_trip_including_backslashes() -> None:
    props = {"log.dirs": r"C:\kafka\data", "a.b": "x=y", "empty": ""}
    text = render_properties(props, header="line one\nline two")
    assert text.startswith("# line one\n# line two\n")
    assert parse_properties(text) == props


def test_parse_properties_rejects_garbage() -> None:
    with pytest.raises(ConfigError) as info:
        parse_properties("# ok\nkey=value\nnot a property\n")
    assert info.value.key == "line 3"


def test_log4j_file_vs_console(tmp_path: Path) -> None:
    cfg = BrokerConfig(tmp_path)
    to_file = log4j_properties(cfg)
    assert to_file["log4j.rootLogger"] == "INFO, file"
    assert to_file["log4j.appender.file.File"] == str(tmp_path / "logs" / "server.log")
    assert to_file["log4j.appender.file.MaxFileSize"] == "10MB"
    assert to_file["log4j.logger.kafka.server"] == "WARN"
    assert to_file["log4j.logger.kafka.server.KafkaRaftServer"] == "INFO"
    console = log4j_properties(cfg, console=True)
    assert console["log4j.rootLogger"] == "INFO, stdout"
    assert not any(k.startswith("log4j.appender.file") for k in console)


def test_random_cluster_id_has_kafka_uuid_form() -> None:
    seen = {random_cluster_id() for _ in range(200)}
    assert len(seen) == 200
    for cid in seen:
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert random_cluster_id(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(ConfigError):
        random_cluster_id(b"\xf8" + bytes(15))  # encodes to "-..."
    with pytest.raises(ConfigError):
        random_cluster_id(b"short")


def test_generated_pom_pins_versions() -> None:
    pom = generate_pom("3.9.1")
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<version>3.9.1</version>" in pom
    assert "<artifactId>slf4j-reload4j</artifactId>" in pom
    assert "<version>1.7.36</version>" in pom
    assert "maven-dependency-plugin" in pom


# -- probe -------------------------------------------------------------------


def _metadata_v0_response(correlation_id: int, brokers: list[tuple[int, str, int]]) -> bytes:
    body = struct.pack(">ii", correlation_id, len(brokers))
    for node_id, host, port in brokers:
        raw = host.encode()
        body += struct.pack(">ih", node_id, len(raw)) + raw + struct.pack(">i", port)
    body += struct.pack(">i", 0)  # no topics
    return body


def test_parse_metadata_brokers() -> None:
    payload = _metadata_v0_response(42, [(1, "127.0.0.1", 9092), (2, "kafka", 19092)])
    brokers = parse_metadata_v0_brokers(payload, 42)
    assert [(b.node_id, b.host, b.port) for b in brokers] == [
        (1, "127.0.0.1", 9092),
        (2, "kafka", 19092),
    ]


def test_parse_metadata_rejects_wrong_correlation_and_truncation() -> None:
    payload = _metadata_v0_response(42, [(1, "127.0.0.1", 9092)])
    with pytest.raises(BrokerError, match="correlation"):
        parse_metadata_v0_brokers(payload, 43)
    with pytest.raises(BrokerError, match="malformed"):
        parse_metadata_v0_brokers(payload[:12], 42)


class _FakeServer:
    """A one-shot TCP server on 127.0.0.1: replies with what ``reply`` computes."""

    def __init__(self, reply: object) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port: int = self.sock.getsockname()[1]
        self.request = b""
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            (size,) = struct.unpack(">i", conn.recv(4))
            while len(self.request) < size:
                self.request += conn.recv(size - len(self.request))
            if callable(self.reply):
                conn.sendall(self.reply(self.request))

    def close(self) -> None:
        self.thread.join(timeout=5)
        self.sock.close()


def test_probe_speaks_metadata_v0_to_a_server() -> None:
    def reply(request: bytes) -> bytes:
        api_key, version, correlation = struct.unpack_from(">hhi", request, 0)
        assert (api_key, version) == (3, 0)
        body = _metadata_v0_response(correlation, [(1, "127.0.0.1", 1234)])
        return struct.pack(">i", len(body)) + body

    server = _FakeServer(reply)
    try:
        brokers = metadata_brokers("127.0.0.1", server.port)
    finally:
        server.close()
    assert [(b.node_id, b.port) for b in brokers] == [(1, 1234)]
    assert server.request.endswith(b"trajectory-probe\x00\x00\x00\x00")


def test_probe_false_when_no_broker_is_listed_or_peer_hangs_up() -> None:
    def no_brokers(request: bytes) -> bytes:
        (correlation,) = struct.unpack_from(">i", request, 4)
        body = _metadata_v0_response(correlation, [])
        return struct.pack(">i", len(body)) + body

    server = _FakeServer(no_brokers)
    try:
        assert kafka_ready("127.0.0.1", server.port) is False
    finally:
        server.close()
    hang_up = _FakeServer(None)
    try:
        assert kafka_ready("127.0.0.1", hang_up.port) is False
    finally:
        hang_up.close()


def test_port_in_use_and_closed_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", port)
    assert kafka_ready("127.0.0.1", port, timeout_s=0.5) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("kafka:19092,other:1", ("kafka", 19092)),
        ("PLAINTEXT://h:1", ("h", 1)),
    ],
)
def test_parse_bootstrap(text: str, expected: tuple[str, int]) -> None:
    assert parse_bootstrap(text) == expected


@pytest.mark.parametrize("text", ["", "nohost", "h:", ":9092", "h:port"])
def test_parse_bootstrap_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match=r"bootstrap: .*expected host:port"):
        parse_bootstrap(text)


def test_free_ports_are_distinct_and_bindable() -> None:
    from streams.broker.probe import free_ports

    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert not any(port_in_use("127.0.0.1", p) for p in ports)
