"""No stuck partitions: a handler that cannot release a partition it gave up (its store
calls fail) does not stop it. The release is retried until it works; a holder that never
releases is taken over after ``claim_patience``. Either way everything lands, once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from adapters.memory import InMemoryHoldStore, InMemoryMembership
from core.coordination import Hold
from core.errors import StoreUnavailableError
from core.model import MemberId, Partition
from core.ports import HoldStore
from tests.service._world import World, balanced, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 6
PROJECTS = tuple(f"proj-{i}" for i in range(5))


class FailingReleases:
    """A hold store whose first ``failures`` releases raise (the store did not answer), and
    whose claims raise while ``claims_blocked``."""

    def __init__(self, store: HoldStore, failures: int) -> None:
        self._store = store
        self.failures_left = failures
        self.attempts = 0
        self.claims_blocked = False  # while True every claim raises too

    async def holds(self) -> Mapping[Partition, Hold]:
        return await self._store.holds()

    def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        return self._store.watch_holds()

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        if self.claims_blocked:
            raise StoreUnavailableError("the store did not answer the claim in time")
        return await self._store.claim(partition, member_id, generation, replacing)

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        self.attempts += 1
        if self.failures_left > 0:
            self.failures_left -= 1
            raise StoreUnavailableError("the store did not answer the release in time")
        await self._store.release(partition, member_id)


class SlowReleases(FailingReleases):
    """A hold store whose every release takes ``delay`` seconds to be answered (a store
    slow right after its restart)."""

    def __init__(self, store: HoldStore, delay: float) -> None:
        super().__init__(store, failures=0)
        self.delay = delay

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        await anyio.sleep(self.delay)
        await super().release(partition, member_id)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=PARTITIONS) as w:
        yield w


async def _held_by(world: World, member: str, partitions: set[Partition], within: float) -> None:
    async with InMemoryHoldStore(world.state) as store:
        with anyio.fail_after(within):
            async for holds in store.watch_holds():
                if all(p in holds and holds[p].member_id == member for p in partitions):
                    return


async def _live(world: World, members: set[str]) -> None:
    async with InMemoryMembership(world.state) as membership:
        with anyio.fail_after(10):
            async for live in membership.watch():
                if members <= live:
                    return


async def _moved_to_h2(world: World, **h1_settings: Any) -> FailingReleases:
    """h1 owns every partition and lands a first load; then h2 joins and half move."""
    flaky: list[FailingReleases] = []

    def wrap(store: HoldStore) -> HoldStore:
        flaky.append(FailingReleases(store, failures=0))
        return flaky[-1]

    await world.start_leader("l1")
    await world.start_handler("h1", holds=wrap, retry_delay=0.1, retry_cap=0.4, **h1_settings)
    await world.assignment_where(balanced({"h1"}))
    await world.until_landed(await world.publish(120, PROJECTS))
    return flaky[0]


async def test_a_release_that_fails_is_retried_and_the_next_owner_lands(world: World) -> None:
    releases = await _moved_to_h2(world)
    releases.failures_left = 6  # every moved partition's first releases fail
    await world.start_handler("h2")
    after = await world.assignment_where(balanced({"h1", "h2"}))
    moved = set(after.owned_by("h2"))
    await _held_by(world, "h2", moved, within=20)
    assert releases.failures_left == 0 and releases.attempts > 6
    ids = await world.publish(300, PROJECTS)
    rows = await world.until_landed(ids, within=30)
    fresh = [r for r in rows if r["message_id"] in ids]
    assert len(fresh) == len({r["message_id"] for r in fresh}) == 300
    assert {r["handler_id"] for r in fresh if r["partition"] in moved} == {"h2"}


async def test_a_live_holder_that_never_releases_is_taken_over_after_patience(
    world: World,
) -> None:
    releases = await _moved_to_h2(world, drain_timeout=0.5)
    releases.failures_left = 1_000_000  # h1 stays live and never manages to release
    await world.start_handler("h2", drain_timeout=0.5, claim_patience=2.0)
    after = await world.assignment_where(balanced({"h1", "h2"}))
    moved = set(after.owned_by("h2"))
    await _held_by(world, "h2", moved, within=20)
    ids = await world.publish(300, PROJECTS)
    rows = await world.until_landed(ids, within=30)
    fresh = [r for r in rows if r["message_id"] in ids]
    assert len(fresh) == len({r["message_id"] for r in fresh}) == 300
    assert {r["handler_id"] for r in fresh if r["partition"] in moved} == {"h2"}
    assert releases.attempts > len(moved)  # h1 kept retrying all along


@pytest.mark.parametrize("release_delay", [0.0, 2.0])
async def test_a_handler_back_under_its_old_id_frees_the_holds_its_crash_left(
    world: World, release_delay: float
) -> None:
    """Also when each release takes 2 s to be answered: three of them one after the other
    ran past the 5 s the handler gives its earlier run's holds, and h2 waited patience."""
    h1_holds = await _moved_to_h2(world)
    h2_holds: list[FailingReleases] = []

    def wrap(store: HoldStore) -> HoldStore:
        h2_holds.append(FailingReleases(store, failures=0))
        return h2_holds[-1]

    await world.start_handler("h2", holds=wrap, retry_delay=0.1, retry_cap=0.4)
    await world.assignment_where(balanced({"h1", "h2"}))
    h2_holds[0].claims_blocked = True  # h2 cannot take anything over for now
    h1_holds.failures_left = 1_000_000  # h1 dies holding its partitions, as SIGKILL would
    world.kill("h1")
    everything = await world.assignment_where(balanced({"h2"}))
    world.stops["l1"].set()  # no leader: the assignment stays "everything to h2"
    # the same id, a new run: its old holds are stale
    await world.start_handler("h1", holds=lambda store: SlowReleases(store, release_delay))
    await _live(world, {"h1", "h2"})
    h2_holds[0].claims_blocked = False
    # h1 is live again and owns nothing; patience (60 s) is far beyond this bound
    await _held_by(world, "h2", set(everything.owned_by("h2")), within=10)
    ids = await world.publish(300, PROJECTS)
    rows = await world.until_landed(ids, within=20)
    fresh = [r for r in rows if r["message_id"] in ids]
    assert len(fresh) == len({r["message_id"] for r in fresh}) == 300
    assert {r["handler_id"] for r in fresh} == {"h2"}
