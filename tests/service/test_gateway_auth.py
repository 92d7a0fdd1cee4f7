"""API keys at the gateway (in-process, in-memory transport and key store): who may write
which project, how fast, and that a refused request stores and records nothing."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import httpx
import pytest

from adapters.memory import InMemoryApiKeys, InMemoryLedger, InMemoryTransport
from core.access import issue_key
from core.ingest import IngestLimits
from core.partitioning import partition_for
from services.gateway.app import create_app

pytestmark = pytest.mark.anyio

URL = "/v1/projects/{}/messages"


class World:
    def __init__(self) -> None:
        self.transport = InMemoryTransport()
        self.keys = InMemoryApiKeys()
        self.ledger = InMemoryLedger()
        self.serial = 0

    async def key(self, *projects: str, rate: float | None = None) -> str:
        self.serial += 1
        token, record = issue_key(
            f"{self.serial:012x}",
            "s" * 40 + str(self.serial),
            projects=projects or None,
            created_at=1.0,
            rate=rate,
        )
        await self.keys.add(record)
        return token

    async def stored(self, project: str) -> int:
        subscription = await self.transport.open(partition_for(project, 16), "reader")
        deliveries = await subscription.fetch(10_000, 0.05)
        await subscription.close()
        return len(deliveries)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    async with w.transport:
        yield w


@pytest.fixture
async def client(world: World) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        world.transport,
        gateway_id="gw-auth",
        partitions=16,
        limits=IngestLimits(),
        publish_timeout=5.0,
        retry_after_seconds=3,
        ledger=world.ledger,
        api_keys=world.keys,
        key_rate=5.0,
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (None, "missing API key"),
        ("", "missing API key"),
        ("Basic dXNlcjpwYXNz", "must be 'Bearer <key>'"),
        ("Bearer", "must be 'Bearer <key>'"),
        ("Bearer not-a-key", "not a shoal API key"),
        ("Bearer shoal_XYZ_secret", "not a shoal API key"),
        ("Bearer shoal_0123456789ab_" + "s" * 41, "invalid API key"),  # unknown id
    ],
)
async def test_a_request_without_a_valid_key_is_401_and_changes_nothing(
    client: httpx.AsyncClient, world: World, header: str | None, says: str
) -> None:
    headers = {} if header is None else {"authorization": header}
    response = await client.post(URL.format("dev-1"), content=b'{"a": 1}', headers=headers)
    assert response.status_code == 401
    assert says in response.json()["error"]
    assert response.headers["www-authenticate"] == 'Bearer realm="shoal"'
    assert await world.stored("dev-1") == 0
    assert world.ledger.entries == []


async def test_a_wrong_secret_for_a_real_key_id_is_401(
    client: httpx.AsyncClient, world: World
) -> None:
    token = await world.key()
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    response = await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(forged))
    assert (response.status_code, response.json()["error"]) == (401, "invalid API key")
    assert await world.stored("dev-1") == 0


async def test_a_project_key_writes_its_projects_only(
    client: httpx.AsyncClient, world: World
) -> None:
    token = await world.key("dev-1", "dev-2")
    for project in ("dev-1", "dev-2"):
        response = await client.post(URL.format(project), content=b"{}", headers=bearer(token))
        assert response.status_code == 202, response.text
    refused = await client.post(URL.format("dev-3"), content=b"{}", headers=bearer(token))
    assert refused.status_code == 403
    assert "may not write project 'dev-3'" in refused.json()["error"]
    assert await world.stored("dev-3") == 0
    assert [e.project_id for e in world.ledger.entries] == ["dev-1", "dev-2"]


async def test_an_admin_key_writes_any_project_and_bad_ids_still_get_400(
    client: httpx.AsyncClient, world: World
) -> None:
    token = await world.key()
    ok = await client.post(URL.format("anything-at-all"), content=b"{}", headers=bearer(token))
    assert ok.status_code == 202
    bad = await client.post(URL.format("no spaces"), content=b"{}", headers=bearer(token))
    assert bad.status_code == 400


async def test_a_revoked_key_is_refused_from_the_next_request(
    client: httpx.AsyncClient, world: World
) -> None:
    token = await world.key()
    assert (
        await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(token))
    ).status_code == 202
    await world.keys.revoke(token.split("_")[1], at=2.0)
    refused = await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(token))
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]


async def test_past_its_rate_a_key_gets_429_and_other_keys_do_not(
    client: httpx.AsyncClient, world: World
) -> None:
    greedy, patient = await world.key(), await world.key()
    answers = [
        (await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(greedy)))
        for _ in range(40)
    ]
    codes = [a.status_code for a in answers]
    # key_rate 5/s with bursts of 10: the burst passes, then refusals (a few tokens may
    # refill while 40 requests run: at most 5 per second of the test).
    assert codes[:10] == [202] * 10
    assert 429 in codes
    refused = next(a for a in answers if a.status_code == 429)
    assert "over its limit of 5 requests per second" in refused.json()["error"]
    assert 1 <= int(refused.headers["retry-after"]) <= math.ceil(1 / 5)
    accepted = codes.count(202)
    assert await world.stored("dev-1") == accepted + 1  # + the announcement
    assert sum(e.last_sequence - e.first_sequence + 1 for e in world.ledger.entries) == accepted
    other = await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(patient))
    assert other.status_code == 202


async def test_a_key_with_its_own_rate_uses_it(client: httpx.AsyncClient, world: World) -> None:
    token = await world.key(rate=1.0)  # bursts of 2
    codes = [
        (await client.post(URL.format("dev-1"), content=b"{}", headers=bearer(token))).status_code
        for _ in range(3)
    ]
    assert codes == [202, 202, 429]


async def test_status_endpoints_need_no_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    # metrics are served on a port of their own (services.common.metrics.metrics_app)
    assert (await client.get("/metrics")).status_code == 404
