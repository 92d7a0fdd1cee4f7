"""The AssignmentStore, HoldStore and ProjectRegistry ports over ``InMemoryCoordination``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from adapters.memory._base import MemoryAdapter
from core.coordination import Hold, Leader, Registration, registration, replaced_version, unseen
from core.errors import FencedError
from core.model import Assignment, MemberId, Partition

__all__ = ["InMemoryAssignmentStore", "InMemoryHoldStore", "InMemoryProjectRegistry"]


class InMemoryAssignmentStore(MemoryAdapter):
    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        await self._step("publish")
        applied = self.state.model.publish(assignment, fence)
        if not self.state.apply(applied):
            raise FencedError(applied.reason)
        self.state.history.append(assignment)

    async def current(self) -> Assignment | None:
        await self._step("current")
        return self.state.model.assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then every newer one published (the last 256 are kept
        for a watcher that falls behind), in order of generation."""
        last: int | None = None
        while True:
            changed = self.state.changed()
            if self.state.available and self.state.history:
                for assignment in unseen(list(self.state.history), last):
                    last = assignment.generation
                    yield assignment
            await changed.wait()


class InMemoryHoldStore(MemoryAdapter):
    """The ``HoldStore`` port on the in-memory store: the handoff lock of each partition."""

    async def holds(self) -> Mapping[Partition, Hold]:
        await self._step("holds")
        return dict(sorted(self.state.model.holds.items()))

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        last: dict[Partition, Hold] | None = None
        while True:
            changed = self.state.changed()
            if self.state.available:
                holds = dict(sorted(self.state.model.holds.items()))
                if holds != last:
                    last = holds
                    yield dict(holds)
            await changed.wait()

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        replaced = replaced_version(partition, replacing)
        await self._step("claim")
        return self.state.apply(
            self.state.model.claim(
                partition,
                member_id,
                generation,
                replacing=replaced,
                version=self.state.revision + 1,
            )
        )

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        await self._step("release")
        self.state.apply(self.state.model.release(partition, member_id))


class InMemoryProjectRegistry(MemoryAdapter):
    """The ``ProjectRegistry`` port on the in-memory store: the projects seen on each
    partition, with their expiry (``core.coordination``'s rules as they are)."""

    async def register(
        self,
        partition: Partition,
        project_ids: Sequence[str],
        *,
        now: float,
        ttl: float,
        cap: int,
    ) -> Registration:
        await self._step("register")
        before = self.state.model
        self.state.apply(
            before.register_projects(partition, project_ids, now=now, ttl=ttl, cap=cap)
        )
        return registration(before, self.state.model, partition, project_ids, now)

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        await self._step("projects")
        return self.state.model.live_projects(partition, now)
