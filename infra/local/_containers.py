"""Test servers in containers (``SHOAL_TEST_SERVERS=docker``), with testcontainers, from the
images compose runs: each kind's image is the variable ``infra/images`` sets
(``SHOAL_NATS_IMAGE`` ...), else the stand-in built here, else the upstream image.

Every container publishes its port on a host port chosen here, on 127.0.0.1, so a restart
keeps its address (``RunningContainer.restart``: the restart tests run in this mode too).
testcontainers' Ryuk reaper is off (its image cannot be pulled here): the fixtures remove
every container they start. It would hand out the bridge's gateway address as the host
(it believes it runs in a container here); ``docker_host`` mode makes it 127.0.0.1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from infra.images._docker import image_hash
from infra.images._recipes import IMAGES
from infra.local._process import free_port, http_get, tcp_greeting

__all__ = ["UPSTREAM", "RunningContainer", "container"]

HOST = "127.0.0.1"
READY_WITHIN = 90.0  # seconds: a cold JVM for Kafka, on 2 cores beside the tests
MINIO_CREDENTIALS = ("shoal", "shoal-test-secret")
# The upstream image of each kind, as compose names it; a variable names a local one.
UPSTREAM = {
    "nats": ("SHOAL_NATS_IMAGE", "nats:2.15.1-alpine"),
    "etcd": ("SHOAL_ETCD_IMAGE", "quay.io/coreos/etcd:v3.5.17"),
    "redis": ("SHOAL_REDIS_IMAGE", "redis:7.4.2"),
    "kafka": ("SHOAL_KAFKA_IMAGE", "apache/kafka:4.1.2"),
    "minio": ("SHOAL_MINIO_IMAGE", "minio/minio:RELEASE.2025-04-22T22-12-26Z"),
}


@dataclass(frozen=True)
class _Spec:
    port: int  # the server's port in the container
    command: Callable[[int], list[str]]  # given the host port
    env: Callable[[int], dict[str, str]]
    ready: Callable[[int], bool]  # one probe of the host port
    url: Callable[[int], str]


def _kafka_env(host_port: int) -> dict[str, str]:
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        # what clients on this host reach: the published port
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{HOST}:{host_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


def _kafka_ready(port: int) -> bool:
    from infra.local._kafka_probe import metadata  # noqa: PLC0415 (Kafka's only)

    return metadata(HOST, port, timeout=1.0) is not None


def _no_env(port: int) -> dict[str, str]:
    return {}


SPECS = {
    "nats": _Spec(
        4222,
        lambda port: ["-js", "-sd", "/data"],
        _no_env,
        lambda port: tcp_greeting(port, b"", b"INFO"),
        lambda port: f"nats://{HOST}:{port}",
    ),
    "etcd": _Spec(
        2379,
        lambda port: [
            "etcd",
            "--name",
            "shoal",
            "--data-dir",
            "/etcd-data",
            "--listen-client-urls",
            "http://0.0.0.0:2379",
            "--advertise-client-urls",
            f"http://{HOST}:{port}",
            "--listen-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-cluster",
            "shoal=http://127.0.0.1:2380",
        ],
        _no_env,
        lambda port: (
            (got := http_get(f"http://{HOST}:{port}/health")) is not None and b"true" in got[1]
        ),
        lambda port: f"http://{HOST}:{port}",
    ),
    "redis": _Spec(
        6379,
        lambda port: [
            "redis-server",
            "--save",
            "",
            "--appendonly",
            "no",
            "--notify-keyspace-events",
            "KEA",
        ],
        _no_env,
        lambda port: tcp_greeting(port, b"PING\r\n", b"+PONG"),
        lambda port: f"redis://{HOST}:{port}",
    ),
    "kafka": _Spec(9092, lambda port: [], _kafka_env, _kafka_ready, lambda port: f"{HOST}:{port}"),
    "minio": _Spec(
        9000,
        lambda port: ["server", "/data"],
        lambda port: {
            "MINIO_ROOT_USER": MINIO_CREDENTIALS[0],
            "MINIO_ROOT_PASSWORD": MINIO_CREDENTIALS[1],
        },
        lambda port: (
            (got := http_get(f"http://{HOST}:{port}/minio/health/live")) is not None
            and got[0] == 200
        ),
        lambda port: f"http://{HOST}:{port}",
    ),
}


def image_of(kind: str) -> str:
    """The image of ``kind``: its variable's, else the stand-in ``infra/images/build`` made
    here when there is one, else the upstream image (where a registry answers)."""
    variable, upstream = UPSTREAM[kind]
    if named := os.environ.get(variable):
        return named
    (local,) = [image.tag for image in IMAGES if image.name == kind]
    return local if image_hash(local) is not None else upstream


@dataclass(frozen=True)
class RunningContainer:
    """A server in a container, handled like a local one: ``kill`` (SIGKILL, the data
    stays), ``restart`` (on the same host port and data), ``stop`` (removes it)."""

    kind: str
    port: int  # on the host
    _container: Any
    _spec: _Spec

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return self._spec.url(self.port)

    def running(self) -> bool:
        wrapped = self._container.get_wrapped_container()
        wrapped.reload()
        return bool(wrapped.status == "running")

    def wait_ready(self, timeout: float = READY_WITHIN) -> None:
        deadline = time.monotonic() + timeout
        while not self._spec.ready(self.port):
            if time.monotonic() > deadline:
                logs = (
                    self._container.get_wrapped_container().logs(tail=30).decode(errors="replace")
                )
                raise TimeoutError(f"{self.kind} container not ready within {timeout:g} s:\n{logs}")
            time.sleep(0.2)

    def kill(self) -> None:
        self._container.get_wrapped_container().kill()

    def restart(self, timeout: float | None = None) -> None:
        """Stop if running (SIGTERM) and start again on the same port and data."""
        self._container.get_wrapped_container().restart(timeout=10)
        self.wait_ready(READY_WITHIN if timeout is None else timeout)

    def stop(self) -> None:
        self._container.stop()  # and removes it (testcontainers' stop)


@contextmanager
def container(kind: str, extra_args: Sequence[str] = ()) -> Iterator[RunningContainer]:
    """A ready ``kind`` server in a container of ``image_of(kind)``, its command line with
    ``extra_args`` appended; removed on leaving."""
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415 (docker mode)

    spec = SPECS[kind]
    port = free_port()
    started = DockerContainer(image_of(kind)).with_envs(**spec.env(port))
    # Published on 127.0.0.1 only: docker-py takes (address, port), which testcontainers'
    # with_bind_ports does not (it binds every interface), so its port map is set directly.
    started.ports[str(spec.port)] = cast(Any, (HOST, port))
    if command := [*spec.command(port), *extra_args]:
        started = started.with_command(command)
    started.start()
    handle = RunningContainer(kind, port, started, spec)
    try:
        handle.wait_ready()
        yield handle
    finally:
        handle.stop()
