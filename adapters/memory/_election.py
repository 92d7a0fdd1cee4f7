"""``InMemoryElection``: the Election port over ``InMemoryCoordination``."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from adapters._lease import LeaderOnLease
from adapters.memory._base import MemoryAdapter
from core.coordination import Leader
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["InMemoryElection", "InMemoryLeadership"]


class InMemoryLeadership(LeaderOnLease):
    async def resign(self) -> None:
        await checkpoint()
        self._lease.lose("resigned")


class InMemoryElection(MemoryAdapter):
    async def campaign(self, candidate_id: MemberId, ttl: float) -> InMemoryLeadership:
        """Wait until nobody leads, then lead with term = the store's next revision."""
        while True:
            changed = self.state.changed()
            await self._step("campaign")
            if self._vacant():
                lease = await self._new_lease(candidate_id, ttl)
                term = self.state.revision + 1
                # Refused when somebody won while the lease was granted.
                if self._vacant() and self.state.apply(
                    self.state.model.lead(Leader(candidate_id, term))
                ):
                    self.state.leader_lease = lease
                    return InMemoryLeadership(lease, candidate_id, term)
                lease.lose("revoked")
            else:
                await changed.wait()

    def _vacant(self) -> bool:
        return self.state.model.leader is None

    async def leader(self) -> LeaderInfo | None:
        await self._step("leader")
        leader = self.state.model.leader
        return None if leader is None else LeaderInfo(leader.leader_id, leader.term)
