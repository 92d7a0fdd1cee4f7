"""What every in-memory coordination adapter shares: the state and a task group."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from adapters._lifecycle import Lifecycle
from adapters.memory._coordination import InMemoryCoordination, MemoryLease


class MemoryAdapter(Lifecycle):
    """``async with`` starts the task group that renews leases; leaving ends the leases
    still held (as the etcd adapters revoke theirs) and cancels the renewals."""

    def __init__(self, state: InMemoryCoordination) -> None:
        self.state = state
        self._leases: set[MemoryLease] = set()

    async def _wind_down(self) -> None:
        for lease in list(self._leases):
            lease.lose("revoked: adapter closed")
        self._leases.clear()

    async def _new_lease(self, owner_id: str, ttl: float) -> MemoryLease:
        tasks = self._tasks
        self.state.check("lease grant")
        self._leases = {held for held in self._leases if not held.is_lost()}
        lease = MemoryLease(self.state, owner_id, ttl)
        self._leases.add(lease)
        await tasks.start(lease.keep_alive)
        return lease

    async def _step(self, what: str) -> None:
        """A checkpoint standing for the network round trip of a real store."""
        await checkpoint()
        self.state.check(what)
