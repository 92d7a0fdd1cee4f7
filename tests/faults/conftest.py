"""The fault suite runs clusters the way the e2e tests do (same fixtures), on a Redis that
keeps its data across a restart (AOF, an fsync per write): the store-restart row kills it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from infra.local._process import ServerStartError
from infra.local._testservers import ServerInfo
from infra.local.servers import start_redis
from tests.e2e.conftest import make_cluster, pytest_runtest_makereport

__all__ = ["make_cluster", "pytest_runtest_makereport", "redis_server"]


@pytest.fixture(scope="session")
def redis_server(server_mode: str, request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    if server_mode != "local":
        pytest.skip("the fault suite restarts Redis: it needs a local redis-server")
    try:
        server = start_redis(
            name="shoal-redis-faults",
            extra_args=("--appendonly", "yes", "--appendfsync", "always"),
        )
    except (ServerStartError, FileNotFoundError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (run infra/local/install.sh)", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield ServerInfo("redis", "local", server.url, server.endpoint, process=server)
    finally:
        server.stop()
