"""The ``CoordinationStore`` contract suite against Kafka's log dialect (the session's
``kafka_server``). Every test gets a group (so a topic) of its own, deleted afterwards; the
restart test restarts the session's broker, which keeps the topic."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from adapters.kafka import KafkaSettings
from adapters.kafka._aiokafka import AIOKafkaAdminClient, KafkaError
from adapters.kafka._kv import KafkaCoordinationStore
from adapters.kafka._kv_settings import KafkaKvSettings
from infra.local._testservers import ServerInfo
from tests.contract._coordination import server_features
from tests.contract._kv import CoordinationStoreContract

# A lease ends at the first record past its deadline, which a store's tick appends within
# its tick interval of it (plus a round trip).
EXPIRY_SLACK = 1.0


class KafkaStoreHarness:
    """The dialect on a topic of its own (one group per test) of the session's broker."""

    def __init__(self, server: ServerInfo) -> None:
        self._server = server
        self.settings = KafkaKvSettings(
            group=f"t-{uuid.uuid4().hex[:12]}",
            kafka=KafkaSettings(
                bootstrap_servers=tuple(server.endpoint.split(",")), connect_timeout=10.0
            ),
        )
        self.features = server_features(server, expiry_slack=EXPIRY_SLACK)

    def store(self) -> KafkaCoordinationStore:
        return KafkaCoordinationStore(self.settings)

    async def pass_time(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)


async def clean(server: ServerInfo, harness: KafkaStoreHarness) -> None:
    """Delete the harness's topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=server.endpoint)
    with contextlib.suppress(KafkaError, OSError, TimeoutError):
        with anyio.fail_after(10):
            await admin.start()
            await admin.delete_topics([harness.settings.topic])
    with contextlib.suppress(KafkaError, OSError, TimeoutError):
        await admin.close()


@pytest.fixture
async def harness(kafka_server: ServerInfo) -> AsyncIterator[KafkaStoreHarness]:
    harness = KafkaStoreHarness(kafka_server)
    yield harness
    await clean(kafka_server, harness)


@pytest.mark.kafka
class TestKafkaCoordinationStore(CoordinationStoreContract):
    pass
