"""``InMemoryMembership``: the Membership port over ``InMemoryCoordination``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from anyio.lowlevel import checkpoint

from adapters._lease import MemberOnLease
from adapters.memory._base import MemoryAdapter
from adapters.memory._coordination import InMemoryCoordination, MemoryLease
from core.errors import LeaseLostError, MemberExistsError
from core.model import MemberId, MemberStats

__all__ = ["InMemoryMembership", "InMemoryMembershipLease"]


class InMemoryMembershipLease(MemberOnLease):
    def __init__(self, state: InMemoryCoordination, lease: MemoryLease) -> None:
        super().__init__(lease, lease.owner_id)
        self._state = state

    async def _write(self, stats: MemberStats) -> None:
        await checkpoint()
        self._state.check("update")
        if self._state.member_leases.get(self.member_id) is not self._lease:
            self._lease.lose("member record deleted or replaced")
            raise LeaseLostError(f"member {self.member_id}: its record is gone")
        self._state.apply(self._state.model.update(self.member_id, stats))

    async def leave(self) -> None:
        await checkpoint()
        self._lease.lose("revoked")


class InMemoryMembership(MemoryAdapter):
    async def join(
        self, member_id: MemberId, stats: MemberStats, ttl: float
    ) -> InMemoryMembershipLease:
        await self._step("join")
        if member_id in self.state.model.members:
            raise MemberExistsError(f"member {member_id!r} is already live")
        lease = await self._new_lease(member_id, ttl)
        applied = self.state.model.join(member_id, stats)
        if not self.state.apply(applied):  # joined meanwhile
            lease.lose("revoked")
            raise MemberExistsError(applied.reason)
        self.state.member_leases[member_id] = lease
        return InMemoryMembershipLease(self.state, lease)

    async def members(self) -> Mapping[MemberId, MemberStats]:
        await self._step("members")
        return self._snapshot()

    async def watch(self) -> AsyncIterator[Mapping[MemberId, MemberStats]]:
        last: dict[MemberId, MemberStats] | None = None
        while True:
            changed = self.state.changed()
            if self.state.available:
                members = self._snapshot()
                if members != last:
                    last = members
                    yield dict(members)
            await changed.wait()

    def _snapshot(self) -> dict[MemberId, MemberStats]:
        return dict(sorted(self.state.model.members.items()))
