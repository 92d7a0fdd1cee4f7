"""The coordination contract suites against the in-memory adapters."""

from __future__ import annotations

import pytest

from adapters.memory import (
    InMemoryAssignmentStore,
    InMemoryCoordination,
    InMemoryElection,
    InMemoryHoldStore,
    InMemoryLeadership,
    InMemoryLoadReports,
    InMemoryMembership,
    InMemoryMembershipLease,
    InMemoryProjectRegistry,
)
from core.ports import AssignmentStore, Leadership, MembershipLease
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


class MemoryHarness:
    features = Features(restartable=False)

    def __init__(self) -> None:
        self.state = InMemoryCoordination()

    def membership(self) -> InMemoryMembership:
        return InMemoryMembership(self.state)

    def reports(self) -> InMemoryLoadReports:
        return InMemoryLoadReports(self.state)

    def election(self) -> InMemoryElection:
        return InMemoryElection(self.state)

    def store(self) -> InMemoryAssignmentStore:
        return InMemoryAssignmentStore(self.state)

    def hold_store(self) -> InMemoryHoldStore:
        return InMemoryHoldStore(self.state)

    def registry(self) -> InMemoryProjectRegistry:
        return InMemoryProjectRegistry(self.state)

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        return store, "_step"  # before the model applies the write, check and all

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        owner = lease.member_id if isinstance(lease, InMemoryMembershipLease) else None
        if isinstance(lease, InMemoryLeadership):
            owner = lease.leader_id
        assert owner is not None, f"not an in-memory lease: {lease!r}"
        self.state.expire(owner)

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, InMemoryMembershipLease | InMemoryLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        raise NotImplementedError("an in-memory store does not restart")


@pytest.fixture
def harness() -> MemoryHarness:
    return MemoryHarness()


class TestInMemoryMembership(MembershipContract):
    pass


class TestInMemoryLoadReports(LoadReportsContract):
    pass


class TestInMemoryElection(ElectionContract):
    pass


class TestInMemoryAssignmentStore(AssignmentStoreContract):
    pass


class TestInMemoryHoldStore(HoldStoreContract):
    pass


class TestInMemoryProjectRegistry(ProjectRegistryContract):
    pass


class TestInMemoryAgainstTheModel(CoordinationModelContract):
    pass
