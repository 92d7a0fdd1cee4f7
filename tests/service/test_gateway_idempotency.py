"""The gateway's ``Idempotency-Key`` answers, in-process over the in-memory transport and
store: 202 once, 200 replays naming the same message ids, 422 for another body, 503 when
the store does not answer, and nothing lands twice across gateway processes."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from adapters._idempotency_book import AnswerBook
from adapters.memory import InMemoryIdempotencyStore, InMemoryLedger, InMemoryTransport
from core.errors import StoreUnavailableError
from core.idempotency import IdempotentAnswer
from core.ingest import IngestLimits
from core.messages import Envelope, MessageKind, Outcome
from core.partitioning import partition_for
from core.ports import IdempotencyStore
from services.cli.devices import LoadGenerator, LoadPlan, project_id
from services.gateway.app import create_app

pytestmark = pytest.mark.anyio

URL = "/v1/projects/dev-1/messages"
BODY = b'{"t": 1}\n{"t": 2}\n{"t": 3}\n'
PARTITION = partition_for("dev-1", 128)


@asynccontextmanager
async def gateway(
    transport: InMemoryTransport,
    store: IdempotencyStore | None = None,
    ledger: InMemoryLedger | None = None,
    gateway_id: str = "gw-a",
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        transport,
        gateway_id=gateway_id,
        partitions=128,
        limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
        publish_timeout=5.0,
        retry_after_seconds=3,
        ledger=ledger,
        idempotency=store,
        registry=registry,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        yield client


async def _stored(transport: InMemoryTransport, partition: int = PARTITION) -> list[Envelope]:
    subscription = await transport.open(partition, "reader")
    deliveries = await subscription.fetch(1000, 0.1)
    await subscription.close()
    return [d.envelope for d in deliveries]


def _data(envelopes: list[Envelope]) -> list[Envelope]:
    return [e for e in envelopes if e.kind is MessageKind.DATA]


async def test_a_retry_is_answered_200_with_the_same_ids_and_publishes_nothing() -> None:
    ledger = InMemoryLedger()
    registry = CollectorRegistry()
    async with (
        InMemoryTransport() as memory,
        gateway(memory, ledger=ledger, registry=registry) as client,
    ):
        first = await client.post(URL, content=BODY, headers={"Idempotency-Key": "order-17"})
        assert first.status_code == 202
        assert "Idempotent-Replayed" not in first.headers
        body = first.json()
        assert body["gateway_id"].startswith("idem-")
        assert (body["accepted"], body["first_sequence"], body["last_sequence"]) == (3, 1, 3)
        assert body["partition"] == PARTITION
        again = await client.post(URL, content=BODY, headers={"Idempotency-Key": "order-17"})
        assert again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == body
        stored = await _stored(memory)
    metrics = generate_latest(registry).decode()
    assert [e.message_id for e in _data(stored)] == body["message_ids"]
    assert {e.gateway_id for e in _data(stored)} == {body["gateway_id"]}
    assert [e.sequence for e in _data(stored)] == [1, 2, 3]
    assert [e.kind for e in stored].count(MessageKind.ANNOUNCE) == 1
    assert [
        (e.gateway_id, e.first_sequence, e.last_sequence, e.outcome) for e in ledger.entries
    ] == [(body["gateway_id"], 1, 3, Outcome.ACCEPTED)]
    assert "shoal_gateway_idempotent_replays_total 1.0" in metrics
    assert "shoal_gateway_messages_accepted_total 3.0" in metrics


async def test_the_same_messages_framed_or_encoded_otherwise_are_a_replay() -> None:
    async with InMemoryTransport() as memory, gateway(memory) as client:
        headers = {"Idempotency-Key": "k"}
        first = await client.post(URL, content=BODY, headers=headers)
        as_array = await client.post(URL, content=b'[{"t": 1}, {"t": 2},{"t": 3}]', headers=headers)
        gzipped = await client.post(
            URL, content=gzip.compress(BODY), headers={**headers, "Content-Encoding": "gzip"}
        )
    assert first.status_code == 202
    assert (as_array.status_code, gzipped.status_code) == (200, 200)
    assert as_array.json() == gzipped.json() == first.json()


async def test_the_same_key_with_another_body_is_a_422_and_publishes_nothing() -> None:
    async with InMemoryTransport() as memory, gateway(memory) as client:
        headers = {"Idempotency-Key": "order-17"}
        assert (await client.post(URL, content=BODY, headers=headers)).status_code == 202
        before = await memory.backlog(PARTITION)
        other = await client.post(URL, content=b'{"t": 9}', headers=headers)
        assert other.status_code == 422
        assert "was used with a different body" in other.json()["error"]
        assert await memory.backlog(PARTITION) == before


async def test_keys_are_per_project_and_without_a_key_nothing_changes() -> None:
    async with InMemoryTransport() as memory, gateway(memory) as client:
        headers = {"Idempotency-Key": "same"}
        one = await client.post(URL, content=BODY, headers=headers)
        two = await client.post("/v1/projects/dev-2/messages", content=BODY, headers=headers)
        plain = [await client.post(URL, content=BODY) for _ in range(2)]
    assert (one.status_code, two.status_code) == (202, 202)
    assert one.json()["gateway_id"] != two.json()["gateway_id"]
    assert not set(one.json()["message_ids"]) & set(two.json()["message_ids"])
    assert [p.status_code for p in plain] == [202, 202]
    assert [p.json()["gateway_id"] for p in plain] == ["gw-a", "gw-a"]
    assert [p.json()["first_sequence"] for p in plain] == [1, 4]


@pytest.mark.parametrize("key", ["", "a b", "x" * 256, "ключ"])
async def test_a_key_that_is_not_1_to_255_visible_ascii_characters_is_a_400(key: str) -> None:
    async with InMemoryTransport() as memory, gateway(memory) as client:
        response = await client.post(
            URL, content=BODY, headers=[(b"Idempotency-Key", key.encode("utf-8"))]
        )
        assert response.status_code == 400
        assert "Idempotency-Key" in response.json()["error"]
        assert await memory.backlog(PARTITION) == 0


class DownStore(InMemoryIdempotencyStore):
    """The store does not answer."""

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        raise StoreUnavailableError("KV bucket did not answer within 5 s")


async def test_a_store_that_does_not_answer_is_a_503_and_nothing_is_published() -> None:
    ledger = InMemoryLedger()
    async with InMemoryTransport() as memory, gateway(memory, DownStore(), ledger) as client:
        response = await client.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "3"
        assert "idempotency store did not answer" in response.json()["error"]
        assert await memory.backlog(PARTITION) == 0
    assert ledger.entries == []


class ForgetfulStore(InMemoryIdempotencyStore):
    """Recalls nothing and cannot remember (a store that fails after the publish)."""

    async def remember(self, answer: IdempotentAnswer) -> None:
        raise StoreUnavailableError("write not confirmed")


async def test_an_answer_not_remembered_is_still_202_and_the_broker_dedupes_the_retry() -> None:
    ledger = InMemoryLedger()
    async with InMemoryTransport() as memory:
        async with gateway(memory, ForgetfulStore(), ledger) as client:
            first = await client.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
            retry = await client.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
        assert (first.status_code, retry.status_code) == (202, 202)
        assert retry.json() == first.json()
        assert len(_data(await _stored(memory))) == 3
    assert [e.outcome for e in ledger.entries] == [Outcome.ACCEPTED, Outcome.ACCEPTED]


class LostAnswerTransport:
    """Another connection to ``broker`` whose data publishes are stored, then their
    confirmation is lost (the gateway sees a timeout)."""

    def __init__(self, broker: InMemoryTransport) -> None:
        self.broker = broker

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        await self.broker.publish(envelopes)
        if any(e.kind is MessageKind.DATA for e in envelopes):
            raise TimeoutError("confirmation lost")

    def __getattr__(self, name: str) -> object:
        return getattr(self.broker, name)


async def test_two_gateways_and_a_restart_land_a_retried_request_once() -> None:
    """Gateway A is cut off after storing (503); a fresh gateway B (A restarted) and C
    answer the retries: 202 with the same ids, then 200; n messages in the broker."""
    book = AnswerBook(600.0, 1000)  # the shared store
    ledger = InMemoryLedger()
    async with InMemoryTransport() as broker:
        lossy = LostAnswerTransport(broker)
        store_a = InMemoryIdempotencyStore(book=book)
        async with gateway(lossy, store_a, ledger, "gw-a") as a:  # type: ignore[arg-type]
            cut = await a.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
        assert cut.status_code == 503
        async with gateway(broker, InMemoryIdempotencyStore(book=book), ledger, "gw-b") as b:
            retried = await b.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
        async with gateway(broker, InMemoryIdempotencyStore(book=book), ledger, "gw-c") as c:
            replayed = await c.post(URL, content=BODY, headers={"Idempotency-Key": "k"})
        assert retried.status_code == 202
        assert replayed.status_code == 200
        assert replayed.json() == retried.json()
        data = _data(await _stored(broker))
    assert [e.message_id for e in data] == retried.json()["message_ids"]
    series = retried.json()["gateway_id"]
    assert [(e.gateway_id, e.outcome) for e in ledger.entries] == [
        (series, Outcome.REFUSED),
        (series, Outcome.ACCEPTED),
    ]


class SlowTransport(InMemoryTransport):
    """Holds every publish until ``release`` is set; counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.publishes = 0

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        self.publishes += 1
        await self.release.wait()
        await super().publish(envelopes)


