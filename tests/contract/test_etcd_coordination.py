"""The coordination contract suites against the ports over etcd (the ``etcd_server``
fixture): ``adapters.coordination`` on ``EtcdCoordinationStore``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from etcd3aio import Etcd3Client, prefix_range_end

from adapters.etcd import EtcdCoordinationStore
from infra.local._testservers import ServerInfo
from tests.contract._coordination import (
    LONG_TTL,
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    flood,
    owners,
)
from tests.contract._ports_over_store import PortsHarness
from tests.contract.test_etcd_kv import EtcdStoreHarness, clean


@pytest.fixture
async def harness(etcd_server: ServerInfo) -> AsyncIterator[PortsHarness]:
    stores = EtcdStoreHarness(etcd_server)
    async with EtcdCoordinationStore(stores.settings) as admin:
        yield PortsHarness(stores, admin)
    await clean(etcd_server, stores)


@pytest.mark.etcd
class TestEtcdMembership(MembershipContract):
    pass


@pytest.mark.etcd
class TestEtcdLoadReports(LoadReportsContract):
    pass


@pytest.mark.etcd
class TestEtcdElection(ElectionContract):
    pass


@pytest.mark.etcd
class TestEtcdAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.etcd
class TestEtcdHoldStore(HoldStoreContract):
    pass


@pytest.mark.etcd
class TestEtcdProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.etcd
class TestEtcdAgainstTheModel(CoordinationModelContract):
    pass


@pytest.mark.etcd
@pytest.mark.anyio
async def test_a_flood_of_20k_project_ids_leaves_at_most_the_cap_of_keys_in_etcd(
    harness: PortsHarness, etcd_server: ServerInfo
) -> None:
    """Issue 13: random valid project ids used to leave one permanent key each, until etcd
    ran out of its quota (NOSPACE) and refused claims and assignment writes. With a cap
    of 1,000, 20,000 new ids leave at most 1,000 keys under the partition's prefix, and
    the store still takes claims and assignments."""
    started = time.monotonic()
    async with (
        harness.registry() as registry,
        harness.election() as election,
        harness.store() as store,
        harness.hold_store() as hold_store,
    ):
        done = await flood(registry, 4, 20_000, cap=1_000, now=time.time())
        assert (len(done.added), len(done.refused)) == (1_000, 19_000)
        assert isinstance(registry.store, EtcdCoordinationStore)
        prefix = f"{registry.store.settings.prefix}/kv/projects/4/"
        async with Etcd3Client(etcd_server.endpoints) as admin:
            assert admin.kv is not None
            stored = await admin.kv.get(prefix, prefix_range_end(prefix), timeout=5)
        assert len(stored.kvs) == 1_000
        leader = await election.campaign("leader", LONG_TTL)
        await store.publish(owners(1, "a", "a", "a", "a", "a"), leader.fence)
        assert await hold_store.claim(4, "a", 1, None)
    assert time.monotonic() - started < 30
