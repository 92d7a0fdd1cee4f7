"""``Idempotency-Key`` end to end on a real broker: gateway apps with their own transport
and store (each one gateway process's worth of state) on real NATS and real Kafka.

Two cases per broker, checked at the point of truth (what the broker stored, or what a
subscriber of the partition is delivered):

- a retry to another gateway after the first one was closed (a restart): 200 with the
  same message ids, and the partition holds the request's n messages once;
- the first answer is lost (the broker stored the messages, the gateway answered 503):
  the retry to another gateway is 202 with the same ids, and n messages are delivered
  (NATS drops the re-publish as a duplicate id; on Kafka the re-published records are
  stored again and the subscription skips them by message id).
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import nats
import pytest
from nats.js.errors import NotFoundError

from adapters.kafka import KafkaIdempotencyStore, KafkaSettings, KafkaTransport
from adapters.kafka._aiokafka import AIOKafkaAdminClient, AIOKafkaConsumer, TopicPartition
from adapters.nats import NatsIdempotencyStore, NatsSettings, NatsTransport
from core.idempotency import fingerprint, identity
from core.ingest import IngestLimits
from core.messages import Envelope, MessageKind
from core.packing import parts_in
from core.partitioning import partition_for
from core.ports import Transport
from infra.local._testservers import ServerInfo
from services.gateway.app import create_app
from tests._stored import stored_messages

pytestmark = pytest.mark.anyio

PARTITIONS = 4
PROJECT = "dev-idem"
PAYLOADS = [b'{"reading": %d}' % i for i in range(5)]
BODY = b"\n".join(PAYLOADS)
URL = f"/v1/projects/{PROJECT}/messages"
LIMIT = 60.0


class LostAnswer:
    """A transport whose data publishes are stored, then answered with a timeout."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        await self.inner.publish(envelopes)
        if any(e.kind is MessageKind.DATA for e in envelopes):
            raise TimeoutError("the broker's confirmation was lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@asynccontextmanager
async def gateway(
    transport: NatsTransport | KafkaTransport,
    store: NatsIdempotencyStore | KafkaIdempotencyStore,
    *,
    lose_answers: bool = False,
) -> AsyncIterator[httpx.AsyncClient]:
    """One gateway process: its transport and store entered, its app, a client."""
    async with AsyncExitStack() as stack:
        entered = await stack.enter_async_context(transport)
        await stack.enter_async_context(store)
        app = create_app(
            LostAnswer(entered) if lose_answers else entered,  # type: ignore[arg-type]
            gateway_id=f"gw-{uuid.uuid4().hex[:6]}",
            partitions=PARTITIONS,
            limits=IngestLimits(),
            publish_timeout=10.0,
            retry_after_seconds=1,
            idempotency=store,
        )
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")
        yield await stack.enter_async_context(client)


def expected_ids(key: str) -> list[str]:
    return identity(PROJECT, key, fingerprint(PAYLOADS)).message_ids(len(PAYLOADS))


async def delivered(transport: Transport) -> list[Envelope]:
    """Every data message a subscriber of the project's partition is delivered."""
    subscription = await transport.open(partition_for(PROJECT, PARTITIONS), "audit")
    out: list[Envelope] = []
    try:
        while batch := await subscription.fetch(1000, 2.0):
            out += [d.envelope for d in batch if d.envelope.kind is MessageKind.DATA]
    finally:
        await subscription.close()
    return out


async def retried_across_gateways(
    new_transport: Any, new_store: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both cases; returns the two 202 answers (restart case, lost-answer case)."""
    headers = {"Idempotency-Key": "restart-1"}
    async with gateway(new_transport(), new_store()) as a:
        first = await a.post(URL, content=BODY, headers=headers)
    assert first.status_code == 202
    assert first.json()["message_ids"] == expected_ids("restart-1")
    async with gateway(new_transport(), new_store()) as b:  # A restarted, or another one
        again = await b.post(URL, content=BODY, headers=headers)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()

    headers = {"Idempotency-Key": "lost-1"}
    async with gateway(new_transport(), new_store(), lose_answers=True) as c:
        cut = await c.post(URL, content=BODY, headers=headers)
    assert cut.status_code == 503
    async with gateway(new_transport(), new_store()) as d:
        retried = await d.post(URL, content=BODY, headers=headers)
        replayed = await d.post(URL, content=BODY, headers=headers)
    assert retried.status_code == 202
    assert retried.json()["message_ids"] == expected_ids("lost-1")
    assert replayed.status_code == 200
    return first.json(), retried.json()


def per_series(envelopes: list[Envelope]) -> Counter[str]:
    return Counter(e.gateway_id for e in envelopes)


@pytest.fixture
async def nats_settings(nats_server: ServerInfo) -> AsyncIterator[NatsSettings]:
    tag = uuid.uuid4().hex[:10]
    settings = NatsSettings(
        url=nats_server.url,
        stream=f"T{tag}",
        subject_prefix=f"t{tag}.data",
        dead_letter_stream=f"T{tag}_DLQ",
        dead_letter_prefix=f"t{tag}.dlq",
        reconnect_wait=0.2,
    )
    yield settings
    nc = await nats.connect(settings.url)
    try:
        for stream in (settings.stream, settings.dead_letter_stream):
            with contextlib.suppress(NotFoundError):
                await nc.jetstream().delete_stream(stream)
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(f"KV_{settings.stream}_IDEMPOTENCY")
    finally:
        await nc.close()


@pytest.mark.nats
async def test_a_retried_request_lands_once_on_nats(nats_settings: NatsSettings) -> None:
    with anyio.fail_after(LIMIT):
        first, retried = await retried_across_gateways(
            lambda: NatsTransport(nats_settings),
            lambda: NatsIdempotencyStore(nats_settings, window=600.0),
        )
        async with NatsTransport(nats_settings) as transport:
            # the stream itself: n data messages per request, nothing more
            subject = transport.subjects.data(partition_for(PROJECT, PARTITIONS), PROJECT)
            stored = await stored_messages(nats_settings.url, nats_settings.stream, subject)
            assert stored == 2 * len(PAYLOADS)
            landed = await delivered(transport)
    counts = per_series(landed)
    assert counts == {first["gateway_id"]: 5, retried["gateway_id"]: 5}
    assert sorted(e.message_id for e in landed) == sorted(
        first["message_ids"] + retried["message_ids"]
    )


@pytest.fixture
async def kafka_settings(kafka_server: ServerInfo) -> AsyncIterator[KafkaSettings]:
    tag = uuid.uuid4().hex[:10]
    settings = KafkaSettings(
        bootstrap_servers=tuple(kafka_server.endpoints),
        group=f"t{tag}",
        topic=f"t{tag}.data",
        dead_letter_topic=f"t{tag}.dlq",
        registration_topic=f"t{tag}.reg",
        partitions=PARTITIONS,
        retry_backoff=0.1,
    )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.endpoint)
    await admin.start()
    try:
        with anyio.move_on_after(10):
            await admin.delete_topics(
                [
                    settings.topic,
                    settings.dead_letter_topic,
                    settings.registration_topic,
                    f"{settings.topic}.idempotency",
                ]
            )
    finally:
        await admin.close()


async def stored_in_partition(settings: KafkaSettings) -> tuple[int, int]:
    """The records in the project's partition, and the messages they hold (a pack counts
    its parts, ``core.packing``), read from the log's start to its end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=list(settings.bootstrap_servers), enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic, partition_for(PROJECT, PARTITIONS))
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = int((await consumer.end_offsets([tp]))[tp])
        records = messages = 0
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                records += 1
                messages += parts_in(record.value)
        return records, messages
    finally:
        await consumer.stop()


@pytest.mark.kafka
async def test_a_retried_request_lands_once_on_kafka(kafka_settings: KafkaSettings) -> None:
    with anyio.fail_after(LIMIT):
        first, retried = await retried_across_gateways(
            lambda: KafkaTransport(kafka_settings),
            lambda: KafkaIdempotencyStore(kafka_settings, window=600.0),
        )
        async with KafkaTransport(kafka_settings) as transport:
            landed = await delivered(transport)
        records, messages = await stored_in_partition(kafka_settings)
    # Stored: 3 announcements (gateways A, C, D) and one pack of 5 from each of A, C and D
    # (D's re-publish, which Kafka cannot refuse); delivered: each message once.
    assert (records, messages) == (3 + 3, 3 + 3 * len(PAYLOADS))
    counts = per_series(landed)
    assert counts == {first["gateway_id"]: 5, retried["gateway_id"]: 5}
    assert sorted(e.message_id for e in landed) == sorted(
        first["message_ids"] + retried["message_ids"]
    )
