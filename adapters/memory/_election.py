"""``InMemoryElection``: the Election port over ``InMemoryCoordination``."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from adapters.memory._base import MemoryAdapter
from adapters.memory._coordination import InMemoryCoordination, MemoryLease
from core.coordination import Leader
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["InMemoryElection", "InMemoryLeadership"]


class InMemoryLeadership:
    def __init__(self, state: InMemoryCoordination, lease: MemoryLease, term: int) -> None:
        self._state = state
        self._lease = lease
        self._term = term

    @property
    def term(self) -> int:
        return self._term

    @property
    def leader_id(self) -> MemberId:
        return self._lease.owner_id

    def is_lost(self) -> bool:
        return self._lease.is_lost()

    async def wait_lost(self) -> None:
        await self._lease.wait_lost()

    def pause_renewal(self) -> None:
        """Fault injection for tests: stop renewing, as a paused process would."""
        self._lease.pause_renewal()

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
                    return InMemoryLeadership(self.state, lease, term)
                lease.lose("revoked")
            else:
                await changed.wait()

    def _vacant(self) -> bool:
        return self.state.model.leader is None

    async def leader(self) -> LeaderInfo | None:
        await self._step("leader")
        leader = self.state.model.leader
        return None if leader is None else LeaderInfo(leader.leader_id, leader.term)
