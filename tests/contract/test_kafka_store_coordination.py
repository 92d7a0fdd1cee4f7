"""The coordination contract suites against the ports over Kafka's log dialect
(``adapters.coordination`` on ``KafkaCoordinationStore``, the session's broker).

Restarts: the suites' two restart checks hold a 10 s lease across ``restart_store``, and
the local broker takes 8.5-10 s to restart on the 2-core machine (SIGTERM + JVM start), so
those leases are lost *by design* (no renewal for a whole TTL; the contract requires the
loss). ``restartable`` is therefore off here, and ``TestKafkaRestart`` runs the same two
checks with leases that outlive a restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.kafka._kv import KafkaCoordinationStore
from infra.local._testservers import ServerInfo
from tests._unavailable import local_process
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    Features,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    next_within,
    owners,
    retry_while_unavailable,
    until,
    watching,
)
from tests.contract._ports_over_store import PortsHarness
from tests.contract.test_kafka_kv import EXPIRY_SLACK, KafkaStoreHarness, clean

# Outlives a broker restart on a slow, busy machine.
RESTART_TTL = 60.0


@pytest.fixture
async def harness(kafka_server: ServerInfo) -> AsyncIterator[PortsHarness]:
    stores = KafkaStoreHarness(kafka_server)
    stores.features = Features(restartable=False, expiry_slack=EXPIRY_SLACK)
    async with KafkaCoordinationStore(stores.settings) as admin:
        yield PortsHarness(stores, admin)
    await clean(kafka_server, stores)


@pytest.mark.kafka
class TestKafkaLogMembership(MembershipContract):
    pass


@pytest.mark.kafka
class TestKafkaLogLoadReports(LoadReportsContract):
    pass


@pytest.mark.kafka
class TestKafkaLogElection(ElectionContract):
    pass


@pytest.mark.kafka
class TestKafkaLogAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.kafka
class TestKafkaLogHoldStore(HoldStoreContract):
    pass


@pytest.mark.kafka
class TestKafkaLogProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.kafka
class TestKafkaLogAgainstTheModel(CoordinationModelContract):
    pass


@pytest.mark.kafka
@pytest.mark.anyio
class TestKafkaRestart:
    """The suites' ``test_watch_resumes_when_store_restarts``, with leases (and waits) as
    long as ``RESTART_TTL``."""

    async def test_member_watch_resumes_when_the_broker_restarts(
        self, harness: PortsHarness, kafka_server: ServerInfo
    ) -> None:
        local_process(kafka_server, "restart")  # a Docker or external broker cannot be restarted
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await membership.join("a", RESTART_TTL)
            assert await next_within(updates) == {"a"}
            await harness.restart_store()
            await retry_while_unavailable(lambda: membership.join("b", RESTART_TTL), RESTART_TTL)
            await until(updates, lambda m: m == {"a", "b"}, RESTART_TTL)
            assert not a.is_lost()

    async def test_assignment_watch_resumes_when_the_broker_restarts(
        self, harness: PortsHarness, kafka_server: ServerInfo
    ) -> None:
        local_process(kafka_server, "restart")  # a Docker or external broker cannot be restarted
        async with (
            harness.election() as election,
            harness.store() as store,
            watching(store.watch()) as updates,
        ):
            leader = await election.campaign("leader", RESTART_TTL)
            await store.publish(owners(1, "a"), leader.fence)
            assert await next_within(updates) == owners(1, "a")
            await store.publish(owners(2, "b"), leader.fence)
            assert await next_within(updates) == owners(2, "b")
            await harness.restart_store()
            await retry_while_unavailable(
                lambda: store.publish(owners(3, "c"), leader.fence), RESTART_TTL
            )
            assert await next_within(updates, RESTART_TTL) == owners(3, "c")
            assert not leader.is_lost()
