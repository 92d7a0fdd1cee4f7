"""The gateway's HTTP contract, in-process over the in-memory transport (which passes the
same Transport contract suite as NATS)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from adapters.memory import InMemoryLedger, InMemoryTransport
from core.errors import PublishError
from core.ingest import IngestLimits
from core.messages import Envelope, MessageKind, Outcome
from core.partitioning import partition_for
from services.gateway.app import create_app

pytestmark = pytest.mark.anyio


class RefusingTransport(InMemoryTransport):
    """The broker is down: nothing is confirmed."""

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        raise PublishError(f"0 of {len(envelopes)} stored: no responders")


async def _client(
    transport: InMemoryTransport, ledger: InMemoryLedger | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        transport,
        gateway_id="gw-test",
        partitions=128,
        limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
        publish_timeout=5.0,
        retry_after_seconds=3,
        ledger=ledger,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        yield client


@pytest.fixture
async def memory() -> AsyncIterator[InMemoryTransport]:
    async with InMemoryTransport() as transport:
        yield transport


@pytest.fixture
async def client(memory: InMemoryTransport) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(memory):
        yield c


async def _stored(transport: InMemoryTransport, partition: int) -> list[Envelope]:
    subscription = await transport.open(partition, "reader")
    deliveries = await subscription.fetch(1000, 0.1)
    await subscription.close()
    return [d.envelope for d in deliveries]


async def test_ndjson_batch_is_stamped_and_announced_when_project_is_new(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    body = b'{"t": 1}\n{"t": 2}\n\n{"t": 3}\n'
    response = await client.post("/v1/projects/dev-1/messages", content=body)
    assert response.status_code == 202
    answer = response.json()
    assert (answer["accepted"], answer["first_sequence"], answer["last_sequence"]) == (3, 1, 3)
    partition = partition_for("dev-1", 128)
    assert answer["partition"] == partition
    stored = await _stored(memory, partition)
    assert [e.kind for e in stored] == [MessageKind.ANNOUNCE] + [MessageKind.DATA] * 3
    data = stored[1:]
    assert [e.payload for e in data] == [b'{"t": 1}', b'{"t": 2}', b'{"t": 3}']
    assert [e.sequence for e in data] == [1, 2, 3]
    assert [e.message_id for e in data] == answer["message_ids"]
    assert {e.gateway_id for e in stored} == {"gw-test"}


async def test_sequence_continues_and_no_second_announcement_when_project_posts_again(
    client: httpx.AsyncClient, memory: InMemoryTransport
) -> None:
    await client.post("/v1/projects/dev-2/messages", json={"a": 1})
    response = await client.post("/v1/projects/dev-2/messages", json={"a": 2})
    assert response.json()["first_sequence"] == 2
    stored = await _stored(memory, partition_for("dev-2", 128))
    assert sum(e.kind is MessageKind.ANNOUNCE for e in stored) == 1


@pytest.mark.parametrize(
    ("project", "body", "status", "says"),
    [
        ("bad.id", b'{"a": 1}', 400, "must match"),
        ("x" * 65, b'{"a": 1}', 400, "must match"),
        ("ok", b"not json", 400, "not valid JSON"),
        ("ok", b"[1, 2]", 400, "expected an object"),
        ("ok", b"", 400, "empty body"),
        ("ok", b'{"a": "' + b"x" * 2000 + b'"}', 413, "limit is 1000"),
        ("ok", b'{"a": 1}\n' * 51, 413, "limit is 50"),
    ],
)
async def test_request_is_refused_and_nothing_published_when_input_is_bad(
    client: httpx.AsyncClient,
    memory: InMemoryTransport,
    project: str,
    body: bytes,
    status: int,
    says: str,
) -> None:
    response = await client.post(f"/v1/projects/{project}/messages", content=body)
    assert response.status_code == status
    assert says in response.json()["error"]
    assert [await memory.backlog(p) for p in range(128)] == [0] * 128


async def test_503_with_retry_after_when_broker_does_not_confirm() -> None:
    async with RefusingTransport() as refusing:
        async for client in _client(refusing):
            response = await client.post("/v1/projects/dev-3/messages", json={"a": 1})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    assert "no responders" in response.json()["error"]


async def test_health_and_metrics_when_messages_were_accepted(client: httpx.AsyncClient) -> None:
    await client.post("/v1/projects/dev-4/messages", content=b'{"a": 1}\n{"a": 2}')
    assert (await client.get("/healthz")).json()["status"] == "ok"
    assert (await client.get("/readyz")).status_code == 200
    metrics = (await client.get("/metrics")).text
    assert "shoal_gateway_messages_accepted_total 2.0" in metrics
    assert json.loads((await client.get("/healthz")).text)["gateway_id"] == "gw-test"


async def test_ledger_records_accepted_and_refused_ranges_when_a_ledger_is_given() -> None:
    ledger = InMemoryLedger()
    async with InMemoryTransport() as memory:
        async for client in _client(memory, ledger):
            await client.post("/v1/projects/dev-5/messages", content=b'{"a": 1}\n{"a": 2}')
            await client.post("/v1/projects/bad.id/messages", json={"a": 1})  # reserves nothing
    async with RefusingTransport() as refusing:
        async for client in _client(refusing, ledger):
            await client.post("/v1/projects/dev-5/messages", json={"a": 3})
    assert [
        (e.project_id, e.first_sequence, e.last_sequence, e.outcome) for e in ledger.entries
    ] == [
        ("dev-5", 1, 2, Outcome.ACCEPTED),
        ("dev-5", 1, 1, Outcome.REFUSED),  # a second gateway app: its own sequences
    ]
