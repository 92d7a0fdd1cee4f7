"""The ``CoordinationStore`` contract suite against etcd (the ``etcd_server`` fixture)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from etcd3aio import Etcd3Client, EtcdError, prefix_range_end

from adapters.etcd import EtcdCoordinationStore, EtcdSettings
from infra.local._testservers import ServerInfo
from tests.contract._coordination import server_features
from tests.contract._kv import CoordinationStoreContract


class EtcdStoreHarness:
    """The dialect on a fresh key prefix (one group per test) of the session's etcd."""

    def __init__(self, server: ServerInfo) -> None:
        self._server = server
        self.settings = EtcdSettings(
            endpoints=tuple(server.endpoints), group=f"t-{uuid.uuid4().hex[:12]}"
        )
        # etcd grants at least 2 s and checks expiry every 500 ms
        self.features = server_features(server, expiry_slack=3.0)

    def store(self) -> EtcdCoordinationStore:
        return EtcdCoordinationStore(self.settings)

    async def pass_time(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)


async def clean(server: ServerInfo, harness: EtcdStoreHarness) -> None:
    """Delete every key of the harness's group."""
    async with Etcd3Client(server.endpoints) as admin:
        assert admin.kv is not None
        prefix = harness.settings.prefix + "/"
        with contextlib.suppress(EtcdError):  # the server may still be restarting
            await admin.kv.delete(prefix, prefix_range_end(prefix), timeout=5)


@pytest.fixture
async def harness(etcd_server: ServerInfo) -> AsyncIterator[EtcdStoreHarness]:
    harness = EtcdStoreHarness(etcd_server)
    yield harness
    await clean(etcd_server, harness)


@pytest.mark.etcd
class TestEtcdCoordinationStore(CoordinationStoreContract):
    pass
