"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from infra.local._testservers import ServerInfo, ServerUnavailable, provide, select_mode


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- real servers ------------------------------------------------------------------------
# SHOAL_TEST_SERVERS=local|docker|external (default: docker if a daemon answers, else local).
# Each server starts once per session, on first use. In local mode `.process` is the
# infra.local.servers handle (kill()/restart()); a test that kills a shared server must
# restart it before it ends. Fresh, private servers: use infra.local.servers directly.


@pytest.fixture(scope="session")
def server_mode() -> str:
    return select_mode()


def _serve(kind: str, mode: str) -> Iterator[ServerInfo]:
    try:
        with provide(kind, mode) as info:
            yield info
    except ServerUnavailable as exc:
        if os.environ.get("CI"):
            # In CI a missing server is a failure: a skipped real-server test proves nothing.
            pytest.fail(f"{exc} (run infra/local/install.sh)", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def nats_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("nats", server_mode)


@pytest.fixture(scope="session")
def etcd_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("etcd", server_mode)


@pytest.fixture(scope="session")
def redis_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("redis", server_mode)


@pytest.fixture(scope="session")
def kafka_server(server_mode: str) -> Iterator[ServerInfo]:
    """A Kafka broker (KRaft); ``.endpoint`` (== ``.url``) is its bootstrap "host:port"."""
    yield from _serve("kafka", server_mode)


@pytest.fixture(scope="session")
def minio_server(server_mode: str) -> Iterator[ServerInfo]:
    """An S3-compatible server (MinIO); ``.url`` is its endpoint, ``.credentials`` the keys."""
    yield from _serve("minio", server_mode)
