"""The coordination contract suites against the ports over the in-memory dialect
(``adapters.coordination`` on one ``InMemoryCoordinationStore`` on the real clock, shared
by every adapter of a test, as one server would be)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext

import anyio
import pytest

from adapters.memory import InMemoryCoordinationStore
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    Features,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
)
from tests.contract._ports_over_store import PortsHarness


class SharedMemoryStore:
    features = Features(restartable=False)

    def __init__(self, shared: InMemoryCoordinationStore) -> None:
        self.shared = shared

    def store(self) -> AbstractAsyncContextManager[InMemoryCoordinationStore]:
        return nullcontext(self.shared)

    async def pass_time(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def restart_store(self) -> None:
        raise NotImplementedError("an in-memory store does not restart")


@pytest.fixture
async def harness() -> AsyncIterator[PortsHarness]:
    async with InMemoryCoordinationStore() as shared:
        yield PortsHarness(SharedMemoryStore(shared), shared, shared=True)


class TestMemoryStoreMembership(MembershipContract):
    pass


class TestMemoryStoreLoadReports(LoadReportsContract):
    pass


class TestMemoryStoreElection(ElectionContract):
    pass


class TestMemoryStoreAssignmentStore(AssignmentStoreContract):
    pass


class TestMemoryStoreHoldStore(HoldStoreContract):
    pass


class TestMemoryStoreProjectRegistry(ProjectRegistryContract):
    pass


class TestMemoryStoreAgainstTheModel(CoordinationModelContract):
    pass
