"""A Kafka Metadata request in the standard library: the readiness probe of infra.local.kafka.

Metadata v4 (Kafka 4 removed v0-v3), no topics: the answer lists the brokers that are
registered and unfenced, and the active controller. A broker answers only once it has
started (its listener accepts requests after it was unfenced), so "my node id is in the
broker list and a controller is known" is "ready".
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_METADATA = 3
_VERSION = 4


@dataclass(frozen=True)
class ClusterView:
    brokers: dict[int, tuple[str, int]]  # node id -> (host, port)
    controller_id: int
    cluster_id: str | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


def metadata(host: str, port: int, timeout: float = 1.0) -> ClusterView | None:
    """The broker's view of the cluster, or None when it does not answer (yet)."""
    client_id = b"shoal-probe"
    correlation = 7
    body = struct.pack(">hhih", _METADATA, _VERSION, correlation, len(client_id)) + client_id
    body += struct.pack(">ib", 0, 0)  # topics: empty array; allow_auto_topic_creation false
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _recv_exact(s, 4))
            r = _Reader(_recv_exact(s, size))
        if r.take(">i") != correlation:
            return None
        r.take(">i")  # throttle_time_ms
        brokers: dict[int, tuple[str, int]] = {}
        for _ in range(r.take(">i")):
            node = r.take(">i")
            bhost = r.string() or ""
            bport = r.take(">i")
            r.string()  # rack
            brokers[node] = (bhost, bport)
        cluster_id = r.string()
        controller = r.take(">i")
        return ClusterView(brokers, controller, cluster_id)
    except (OSError, struct.error, ValueError):
        return None
