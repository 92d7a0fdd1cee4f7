"""The IdempotencyStore contract on ``KafkaIdempotencyStore`` against a real broker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import anyio
import pytest

from adapters.kafka import KafkaIdempotencyStore, KafkaSettings
from adapters.kafka._aiokafka import AIOKafkaAdminClient
from core.ports import IdempotencyStore
from infra.local._testservers import ServerInfo
from tests.contract._idempotency import IdempotencyStoreContract, StoreFactory, answer


@pytest.fixture
async def settings(kafka_server: ServerInfo) -> AsyncIterator[KafkaSettings]:
    tag = uuid.uuid4().hex[:10]  # a topic of its own per test
    settings = KafkaSettings(
        bootstrap_servers=tuple(kafka_server.endpoints),
        group=f"t{tag}",
        topic=f"t{tag}.data",
        dead_letter_topic=f"t{tag}.dlq",
        registration_topic=f"t{tag}.reg",
        retry_backoff=0.1,
    )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.endpoint)
    await admin.start()
    try:
        with anyio.move_on_after(10):
            await admin.delete_topics([f"{settings.topic}.idempotency"])
    finally:
        await admin.close()


@pytest.mark.kafka
class TestKafkaIdempotencyStore(IdempotencyStoreContract):
    @pytest.fixture
    def make_store(self, settings: KafkaSettings) -> StoreFactory:
        def make(window: float) -> AbstractAsyncContextManager[IdempotencyStore]:
            return KafkaIdempotencyStore(settings, window=window)

        return make

    async def test_each_gateway_keeps_at_most_max_entries_in_memory(
        self, settings: KafkaSettings
    ) -> None:
        answers = [answer(key=f"k-{i}") for i in range(6)]
        with anyio.fail_after(30):
            async with KafkaIdempotencyStore(settings, window=600.0, max_entries=100) as a:
                for one in answers:
                    await a.remember(one)
            async with KafkaIdempotencyStore(settings, window=600.0, max_entries=4) as b:
                assert len(b.book) == 4
                recalled = [await b.recall(x.project_id, x.key_digest) for x in answers]
                assert recalled == [None, None, *answers[2:]]
