"""Leader and handlers wired in one process over the in-memory adapters: balanced
assignment, data landing, failover of a handler and of the leader, and a clean leave.
The same flows run on real processes and servers in tests/e2e."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from adapters.memory import InMemoryHoldStore
from tests.service._world import World, balanced, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 12
PROJECTS = tuple(f"proj-{i}" for i in range(7))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=PARTITIONS) as w:
        yield w


async def test_data_lands_once_per_message_when_three_handlers_share_partitions(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2", "h3"):
        await world.start_handler(h)
    assignment = await world.assignment_where(balanced({"h1", "h2", "h3"}))
    assert sorted(len(p) for p in assignment.by_member().values()) == [4, 4, 4]
    ids = await world.publish(300, PROJECTS)
    await world.until_landed(ids)
    rows = await world.landed()
    assert len(rows) == len({r["message_id"] for r in rows}) == 300
    for row in rows:
        assert assignment.owners[int(str(row["partition"]))] == (row["handler_id"],)


async def test_partitions_move_and_nothing_is_lost_when_a_handler_lease_expires(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2", "h3"):
        await world.start_handler(h)
    before = await world.assignment_where(balanced({"h1", "h2", "h3"}))
    lost_partitions = set(before.owned_by("h2"))
    world.stops["h2"].set()  # stop its process loop...
    world.state.expire("h2")  # ...as a crash would: no drain, no release
    after = await world.assignment_where(balanced({"h1", "h3"}))
    assert not set(after.owned_by("h2"))
    ids = await world.publish(200, PROJECTS)
    await world.until_landed(ids)
    takers = {r["handler_id"] for r in (await world.landed()) if r["partition"] in lost_partitions}
    assert takers <= {"h1", "h3"} and takers


async def test_standby_takes_over_with_higher_term_when_leader_lease_expires(
    world: World,
) -> None:
    first = await world.start_leader("l1")
    await world.start_handler("h1")
    await world.assignment_where(balanced({"h1"}))
    second = await world.start_leader("l2")
    assert first.leadership is not None
    old_term = first.leadership.term
    world.state.expire("l1")
    world.stops["l1"].set()
    await world.start_handler("h2")
    await world.assignment_where(balanced({"h1", "h2"}))
    assert second.leadership is not None and second.leadership.term > old_term


async def test_rebalance_is_immediate_and_all_partitions_released_when_handler_leaves(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2"):
        await world.start_handler(h)
    await world.assignment_where(balanced({"h1", "h2"}))
    world.stops["h2"].set()
    after = await world.assignment_where(balanced({"h1"}))
    assert len(after.owned_by("h1")) == PARTITIONS
    async with InMemoryHoldStore(world.state) as store:
        with anyio.fail_after(5):
            async for holds in store.watch_holds():
                if {h.member_id for h in holds.values()} == {"h1"} and len(holds) == PARTITIONS:
                    break