async def test_one_key_sent_twice_at_once_to_one_gateway_publishes_once() -> None:
    async with SlowTransport() as slow, gateway(slow) as client:
        answers: list[httpx.Response] = []

        async def post() -> None:
            headers = {"Idempotency-Key": "twice"}
            answers.append(await client.post(URL, content=BODY, headers=headers))

        async with anyio.create_task_group() as tg:
            tg.start_soon(post)
            tg.start_soon(post)
            await anyio.sleep(0.2)
            slow.release.set()
        assert sorted(a.status_code for a in answers) == [200, 202]
        assert answers[0].json() == answers[1].json()
        assert slow.publishes == 2  # the announcement and the data, once
        assert len(_data(await _stored(slow))) == 3


class _LoseFirstAnswers(httpx.AsyncBaseTransport):
    """Deliver each request to the gateway, but lose the answer to the first attempt of
    every batch, as a dropped connection after the gateway stored it would."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner
        self._seen: set[bytes] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        body = request.content
        if body not in self._seen:
            self._seen.add(body)
            await response.aclose()
            raise httpx.ReadError("connection reset after the request was sent", request=request)
        return response


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "unkeyed"])
async def test_the_device_simulator_retrying_lost_answers_lands_each_batch_once_with_keys(
    keys: bool,
) -> None:
    plan = LoadPlan(messages=60, projects=3, batch=5, concurrency=2, idempotency_keys=keys)
    async with InMemoryTransport() as memory:
        app = create_app(
            memory,
            gateway_id="gw-a",
            partitions=128,
            limits=IngestLimits(max_body_bytes=10_000, max_message_bytes=1_000, max_messages=50),
            publish_timeout=5.0,
            retry_after_seconds=1,
            idempotency=InMemoryIdempotencyStore(book=AnswerBook(window=600, max_entries=1_000)),
        )
        generator = LoadGenerator(
            "http://gw", plan, http_transport=_LoseFirstAnswers(httpx.ASGITransport(app=app))
        )
        with anyio.fail_after(30):
            summary = await generator.run()
        stored = [
            e
            for p in {partition_for(project_id(i), 128) for i in (1, 2, 3)}
            for e in _data(await _stored(memory, p))
        ]
    assert summary.transport_errors == 12  # every batch's first answer was lost
    assert summary.accepted_count == 60
    assert sorted(summary.accepted.values()) == list(range(60))
    if keys:
        assert summary.replayed == 12
        assert len(stored) == 60
        assert {e.message_id for e in stored} == set(summary.accepted)
    else:  # without keys each retry is a new request: every batch lands twice
        assert summary.replayed == 0
        assert len(stored) == 120
