"""``InMemoryMembership`` and ``InMemoryLoadReports`` over ``InMemoryCoordination``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from anyio.lowlevel import checkpoint

from adapters._lease import MemberOnLease, reporting_lease
from adapters.memory._base import MemoryAdapter
from adapters.memory._coordination import MemoryLease
from core.errors import LeaseLostError, MemberExistsError
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["InMemoryLoadReports", "InMemoryMembership", "InMemoryMembershipLease"]


class InMemoryMembershipLease(MemberOnLease):
    def __init__(self, lease: MemoryLease) -> None:
        super().__init__(lease, lease.owner_id)
        self.memory_lease = lease

    async def leave(self) -> None:
        await checkpoint()
        self._lease.lose("revoked")


class InMemoryMembership(MemoryAdapter):
    async def join(self, member_id: MemberId, ttl: float) -> InMemoryMembershipLease:
        await self._step("join")
        if member_id in self.state.model.members:
            raise MemberExistsError(f"member {member_id!r} is already live")
        lease = await self._new_lease(member_id, ttl)
        applied = self.state.model.join(member_id)
        if not self.state.apply(applied):  # joined meanwhile
            lease.lose("revoked")
            raise MemberExistsError(applied.reason)
        self.state.member_leases[member_id] = lease
        return InMemoryMembershipLease(lease)

    async def members(self) -> frozenset[MemberId]:
        await self._step("members")
        return self.state.model.members

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        last: frozenset[MemberId] | None = None
        while True:
            changed = self.state.changed()
            if self.state.available:
                members = self.state.model.members
                if members != last:
                    last = members
                    yield members
            await changed.wait()


class InMemoryLoadReports(MemoryAdapter):
    """Reports kept beside the member's lease: they go when it does."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        held = reporting_lease(lease, InMemoryMembershipLease).memory_lease
        await self._step("report")
        if self.state.member_leases.get(held.owner_id) is not held:
            held.lose("member record deleted or replaced")
            raise LeaseLostError(f"member {held.owner_id}: its record is gone")
        self.state.reports[held.owner_id] = stats

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        await self._step("reports")
        return dict(sorted(self.state.reports.items()))
