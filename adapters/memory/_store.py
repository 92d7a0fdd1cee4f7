"""``InMemoryAssignmentStore``: the AssignmentStore port over ``InMemoryCoordination``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from adapters.memory._base import MemoryAdapter
from core.errors import FencedError
from core.model import Assignment, MemberId, Partition
from core.ports import Hold

__all__ = ["InMemoryAssignmentStore"]


class InMemoryAssignmentStore(MemoryAdapter):
    async def publish(self, assignment: Assignment, term: int) -> None:
        await self._step("publish")
        leader = self.state.leader
        if leader is None:
            raise FencedError(f"term {term} is not current: nobody leads now")
        if leader.term != term:
            raise FencedError(
                f"term {term} is not current: {leader.leader_id!r} leads with term {leader.term}"
            )
        if self.state.assignments:
            stored, stored_term = self.state.assignments[-1]
            if assignment.generation <= stored.generation:
                raise FencedError(
                    f"generation {assignment.generation} is not above the stored generation "
                    f"{stored.generation} (published by term {stored_term})"
                )
        self.state.publish(assignment, term)

    async def current(self) -> Assignment | None:
        await self._step("current")
        return self.state.assignments[-1][0] if self.state.assignments else None

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then every newer one published (the last 256 are kept
        for a watcher that falls behind), in order of generation."""
        last: int | None = None
        while True:
            changed = self.state.changed()
            if self.state.available and self.state.assignments:
                history = [a for a, _ in self.state.assignments]
                if last is None:
                    history = history[-1:]
                for assignment in history:
                    if last is None or assignment.generation > last:
                        last = assignment.generation
                        yield assignment
            await changed.wait()

    async def holds(self) -> Mapping[Partition, Hold]:
        await self._step("holds")
        return dict(sorted(self.state.holds.items()))

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        last: dict[Partition, Hold] | None = None
        while True:
            changed = self.state.changed()
            if self.state.available:
                holds = dict(sorted(self.state.holds.items()))
                if holds != last:
                    last = holds
                    yield dict(holds)
            await changed.wait()

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        if replacing is not None and replacing.partition != partition:
            raise ValueError(f"cannot claim partition {partition} replacing a hold on {replacing}")
        await self._step("claim")
        current = self.state.holds.get(partition)
        if replacing is None and current is not None:
            return False
        if replacing is not None and (current is None or current.version != replacing.version):
            return False
        version = self.state.revision + 1
        self.state.holds[partition] = Hold(partition, member_id, generation, version)
        self.state.bump()
        return True

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        await self._step("release")
        current = self.state.holds.get(partition)
        if current is not None and current.member_id == member_id:
            del self.state.holds[partition]
            self.state.bump()

    async def register_project(self, partition: Partition, project_id: str) -> bool:
        await self._step("register_project")
        projects = self.state.projects.setdefault(partition, set())
        if project_id in projects:
            return False
        projects.add(project_id)
        self.state.bump()
        return True

    async def projects(self, partition: Partition) -> frozenset[str]:
        await self._step("projects")
        return frozenset(self.state.projects.get(partition, ()))
