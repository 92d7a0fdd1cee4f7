"""The leader loop publishes only while its leadership holds by its own clock: a process
resumed past its deadline (paused, swapped out) may find a store that has not ended its
term yet (Kafka's log learns it at the group's next rebalance), so it checks first."""

from __future__ import annotations

import pytest

from adapters.memory import (
    InMemoryAssignmentStore,
    InMemoryCoordination,
    InMemoryElection,
    InMemoryMembership,
)
from core.assignment import strategy_named
from core.coordination import Leader
from core.model import MemberId
from core.ports import Leadership
from services.common.settings import LeaderSettings
from services.leader.leader_loop import LeaderLoop

pytestmark = pytest.mark.anyio


class PastItsDeadline:
    """A leadership the store still names whose own deadline has passed (the process was
    paused past it and the store has not ended the term yet)."""

    def __init__(self, held: Leadership) -> None:
        self._held = held

    @property
    def term(self) -> int:
        return self._held.term

    @property
    def fence(self) -> Leader:
        return self._held.fence

    @property
    def leader_id(self) -> MemberId:
        return self._held.leader_id

    def is_lost(self) -> bool:
        return True

    async def wait_lost(self) -> None:
        return None

    async def resign(self) -> None:
        await self._held.resign()


async def test_a_leader_past_its_deadline_publishes_nothing() -> None:
    state = InMemoryCoordination()
    async with (
        InMemoryElection(state) as election,
        InMemoryMembership(state) as membership,
        InMemoryAssignmentStore(state) as store,
    ):
        loop = LeaderLoop(
            settings=LeaderSettings(id="leader", lease_ttl=10.0, debounce=0.01),
            partitions=4,
            strategy=strategy_named("sticky"),
            election=election,
            membership=membership,
            store=store,
        )
        leadership = await election.campaign("leader", 10.0)
        assert await loop.reconcile(PastItsDeadline(leadership), frozenset({"h1"})) is None
        assert await store.current() is None
        published = await loop.reconcile(leadership, frozenset({"h1"}))  # the store takes it
        assert published is not None
        assert await store.current() == published
