"""The coordination contract suites against etcd (the ``etcd_server`` fixture)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from etcd3aio import Etcd3Client, EtcdError, prefix_range_end

from adapters.etcd import (
    EtcdAssignmentStore,
    EtcdElection,
    EtcdHoldStore,
    EtcdLeadership,
    EtcdLoadReports,
    EtcdMembership,
    EtcdMembershipLease,
    EtcdProjectRegistry,
    EtcdSettings,
)
from core.ports import AssignmentStore, Leadership, MembershipLease
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
    server_features,
)


class EtcdHarness:
    """Adapters on a fresh key prefix (one group per test) of the session's etcd."""

    def __init__(self, server: ServerInfo, admin: Etcd3Client) -> None:
        self._server = server
        self._admin = admin
        self.admin = admin
        self.settings = EtcdSettings(
            endpoints=tuple(server.endpoints), group=f"t-{uuid.uuid4().hex[:12]}"
        )
        # etcd grants at least 2 s and checks expiry every 500 ms
        self.features = server_features(server, expiry_slack=3.0)

    def membership(self) -> EtcdMembership:
        return EtcdMembership(self.settings)

    def reports(self) -> EtcdLoadReports:
        return EtcdLoadReports(self.settings)

    def election(self) -> EtcdElection:
        return EtcdElection(self.settings)

    def store(self) -> EtcdAssignmentStore:
        return EtcdAssignmentStore(self.settings)

    def hold_store(self) -> EtcdHoldStore:
        return EtcdHoldStore(self.settings)

    def registry(self) -> EtcdProjectRegistry:
        return EtcdProjectRegistry(self.settings)

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        assert isinstance(store, EtcdAssignmentStore)
        return store._client, "txn"

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, EtcdMembershipLease | EtcdLeadership)
        assert self._admin.lease is not None
        await self._admin.lease.revoke(lease.lease_id, timeout=5)

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, EtcdMembershipLease | EtcdLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)

    async def clean(self) -> None:
        assert self._admin.kv is not None
        prefix = self.settings.prefix + "/"
        await self._admin.kv.delete(prefix, prefix_range_end(prefix), timeout=5)


@pytest.fixture
async def harness(etcd_server: ServerInfo) -> AsyncIterator[EtcdHarness]:
    async with Etcd3Client(etcd_server.endpoints) as admin:
        harness = EtcdHarness(etcd_server, admin)
        yield harness
        with contextlib.suppress(EtcdError):  # the server may still be restarting
            await harness.clean()


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
    harness: EtcdHarness,
) -> None:
    """Issue 13: random valid project ids used to leave one permanent key each, until etcd
    ran out of its quota (NOSPACE) and refused claims and assignment writes. With a cap
    of 1,000, 20,000 new ids leave at most 1,000 keys under the partition's prefix, all on
    one shared lease, and the store still takes claims and assignments."""
    started = time.monotonic()
    async with (
        harness.registry() as registry,
        harness.election() as election,
        harness.store() as store,
        harness.hold_store() as hold_store,
    ):
        done = await flood(registry, 4, 20_000, cap=1_000, now=time.time())
        assert (len(done.added), len(done.refused)) == (1_000, 19_000)
        assert harness.admin.kv is not None
        prefix = f"{harness.settings.prefix}/projects/4/"
        stored = await harness.admin.kv.get(prefix, prefix_range_end(prefix), timeout=5)
        assert len(stored.kvs) == 1_000
        assert len({kv.lease for kv in stored.kvs}) == 1  # one lease per period, not per key
        leader = await election.campaign("leader", LONG_TTL)
        await store.publish(owners(1, "a", "a", "a", "a", "a"), leader.fence)
        assert await hold_store.claim(4, "a", 1, None)
    assert time.monotonic() - started < 30
