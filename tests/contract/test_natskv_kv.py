"""The ``CoordinationStore`` contract suite against NATS JetStream KV (the session's
``nats_server``). Every test gets a bucket of its own (a fresh group), deleted afterwards;
the restart test restarts the session's nats-server (local mode: file storage,
``sync_interval: always``), which keeps the bucket."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import nats
import pytest
from nats.js.errors import NotFoundError

from adapters.nats import NatsSettings
from adapters.natskv import NatsKvCoordinationStore, NatsKvSettings
from core.errors import StoreUnavailableError
from core.keyspace import KeyChange, Listing
from infra.local._testservers import ServerInfo
from tests.contract._coordination import next_within, server_features, watching
from tests.contract._kv import CoordinationStoreContract

# A TTL is whole seconds on the wire, and the server ends a key within about a fifth of a
# second past it; the sweeper then deletes the bound keys.
EXPIRY_SLACK = 1.5


class NatsKvStoreHarness:
    """The dialect on a bucket of its own (one group per test) of the session's nats-server."""

    def __init__(self, server: ServerInfo) -> None:
        self._server = server
        self.settings = NatsKvSettings(
            group=f"t-{uuid.uuid4().hex[:12]}",
            nats=NatsSettings(url=server.url, reconnect_wait=0.2),
        )
        self.features = server_features(server, expiry_slack=EXPIRY_SLACK)

    def store(self) -> NatsKvCoordinationStore:
        return NatsKvCoordinationStore(self.settings)

    async def pass_time(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)


async def clean(server: ServerInfo, harness: NatsKvStoreHarness) -> None:
    """Delete the harness's bucket."""
    admin = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        with contextlib.suppress(nats.errors.Error, TimeoutError, NotFoundError):
            await admin.jetstream().delete_key_value(harness.settings.bucket_name)
    finally:
        await admin.close()


@pytest.fixture
async def harness(nats_server: ServerInfo) -> AsyncIterator[NatsKvStoreHarness]:
    harness = NatsKvStoreHarness(nats_server)
    yield harness
    await clean(nats_server, harness)


@pytest.mark.natskv
class TestNatsKvCoordinationStore(CoordinationStoreContract):
    pass


@pytest.mark.natskv
@pytest.mark.anyio
async def test_the_lease_sweeper_survives_a_read_the_server_does_not_answer(
    harness: NatsKvStoreHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that times out inside the sweeper (a server under a full stream did so in the
    fault matrix) is retried; it used to end the dialect, and the process with it."""
    async with harness.store() as store:
        original = store._bucket.listing
        refused: list[str] = []

        async def once_unanswered(prefix: str) -> Listing:
            if not refused and prefix == "bind.":  # the sweep's read, not the follower's
                refused.append(prefix)
                raise StoreUnavailableError(f"read {prefix}> not answered within 5 s")
            return await original(prefix)

        monkeypatch.setattr(store._bucket, "listing", once_unanswered)
        lease = await store.grant(1.0)
        created = await store.create("s/bound", b"", lease=lease)
        # not renewed: the lease ends on the server, and the sweeper deletes its key
        async with watching(store.watch("s/", after=created)) as changes:
            change = await next_within(changes, 1.0 + EXPIRY_SLACK + 10)
        assert isinstance(change, KeyChange)
        assert (change.key, change.value) == ("s/bound", None)
        assert refused, "the sweeper never read"


@pytest.mark.natskv
@pytest.mark.anyio
async def test_listings_leave_no_consumer_behind(
    harness: NatsKvStoreHarness, nats_server: ServerInfo
) -> None:
    """Each listing reads through a consumer of its own; left to its inactivity threshold,
    a few hundred listings a second filled the stream's consumers ("maximum consumers limit
    reached", a model walk in CI), so each is deleted when its listing ends."""
    admin = await nats.connect(nats_server.url)
    try:
        async with harness.store() as store:
            await store.create("h/1", b"x")
            stream = await admin.jetstream().stream_info(f"KV_{harness.settings.bucket_name}")
            before = stream.state.consumer_count  # the dialect's own watchers
            for _ in range(50):
                listing = await store.list_prefix("h/")
                assert [entry.key for entry in listing.entries] == ["h/1"]
            stream = await admin.jetstream().stream_info(f"KV_{harness.settings.bucket_name}")
            assert stream.state.consumer_count == before
    finally:
        await admin.close()
