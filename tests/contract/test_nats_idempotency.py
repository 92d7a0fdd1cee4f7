"""The IdempotencyStore contract on ``NatsIdempotencyStore`` against a real nats-server."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import anyio
import nats
import pytest
from nats.js.errors import NotFoundError

from adapters.nats import NatsIdempotencyStore, NatsSettings
from core.ports import IdempotencyStore
from infra.local._testservers import ServerInfo
from tests.contract._idempotency import IdempotencyStoreContract, StoreFactory, answer


@pytest.fixture
async def settings(nats_server: ServerInfo) -> AsyncIterator[NatsSettings]:
    tag = uuid.uuid4().hex[:10]  # a bucket of its own for every test
    settings = NatsSettings(url=nats_server.url, stream=f"T{tag}", reconnect_wait=0.2)
    yield settings
    nc = await nats.connect(settings.url)
    try:
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(f"KV_T{tag}_IDEMPOTENCY")
    finally:
        await nc.close()


@pytest.mark.nats
class TestNatsIdempotencyStore(IdempotencyStoreContract):
    @pytest.fixture
    def make_store(self, settings: NatsSettings) -> StoreFactory:
        def make(window: float) -> AbstractAsyncContextManager[IdempotencyStore]:
            return NatsIdempotencyStore(settings, window=window)

        return make

    async def test_the_bucket_keeps_records_for_the_window_and_takes_a_new_one(
        self, settings: NatsSettings
    ) -> None:
        with anyio.fail_after(20):
            async with NatsIdempotencyStore(settings, window=600.0) as store:
                await store.remember(answer())
            nc = await nats.connect(settings.url)
            try:
                js = nc.jetstream()
                info = await js.stream_info(f"KV_{settings.stream}_IDEMPOTENCY")
                assert info.config.max_age == 600.0
                assert info.config.max_msgs_per_subject == 1
                async with NatsIdempotencyStore(settings, window=900.0) as store:
                    assert await store.recall("dev-1", answer().key_digest) is not None
                info = await js.stream_info(f"KV_{settings.stream}_IDEMPOTENCY")
                assert info.config.max_age == 900.0
            finally:
                await nc.close()
