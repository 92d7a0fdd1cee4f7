"""Servers for the test suite (tests/conftest.py): local processes, Docker, or external URLs.

SHOAL_TEST_SERVERS=local|docker|external chooses; by default `docker` when a Docker daemon
answers within 3 s, else `local` (infra.local.servers, binaries from infra/local/install.sh).
`docker` runs each kind in a container of the image compose runs (infra.local._containers).
`external` reads SHOAL_TEST_NATS_URL, SHOAL_TEST_ETCD_ENDPOINT and SHOAL_TEST_REDIS_URL
(and SHOAL_TEST_KAFKA_BOOTSTRAP: host:port[,host:port]).
"""

from __future__ import annotations

import functools
import http.client
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from infra.local._containers import MINIO_CREDENTIALS, RunningContainer, container
from infra.local.kafka import SASL_PASSWORD, SASL_USER, RunningKafka
from infra.local.servers import (
    RunningMinio,
    RunningServer,
    start_etcd,
    start_kafka,
    start_minio,
    start_nats,
    start_redis,
)

MODES = ("local", "docker", "external")
KINDS = ("nats", "etcd", "redis", "kafka", "minio")
DOCKER_CHECK_TIMEOUT = 3.0


class ServerUnavailable(Exception):
    """The chosen mode cannot provide this server (the fixture skips with this message)."""


@dataclass(frozen=True)
class ServerInfo:
    kind: str
    mode: str
    url: str  # nats://h:p (comma-separated for several) | http://h:p for etcd | redis://h:p
    # | h:p[,h:p] for kafka (its bootstrap servers: Kafka has no URL scheme)
    endpoint: str  # h:p (comma-separated for several); what etcd3aio.Etcd3Client takes
    # local and docker modes: kill() / restart() for fault tests
    process: RunningServer | RunningContainer | None = None
    credentials: tuple[str, str] | None = None  # minio: (access key id, secret access key)
    # kafka, local mode: a SASL_PLAINTEXT listener "h:p" (PLAIN and SCRAM-SHA-256) and its
    # (user, password)
    sasl_endpoint: str | None = None
    sasl_credentials: tuple[str, str] | None = None
    # and a SASL_SSL listener (same user) with the CA file that verifies it, when present
    sasl_ssl_endpoint: str | None = None
    tls_ca_file: Path | None = None

    @property
    def endpoints(self) -> list[str]:
        return self.endpoint.split(",")


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def docker_answers(timeout: float = DOCKER_CHECK_TIMEOUT) -> bool:
    """True when a Docker daemon answers (DOCKER_HOST via `docker info`, else the socket)."""
    if os.environ.get("DOCKER_HOST"):
        docker = shutil.which("docker")
        if docker is None:
            return False
        try:
            done = subprocess.run(
                [docker, "info"], capture_output=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0
    path = "/var/run/docker.sock"
    if not os.path.exists(path):  # noqa: PTH110
        return False
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def select_mode(env: Mapping[str, str] = os.environ) -> str:
    mode = env.get("SHOAL_TEST_SERVERS", "").strip().lower()
    if not mode:
        return "docker" if docker_answers() else "local"
    if mode not in MODES:
        raise ValueError(f"SHOAL_TEST_SERVERS={mode!r}: expected one of {', '.join(MODES)}")
    return mode


@contextmanager
def provide(kind: str, mode: str) -> Iterator[ServerInfo]:
    """Yield a ready server of this kind; stop it afterwards if this call started it."""
    if kind not in KINDS:
        raise ValueError(f"unknown server kind {kind!r}")
    if mode == "local":
        with _local(kind) as info:
            yield info
    elif mode == "external":
        yield _external(kind, os.environ)
    elif mode == "docker":
        with _docker(kind) as info:
            yield info
    else:
        raise ValueError(f"unknown mode {mode!r}")


@contextmanager
def _local(kind: str) -> Iterator[ServerInfo]:
    starters: dict[str, Callable[[], RunningServer]] = {
        "nats": start_nats,
        "etcd": start_etcd,
        "redis": start_redis,
        "kafka": functools.partial(start_kafka, secured=True),  # + SASL listeners
        "minio": start_minio,
    }
    server: RunningServer = starters[kind]()
    credentials = (
        (server.access_key, server.secret_key) if isinstance(server, RunningMinio) else None
    )
    sasl: dict[str, Any] = {}
    if isinstance(server, RunningKafka) and server.sasl_bootstrap is not None:
        sasl = {
            "sasl_endpoint": server.sasl_bootstrap,
            "sasl_credentials": (SASL_USER, SASL_PASSWORD),
            "sasl_ssl_endpoint": server.sasl_ssl_bootstrap,
            "tls_ca_file": server.tls_ca_file,
        }
    try:
        yield ServerInfo(kind, "local", server.url, server.endpoint, server, credentials, **sasl)
    finally:
        server.stop()


_EXTERNAL_VARS = {
    "nats": "SHOAL_TEST_NATS_URL",
    "etcd": "SHOAL_TEST_ETCD_ENDPOINT",
    "redis": "SHOAL_TEST_REDIS_URL",
    "kafka": "SHOAL_TEST_KAFKA_BOOTSTRAP",
    "minio": "SHOAL_TEST_S3_ENDPOINT",  # credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
}


def _external(kind: str, env: Mapping[str, str]) -> ServerInfo:
    var = _EXTERNAL_VARS[kind]
    value = env.get(var, "").strip()
    if not value:
        raise ServerUnavailable(f"SHOAL_TEST_SERVERS=external but {var} is not set")
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if kind == "minio":  # an S3-compatible endpoint URL
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        credentials = (key, secret) if key and secret else None
        return ServerInfo(kind, "external", value, urlsplit(value).netloc, None, credentials)
    if kind == "kafka":  # "host:port[,host:port]" (a scheme prefix is tolerated)
        endpoints = [urlsplit(p).netloc if "://" in p else p for p in parts]
        return ServerInfo(kind, "external", ",".join(endpoints), ",".join(endpoints))
    if kind == "etcd":  # "host:port[,host:port]" (an http:// prefix is tolerated)
        endpoints = [urlsplit(p).netloc if "://" in p else p for p in parts]
        return ServerInfo(kind, "external", f"http://{endpoints[0]}", ",".join(endpoints))
    endpoints = [urlsplit(p if "://" in p else f"{kind}://{p}").netloc for p in parts]
    return ServerInfo(kind, "external", value, ",".join(endpoints))


@contextmanager
def _docker(kind: str) -> Iterator[ServerInfo]:
    """A server in a container (``infra.local._containers``): restartable like a local one."""
    try:
        import testcontainers  # noqa: F401, PLC0415 (docker mode only)
    except ImportError as exc:
        raise ServerUnavailable(
            "SHOAL_TEST_SERVERS=docker needs testcontainers (the dev extra)"
        ) from exc
    if not docker_answers():
        raise ServerUnavailable(
            "SHOAL_TEST_SERVERS=docker but no Docker daemon answers (infra/images/build starts one)"
        )
    with container(kind) as running:
        credentials = MINIO_CREDENTIALS if kind == "minio" else None
        yield ServerInfo(kind, "docker", running.url, running.endpoint, running, credentials)
