"""The handler across datacenters, in-process: one in-memory transport per cluster, the
route table in the in-memory store. Every owned partition is read from each consumed
cluster (two logs, each landed exactly once), and an ordered route being migrated holds
its new cluster's messages back until the table releases them, then lands them in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from adapters.memory import InMemoryRouteStore, InMemoryTransport
from core.routing import Route, RouteTable, default_table, parse_cluster_map
from services.common.clusters import Datacenters
from tests.service._world import World, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 4
CLUSTERS = parse_cluster_map("east=mem://e,west=mem://w")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=PARTITIONS) as world:
        yield world


@pytest.fixture
async def dcs() -> AsyncIterator[dict[str, InMemoryTransport]]:
    async with InMemoryTransport(ack_wait=1.0) as east, InMemoryTransport(ack_wait=1.0) as west:
        yield {"east": east, "west": west}


class LaggingRouteStore(InMemoryRouteStore):
    """The route store as a handler sees it between two polls: ``current()`` answers the
    stored table, the watch only the tables ``catch_up`` lets through."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: list[RouteTable | None] = []
        self._caught_up = anyio.Event()
        self.followed = anyio.Event()  # the watcher applied the first table and asks for more

    async def catch_up(self) -> None:
        self._shown.append(await self.current())
        self._caught_up.set()
        self._caught_up = anyio.Event()

    async def watch(self) -> AsyncIterator[RouteTable | None]:
        yield await self.current()
        self.followed.set()
        seen = 0
        while True:
            caught_up = self._caught_up
            for table in self._shown[seen:]:
                seen += 1
                yield table
            await caught_up.wait()


async def start(
    world: World, dcs: dict[str, InMemoryTransport], routes: InMemoryRouteStore
) -> None:
    await world.start_leader("leader")
    await world.start_handler("h1", datacenters=Datacenters(CLUSTERS, dcs, routes, None))


async def test_every_cluster_is_read_and_lands_exactly_once(
    world: World, dcs: dict[str, InMemoryTransport]
) -> None:
    await start(world, dcs, InMemoryRouteStore())
    ids = await world.publish(300, ("p1", "p2", "p3"), to=dcs["east"])
    ids |= await world.publish(300, ("p1", "p4"), to=dcs["west"], first_sequence=1000)
    rows = await world.until_landed(ids)
    landed = [str(r["message_id"]) for r in rows]
    assert len(landed) == len(set(landed)) == 600


async def test_an_ordered_migration_holds_the_target_back_until_released(
    world: World, dcs: dict[str, InMemoryTransport]
) -> None:
    default = default_table(CLUSTERS).default
    routes = InMemoryRouteStore()
    await routes.put(RouteTable(1, default, (Route("o-", "east", ("east",), ordered=True),)))
    await start(world, dcs, routes)
    # the switch: produce to west, east still draining, west's messages held back
    switching = Route("o-", "west", ("east", "west"), ordered=True, draining=("east",))
    await routes.put(RouteTable(2, default, (switching,)))
    later = await world.publish(50, ("o-1",), to=dcs["west"], first_sequence=51)
    earlier = await world.publish(50, ("o-1",), to=dcs["east"], first_sequence=1)
    other = await world.publish(20, ("x-1",), to=dcs["west"])  # not held: lands now
    rows = await world.until_landed(earlier | other)
    assert not later & {str(r["message_id"]) for r in rows}
    # the sources drained: the target only, which releases the held messages
    await routes.put(RouteTable(3, default, (Route("o-", "west", ("west",), ordered=True),)))
    rows = await world.until_landed(earlier | later | other)
    assert _landed_order(rows, "o-1") == list(range(1, 101))
    with anyio.fail_after(5):
        while True:  # the held messages are acked once landed (no event to await)
            if not [p for p in range(PARTITIONS) for t in dcs.values() if await t.backlog(p)]:
                break
            await anyio.sleep(0.05)


async def test_a_message_published_on_a_table_the_handler_has_not_seen_yet_waits_for_it(
    world: World, dcs: dict[str, InMemoryTransport]
) -> None:
    """A gateway polled the route store before the handler: its first messages to the new
    cluster arrive while the handler's table still says the route reads only the old one.
    The handler reads the stored table before it lands them, so they are held back too."""
    default = default_table(CLUSTERS).default
    routes = LaggingRouteStore()
    await routes.put(RouteTable(1, default, (Route("o-", "east", ("east",), ordered=True),)))
    await start(world, dcs, routes)
    await routes.followed.wait()
    switching = Route("o-", "west", ("east", "west"), ordered=True, draining=("east",))
    await routes.put(RouteTable(2, default, (switching,)))  # stored, not shown to the handler
    later = await world.publish(50, ("o-1",), to=dcs["west"], first_sequence=51)
    earlier = await world.publish(50, ("o-1",), to=dcs["east"], first_sequence=1)
    other = await world.publish(20, ("x-1",), to=dcs["west"])  # west is read: x- lands now
    rows = await world.until_landed(earlier | other)
    assert not later & {str(r["message_id"]) for r in rows}
    await routes.put(RouteTable(3, default, (Route("o-", "west", ("west",), ordered=True),)))
    await routes.catch_up()
    rows = await world.until_landed(earlier | later | other)
    assert _landed_order(rows, "o-1") == list(range(1, 101))


def _landed_order(rows: list[dict[str, Any]], project: str) -> list[int]:
    """``project``'s sequences in landing order: handled_at is when the handler took a
    row, and the rows of one take keep their fetch order."""
    ordered = sorted((r for r in rows if r["project_id"] == project), key=lambda r: r["handled_at"])
    return [int(r["sequence"]) for r in ordered]
