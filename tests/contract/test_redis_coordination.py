"""The coordination contract suites against the ports over Redis (``adapters.coordination``
on ``RedisCoordinationStore``), on the module's private Redis that keeps its data across
restarts (``test_redis_kv.redis_store``); and what must hold when Redis loses writes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from adapters.coordination._records import office_value
from adapters.redis import RedisCoordinationStore
from core.errors import FencedError
from infra.local._testservers import ServerInfo
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
    watching,
)
from tests.contract._ports_over_store import PortsHarness
from tests.contract.test_redis_kv import RedisStoreHarness, clean, redis_store

__all__ = ["redis_store"]  # the module's server fixture, shared with test_redis_kv


class RedisPorts(PortsHarness):
    def __init__(
        self, server: ServerInfo, stores: RedisStoreHarness, admin: RedisCoordinationStore
    ) -> None:
        super().__init__(stores, admin)
        self.server, self.stores = server, stores

    async def lose_all_data(self) -> None:
        await clean(self.server, self.stores)


@pytest.fixture
async def harness(redis_store: ServerInfo) -> AsyncIterator[RedisPorts]:
    stores = RedisStoreHarness(redis_store)
    async with RedisCoordinationStore(stores.settings) as admin:
        yield RedisPorts(redis_store, stores, admin)
    await clean(redis_store, stores)


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
        self, harness: RedisPorts
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("l-old", 30.0)
            await store.publish(owners(1, "a"), leader.fence)
            # After a loss of writes, the store handed the same term to another leader:
            twin = office_value("l-new", "other-token")
            admin = aioredis.Redis.from_url(harness.server.url, socket_timeout=5)
            try:
                office = f"{harness.stores.settings.prefix}kv:k:leader/office"
                assert await admin.hset(office, "v", twin) == 0  # the key was there
            finally:
                await admin.aclose()
            with pytest.raises(FencedError, match="another leadership"):
                await store.publish(owners(2, "b"), leader.fence)
            assert await store.current() == owners(1, "a")

    async def test_after_a_data_loss_the_new_leaders_term_is_higher_and_watchers_follow_it(
        self, harness: RedisPorts
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
            # The data is gone, the revision counter with it.
            await harness.lose_all_data()
            new = await election.campaign("l-2", 30.0)
            assert new.term > old.term
            with pytest.raises(FencedError):
                await store.publish(owners(1, "x"), old.fence)
            await store.publish(owners(1, "b"), new.fence)  # generations start again
            assert await next_within(seen, 10) == owners(1, "b")
