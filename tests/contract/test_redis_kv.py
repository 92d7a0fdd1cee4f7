"""The ``CoordinationStore`` contract suite against Redis.

In local and docker modes on a private redis-server with AOF and ``appendfsync always``
(started once for the module: a process, or a container), so that the restart test
restarts a Redis that keeps its data; with SHOAL_TEST_SERVERS=external the session's
``redis_server`` is used and the restart test cannot run (skipped, or failed under CI).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from adapters.redis import RedisCoordinationStore, RedisSettings
from core.keyspace import KeyValue, Resync
from infra.local._containers import container
from infra.local._process import ServerStartError
from infra.local._testservers import ServerInfo
from infra.local.servers import start_redis
from tests._unavailable import unavailable
from tests.contract._coordination import (
    next_within,
    restart_checks_run,
    retry_while_unavailable,
    server_features,
    watching,
)
from tests.contract._kv import CoordinationStoreContract, View, apply

_PERSISTENT = ("--appendonly", "yes", "--appendfsync", "always")


@pytest.fixture(scope="module")
def redis_store(server_mode: str, request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    if server_mode == "docker":
        with container("redis", _PERSISTENT) as running:
            yield ServerInfo("redis", "docker", running.url, running.endpoint, running)
        return
    if server_mode != "local":
        yield request.getfixturevalue("redis_server")
        return
    try:
        server = start_redis(name="shoal-redis-kv-contract", extra_args=_PERSISTENT)
    except (ServerStartError, FileNotFoundError) as exc:
        unavailable(str(exc))
    try:
        yield ServerInfo("redis", "local", server.url, server.endpoint, server)
    finally:
        server.stop()


class RedisStoreHarness:
    """The dialect on a fresh key prefix (one group per test) of the module's Redis."""

    def __init__(self, server: ServerInfo) -> None:
        self._server = server
        self.settings = RedisSettings(url=server.url, group=f"t-{uuid.uuid4().hex[:12]}")
        # a deadline is ended by the next script, or an idle watch's sweep (every 0.25 s)
        self.features = server_features(server, expiry_slack=1.0)

    def store(self) -> RedisCoordinationStore:
        return RedisCoordinationStore(self.settings)

    async def pass_time(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)


async def clean(server: ServerInfo, harness: RedisStoreHarness) -> None:
    """Delete every key of the harness's group (what a Redis without persistence loses)."""
    admin = aioredis.Redis.from_url(server.url, socket_timeout=5)
    try:
        with contextlib.suppress(RedisError, OSError):  # the server may still be restarting
            keys = [key async for key in admin.scan_iter(match=f"{harness.settings.prefix}*")]
            if keys:
                await admin.delete(*keys)
    finally:
        await admin.aclose()


@pytest.fixture
async def harness(redis_store: ServerInfo) -> AsyncIterator[RedisStoreHarness]:
    harness = RedisStoreHarness(redis_store)
    yield harness
    await clean(redis_store, harness)


@pytest.mark.redis
class TestRedisCoordinationStore(CoordinationStoreContract):
    pass


@pytest.mark.redis
@pytest.mark.anyio
async def test_a_watch_resyncs_when_redis_comes_back_without_its_data(
    harness: RedisStoreHarness,
) -> None:
    """A Redis without persistence (or losing its last writes) starts its revisions again:
    the watch must not wait for revisions it thinks it has seen."""
    restart_checks_run(harness.features)
    async with (
        harness.store() as store,
        harness.store() as observer,
        watching(observer.watch("d/")) as events,
    ):
        assert isinstance(await next_within(events), Resync)
        for n in range(3):
            await store.create(f"d/{n}", b"")
            await next_within(events)
        admin = aioredis.Redis.from_url(harness.settings.url, socket_timeout=5)
        try:
            keys = [key async for key in admin.scan_iter(match=f"{harness.settings.prefix}*")]
            await admin.delete(*keys)  # what a restart without persistence leaves
        finally:
            await admin.aclose()
        await harness.restart_store()
        fresh = await retry_while_unavailable(lambda: store.create("d/fresh", b"new"))
        view: View = {}
        with anyio.fail_after(30):
            while view != {"d/fresh": KeyValue("d/fresh", b"new", fresh)}:
                apply(view, await anext(events))
