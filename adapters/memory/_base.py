"""What every in-memory coordination adapter shares: the state and a task group."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint

from adapters.memory._coordination import InMemoryCoordination, MemoryLease
from core.errors import StoreUnavailableError


class MemoryAdapter:
    """``async with`` starts the task group that renews leases; leaving ends the leases
    still held (as the etcd adapters revoke theirs) and cancels the renewals."""

    def __init__(self, state: InMemoryCoordination) -> None:
        self.state = state
        self._task_group: TaskGroup | None = None
        self._leases: set[MemoryLease] = set()

    async def __aenter__(self) -> Self:
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        for lease in list(self._leases):
            lease.end("revoked: adapter closed")
        self._leases.clear()
        if task_group is not None:
            task_group.cancel_scope.cancel()
            return await task_group.__aexit__(exc_type, exc_value, traceback)
        return None

    async def _new_lease(self, owner_id: str, ttl: float) -> MemoryLease:
        if self._task_group is None:
            raise StoreUnavailableError(
                f"{type(self).__name__} is not open: use it as `async with ...`"
            )
        self.state.check("lease grant")
        self._leases = {held for held in self._leases if not held.is_lost()}
        lease = MemoryLease(self.state, owner_id, ttl)
        self._leases.add(lease)
        await self._task_group.start(lease.keep_alive)
        return lease

    async def _step(self, what: str) -> None:
        """A checkpoint standing for the network round trip of a real store."""
        await checkpoint()
        self.state.check(what)
