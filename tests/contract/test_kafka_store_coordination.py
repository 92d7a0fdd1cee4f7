"""The coordination contract suites against the ports over Kafka's log dialect
(``adapters.coordination`` on ``KafkaCoordinationStore``, the session's broker).

Restarts: the local broker takes 8.5-10 s to restart on the 2-core machine (SIGTERM + JVM
start), longer than the suites' usual 10 s leases live unrenewed, so the restart checks
hold leases of ``RESTART_TTL`` here (``Features.restart_ttl``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from adapters.kafka._kv import KafkaCoordinationStore
from infra.local._testservers import ServerInfo
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
)
from tests.contract._ports_over_store import PortsHarness
from tests.contract.test_kafka_kv import KafkaStoreHarness, clean

# Outlives a broker restart on a slow, busy machine.
RESTART_TTL = 60.0


@pytest.fixture
async def harness(kafka_server: ServerInfo) -> AsyncIterator[PortsHarness]:
    stores = KafkaStoreHarness(kafka_server)
    stores.features = replace(stores.features, restart_ttl=RESTART_TTL)
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
