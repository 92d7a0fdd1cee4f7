"""The coordination contract suites against the ports over NATS JetStream KV
(``adapters.coordination`` on ``NatsKvCoordinationStore``, the session's nats-server), and
what the bucket must keep."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import nats
import pytest
from nats.js.api import StorageType

from adapters.coordination import StoreMembership
from adapters.natskv import NatsKvCoordinationStore, NatsKvSettings
from infra.local._testservers import ServerInfo
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    restart_checks_run,
    retry_while_unavailable,
    until,
    watching,
)
from tests.contract._ports_over_store import TIMING, PortsHarness
from tests.contract.test_natskv_kv import EXPIRY_SLACK, NatsKvStoreHarness, clean


class NatsKvPorts(PortsHarness):
    def __init__(
        self, server: ServerInfo, stores: NatsKvStoreHarness, admin: NatsKvCoordinationStore
    ) -> None:
        super().__init__(stores, admin)
        self.server, self.settings = server, stores.settings


@pytest.fixture
async def harness(nats_server: ServerInfo) -> AsyncIterator[NatsKvPorts]:
    stores = NatsKvStoreHarness(nats_server)
    async with NatsKvCoordinationStore(stores.settings) as admin:
        yield NatsKvPorts(nats_server, stores, admin)
    await clean(nats_server, stores)


@pytest.mark.natskv
class TestNatsKvMembership(MembershipContract):
    pass


@pytest.mark.natskv
class TestNatsKvLoadReports(LoadReportsContract):
    pass


@pytest.mark.natskv
class TestNatsKvElection(ElectionContract):
    pass


@pytest.mark.natskv
class TestNatsKvAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.natskv
class TestNatsKvHoldStore(HoldStoreContract):
    pass


@pytest.mark.natskv
class TestNatsKvProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.natskv
class TestNatsKvAgainstTheModel(CoordinationModelContract):
    pass


def test_the_bucket_name_is_derived_from_the_group() -> None:
    assert NatsKvSettings(group="g-1").bucket_name == "shoal_g-1"
    assert NatsKvSettings(group="g", bucket="mine").bucket_name == "mine"


@pytest.mark.natskv
@pytest.mark.anyio
async def test_the_bucket_keeps_per_key_ttls_and_expiry_markers_on_file_storage(
    nats_server: ServerInfo,
) -> None:
    """Created with TTLs and markers; a bucket made before without them is switched over
    (else TTL writes are refused and expirations invisible to the watchers)."""
    stores = NatsKvStoreHarness(nats_server)
    bucket = stores.settings.bucket_name
    admin = await nats.connect(nats_server.url)
    try:
        js = admin.jetstream()
        await js.create_key_value(bucket=bucket, history=1)  # a plain one
        with anyio.fail_after(10):
            async with StoreMembership(stores.store(), TIMING) as membership:
                lease = await membership.join("a", 1.0)
                info = await js.stream_info(f"KV_{bucket}")
                assert info.config.allow_msg_ttl
                assert info.config.subject_delete_marker_ttl == stores.settings.marker_ttl
                assert info.config.storage == StorageType.FILE
                lease.pause_renewal()
                async with watching(membership.watch()) as updates:
                    await until(updates, lambda m: m == set(), 1.0 + EXPIRY_SLACK + 2)
    finally:
        await admin.close()
        await clean(nats_server, stores)


@pytest.mark.natskv
@pytest.mark.anyio
async def test_a_member_that_left_stays_gone_after_the_server_is_killed(
    harness: NatsKvPorts,
) -> None:
    """nats-io/nats-server#8505 (open on 2.15.1): on a one-replica file stream, a value
    removed by a purge comes back after an unclean shutdown once its marker expired. With
    TTL'd delete markers (1 s here, 60 s by default then) a member that left came back
    for good; a delete marker without a TTL keeps it shadowed."""
    restart_checks_run(harness.features)
    server = harness.server.process
    assert server is not None
    settings = harness.settings.model_copy(update={"marker_ttl": 1.0})
    async with StoreMembership(NatsKvCoordinationStore(settings), TIMING) as membership:
        await membership.join("stays", 60.0)
        leaving = await membership.join("leaves", 60.0)
        await leaving.leave()
        assert await membership.members() == {"stays"}
        # The bug needs the marker gone: a TTL'd one would have expired by now. Time is
        # the condition here, not a stand-in for an event.
        await anyio.sleep(settings.marker_ttl + EXPIRY_SLACK + 1.0)
        await anyio.to_thread.run_sync(server.kill)
        await anyio.to_thread.run_sync(server.restart)
        assert await retry_while_unavailable(membership.members) == {"stays"}
