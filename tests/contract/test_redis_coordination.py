"""The coordination contract suites against Redis.

In local mode the tests run on a private redis-server with AOF and ``appendfsync always``
(started once per variant), so that the restart tests restart a Redis that keeps its data,
as production should run it: a Redis without persistence loses every key on restart
(members, leader, assignment, holds) and the coordination state with them. With
SHOAL_TEST_SERVERS=docker|external the session's ``redis_server`` is used and the restart
tests cannot run (the harness cannot restart it): skipped, or failed under CI.

Two variants: ``notify`` (keyspace notifications on: expirations are pushed) and
``no-notify`` (off, as on a Redis nobody configured: expirations are seen by the periodic
re-read, here every 0.5 s, and leases notice a lost key at their next renewal, here every
2 s at most).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import anyio
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from adapters.redis import (
    RedisAssignmentStore,
    RedisElection,
    RedisHoldStore,
    RedisLeadership,
    RedisLoadReports,
    RedisMembership,
    RedisMembershipLease,
    RedisProjectRegistry,
    RedisSettings,
)
from adapters.redis._keys import Keys
from core.errors import FencedError
from core.ports import AssignmentStore, Leadership, MembershipLease
from infra.local._process import ServerStartError
from infra.local._testservers import ServerInfo
from infra.local.servers import start_redis
from tests._unavailable import needs_local, unavailable
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    next_within,
    owners,
    server_features,
    watching,
)

_PERSISTENT = ("--appendonly", "yes", "--appendfsync", "always")


@dataclass(frozen=True)
class RedisStore:
    info: ServerInfo
    notifications: bool


@pytest.fixture(
    scope="module",
    params=[pytest.param(True, id="notify"), pytest.param(False, id="no-notify")],
)
def redis_store(server_mode: str, request: pytest.FixtureRequest) -> Iterator[RedisStore]:
    """A restartable Redis that keeps its data across restarts (local mode), else the
    session's server (with keyspace notifications, as conftest configures it)."""
    notifications: bool = request.param
    if server_mode != "local":
        if not notifications:
            unavailable(needs_local("redis", server_mode, "start without notifications"))
        yield RedisStore(request.getfixturevalue("redis_server"), notifications)
        return
    flags = () if notifications else ("--notify-keyspace-events", "")
    try:
        server = start_redis(name="shoal-redis-contract", extra_args=(*_PERSISTENT, *flags))
    except (ServerStartError, FileNotFoundError) as exc:
        unavailable(str(exc))
    try:
        yield RedisStore(
            ServerInfo("redis", "local", server.url, server.endpoint, server), notifications
        )
    finally:
        server.stop()


class RedisHarness:
    """Adapters on a fresh key prefix (one group per test) of the module's Redis."""

    def __init__(self, store: RedisStore, admin: aioredis.Redis) -> None:
        server = store.info
        self._server = server
        self._admin = admin
        group = f"t-{uuid.uuid4().hex[:12]}"
        if store.notifications:
            self.settings = RedisSettings(url=server.url, group=group)
        else:
            # Without notifications a lease sees its key expired only at its next renewal
            # (every min(ttl/2, max_renew_interval)) and watchers at their next re-read.
            self.settings = RedisSettings(
                url=server.url, group=group, resync_interval=0.5, max_renew_interval=2.0
            )
        # Redis expires a key within ~100 ms of its TTL (active expiry runs 10 times a second)
        self.features = server_features(server, expiry_slack=1.0)

    def membership(self) -> RedisMembership:
        return RedisMembership(self.settings)

    def reports(self) -> RedisLoadReports:
        return RedisLoadReports(self.settings)

    def election(self) -> RedisElection:
        return RedisElection(self.settings)

    def store(self) -> RedisAssignmentStore:
        return RedisAssignmentStore(self.settings)

    def hold_store(self) -> RedisHoldStore:
        return RedisHoldStore(self.settings)

    def registry(self) -> RedisProjectRegistry:
        return RedisProjectRegistry(self.settings)

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        assert isinstance(store, RedisAssignmentStore)
        return store._client, "script"

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        """Let the key expire now (a real expiry: Redis publishes ``expired``)."""
        assert isinstance(lease, RedisMembershipLease | RedisLeadership)
        await self._admin.pexpire(lease.key, 1)
        await anyio.sleep(0.01)
        await self._admin.exists(lease.key)  # an access expires it at once (if not yet)

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, RedisMembershipLease | RedisLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)

    async def clean(self) -> None:
        keys = [key async for key in self._admin.scan_iter(match=f"{self.settings.prefix}*")]
        if keys:
            await self._admin.delete(*keys)


@pytest.fixture
async def harness(redis_store: RedisStore) -> AsyncIterator[RedisHarness]:
    admin = aioredis.Redis.from_url(redis_store.info.url, socket_timeout=5)
    try:
        harness = RedisHarness(redis_store, admin)
        yield harness
        with contextlib.suppress(RedisError, OSError):  # the server may still be restarting
            await harness.clean()
    finally:
        await admin.aclose()


@pytest.mark.redis
class TestRedisMembership(MembershipContract):
    pass


@pytest.mark.redis
class TestRedisLoadReports(LoadReportsContract):
    pass


@pytest.mark.redis
class TestRedisElection(ElectionContract):
    pass


@pytest.mark.redis
class TestRedisAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.redis
class TestRedisHoldStore(HoldStoreContract):
    pass


@pytest.mark.redis
class TestRedisProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.redis
class TestRedisAgainstTheModel(CoordinationModelContract):
    pass


@pytest.mark.redis
@pytest.mark.anyio
class TestRedisDataLoss:
    """Redis may lose writes (no persistence, or ``appendfsync everysec`` losing its last
    second): fencing and the assignment watch must hold across that."""

    async def test_a_term_handed_out_twice_is_told_apart_by_the_owner_token(
        self, harness: RedisHarness
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("l-old", 30.0)
            await store.publish(owners(1, "a"), leader.fence)
            # After a loss of writes, the counter handed the same term to another leader:
            twin = f"other-token:{leader.term}:l-new"
            await harness._admin.set(Keys(harness.settings.prefix).leader, twin, px=30_000)
            with pytest.raises(FencedError, match="another leadership"):
                await store.publish(owners(2, "b"), leader.fence)
            assert await store.current() == owners(1, "a")

    async def test_after_a_data_loss_the_new_leaders_term_is_higher_and_watchers_follow_it(
        self, harness: RedisHarness
    ) -> None:
        async with (
            harness.election() as election,
            harness.store() as store,
            watching(store.watch()) as seen,
        ):
            old = await election.campaign("l-1", 30.0)
            for generation in range(1, 6):
                await store.publish(owners(generation, "a"), old.fence)
            while (latest := await next_within(seen, 10)).generation < 5:
                pass
            assert latest == owners(5, "a")
            # The data is gone, the term counter with it (or rolled back to an old value).
            await harness.clean()
            await harness._admin.set(Keys(harness.settings.prefix).term, 1)
            new = await election.campaign("l-2", 30.0)
            assert new.term > old.term
            with pytest.raises(FencedError):
                await store.publish(owners(1, "x"), old.fence)
            await store.publish(owners(1, "b"), new.fence)  # generations start again
            assert await next_within(seen, 10) == owners(1, "b")
