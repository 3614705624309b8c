"""Is a Kafka broker answering at host:port?  A stdlib-only wire check.

A TCP connect is not enough (the socket accepts before the broker has joined
its KRaft quorum and unfenced itself).  We send a Metadata v0 request and require
the response to list at least one broker: a broker only lists itself once it is
registered and unfenced, i.e. once producers and consumers can use it.

Metadata v0 is supported by every Kafka up to 3.9 (4.0 dropped it; this module
targets the pinned 3.9.1).  No client library is imported, so ``status`` works
without confluent-kafka and stays fast.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from streams.errors import BrokerError, ConfigError

_API_METADATA = 3
_CLIENT_ID = b"trajectory-probe"


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


def _metadata_v0_request(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", _API_METADATA, 0, correlation_id, len(_CLIENT_ID))
    body += _CLIENT_ID + struct.pack(">i", 0)  # topics: empty array = all topics
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def parse_metadata_v0_brokers(payload: bytes, correlation_id: int) -> tuple[BrokerInfo, ...]:
    """Decode the broker list of a Metadata v0 response (after the size prefix)."""
    try:
        (got,) = struct.unpack_from(">i", payload, 0)
        if got != correlation_id:
            raise BrokerError(f"probe: correlation id {got} != {correlation_id}: not Kafka?")
        (count,) = struct.unpack_from(">i", payload, 4)
        offset = 8
        brokers = []
        for _ in range(count):
            node_id, host_len = struct.unpack_from(">ih", payload, offset)
            offset += 6
            host = payload[offset : offset + host_len].decode("utf-8")
            offset += host_len
            (port,) = struct.unpack_from(">i", payload, offset)
            offset += 4
            brokers.append(BrokerInfo(node_id, host, port))
    except (struct.error, UnicodeDecodeError) as exc:
        raise BrokerError(f"probe: malformed Metadata response ({exc}): not Kafka?") from exc
    return tuple(brokers)


def metadata_brokers(host: str, port: int, timeout_s: float = 2.0) -> tuple[BrokerInfo, ...]:
    """Brokers listed by the Kafka at host:port; raises OSError if unreachable."""
    correlation_id = 0x7472616A  # "traj"
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(_metadata_v0_request(correlation_id))
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        if not 0 < size < 64 * 1024 * 1024:
            raise BrokerError(f"probe: implausible response size {size} from {host}:{port}")
        return parse_metadata_v0_brokers(_recv_exact(sock, size), correlation_id)


def kafka_ready(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True if a Kafka broker at host:port answers Metadata and lists a broker."""
    try:
        return len(metadata_brokers(host, port, timeout_s)) > 0
    except (OSError, BrokerError):
        # Not answering (yet) is the expected negative answer of a probe.
        return False


def port_in_use(host: str, port: int) -> bool:
    """True if something accepts or holds host:port (we cannot bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free right now (racy by nature; callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int, host: str = "127.0.0.1") -> tuple[int, ...]:
    """``count`` distinct free ports (all held open while choosing, so no repeats)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return tuple(int(sock.getsockname()[1]) for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """First ``host:port`` of a bootstrap list (:class:`ConfigError` if it is not one)."""
    first = bootstrap.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError("bootstrap", f"{bootstrap!r}: expected host:port, e.g. 127.0.0.1:9092")
    return host, int(port)


__all__ = [
    "BrokerInfo",
    "free_port",
    "free_ports",
    "kafka_ready",
    "metadata_brokers",
    "parse_bootstrap",
    "parse_metadata_v0_brokers",
    "port_in_use",
]
