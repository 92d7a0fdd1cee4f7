"""The gateway across datacenters (``RoutedPublisher``), in-process over one in-memory
transport per cluster: each project goes to its route's cluster, an unordered route falls
back to another consumed cluster while its own refuses, an ordered one never does, and
the answer is 202 only once a cluster confirmed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from adapters.memory import InMemoryRouteStore, InMemoryTransport
from core.errors import PublishError
from core.ingest import IngestLimits
from core.messages import Envelope
from core.partitioning import partition_for
from core.routing import Route, RouteTable, default_table, parse_cluster_map
from services.gateway.app import create_app
from services.gateway.routed import RoutedPublisher

pytestmark = pytest.mark.anyio

CLUSTERS = parse_cluster_map("east=nats://e:4222,west=nats://w:4222")


class Switchable(InMemoryTransport):
    """A cluster that can be down: then it confirms nothing."""

    down = False

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        if self.down:
            raise PublishError(f"0 of {len(envelopes)} stored: not connected")
        await super().publish(envelopes)


@pytest.fixture
async def dcs() -> AsyncIterator[dict[str, Switchable]]:
    async with Switchable() as east, Switchable() as west:
        yield {"east": east, "west": west}


@pytest.fixture
async def routes() -> InMemoryRouteStore:
    store = InMemoryRouteStore()
    default = default_table(CLUSTERS).default
    await store.put(
        RouteTable(
            1,
            default,
            (
                Route("w-", "west", ("west",)),
                Route("o-", "east", ("east",), ordered=True),
            ),
        )
    )
    return store


@pytest.fixture
async def client(
    dcs: dict[str, Switchable], routes: InMemoryRouteStore
) -> AsyncIterator[httpx.AsyncClient]:
    publisher = RoutedPublisher(dcs, routes, CLUSTERS, local="east")
    app = create_app(
        publisher,
        gateway_id="gw-east",
        partitions=16,
        limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
        publish_timeout=5.0,
        retry_after_seconds=1,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as http:
        yield http


async def stored(transport: InMemoryTransport, project: str) -> int:
    return await transport.backlog(partition_for(project, 16))


async def test_projects_go_to_their_routes_cluster(
    client: httpx.AsyncClient, dcs: dict[str, Switchable]
) -> None:
    for project in ("any-1", "w-1", "o-1"):
        response = await client.post(f"/v1/projects/{project}/messages", json={"n": 1})
        assert response.status_code == 202
    assert (await stored(dcs["east"], "any-1"), await stored(dcs["west"], "any-1")) == (2, 0)
    assert (await stored(dcs["east"], "w-1"), await stored(dcs["west"], "w-1")) == (0, 2)
    assert (await stored(dcs["east"], "o-1"), await stored(dcs["west"], "o-1")) == (2, 0)


async def test_a_default_route_falls_back_to_another_cluster_while_its_own_is_down(
    client: httpx.AsyncClient, dcs: dict[str, Switchable]
) -> None:
    dcs["east"].down = True
    response = await client.post("/v1/projects/any-2/messages", json=[{"n": 1}, {"n": 2}])
    assert response.status_code == 202
    assert (await stored(dcs["east"], "any-2"), await stored(dcs["west"], "any-2")) == (0, 3)


async def test_an_ordered_route_does_not_fall_back_and_answers_503(
    client: httpx.AsyncClient, dcs: dict[str, Switchable]
) -> None:
    dcs["east"].down = True
    response = await client.post("/v1/projects/o-2/messages", json={"n": 1})
    assert response.status_code == 503
    assert "east: 0 of 2 stored" in response.json()["error"]
    assert await stored(dcs["west"], "o-2") == 0


async def test_503_when_no_cluster_confirms(
    client: httpx.AsyncClient, dcs: dict[str, Switchable]
) -> None:
    dcs["east"].down = dcs["west"].down = True
    response = await client.post("/v1/projects/any-3/messages", json={"n": 1})
    assert response.status_code == 503
    assert "not confirmed by any cluster" in response.json()["error"]


async def test_a_route_change_counts_from_the_next_request(
    client: httpx.AsyncClient, dcs: dict[str, Switchable], routes: InMemoryRouteStore
) -> None:
    table = await routes.current()
    assert table is not None
    await routes.put(RouteTable(2, table.default, (Route("any-", "west", ("west",)),)))
    assert (await client.post("/v1/projects/any-4/messages", json={"n": 1})).status_code == 202
    assert (await stored(dcs["east"], "any-4"), await stored(dcs["west"], "any-4")) == (0, 2)


async def test_a_table_naming_an_unknown_cluster_is_refused_and_the_last_good_kept(
    client: httpx.AsyncClient, dcs: dict[str, Switchable], routes: InMemoryRouteStore
) -> None:
    assert (await client.post("/v1/projects/w-4/messages", json={"n": 1})).status_code == 202
    table = await routes.current()
    assert table is not None
    await routes.put(RouteTable(2, table.default, (Route("w-", "north", ("north",)),)))
    assert (await client.post("/v1/projects/w-5/messages", json={"n": 1})).status_code == 202
    assert await stored(dcs["west"], "w-5") == 2
