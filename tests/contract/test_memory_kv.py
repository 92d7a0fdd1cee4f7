"""The ``CoordinationStore`` contract suite against the in-memory dialect, on a clock the
test moves (no real waiting for leases)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext

import pytest
from anyio.lowlevel import checkpoint

from adapters.memory import InMemoryCoordinationStore
from core.keyspace import KeyChange, Resync
from tests.contract._coordination import Features, next_within, watching
from tests.contract._kv import CoordinationStoreContract


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class MemoryHarness:
    """One store, entered by the fixture, that every ``store()`` of the test shares."""

    features = Features(restartable=False)

    def __init__(self, shared: InMemoryCoordinationStore, clock: ManualClock) -> None:
        self.shared = shared
        self.clock = clock

    def store(self) -> AbstractAsyncContextManager[InMemoryCoordinationStore]:
        return nullcontext(self.shared)

    async def pass_time(self, seconds: float) -> None:
        self.clock.now += seconds
        self.shared.expire_due()
        await checkpoint()

    async def restart_store(self) -> None:
        raise NotImplementedError("an in-memory store does not restart")


@pytest.fixture
async def harness() -> AsyncIterator[MemoryHarness]:
    clock = ManualClock()
    async with InMemoryCoordinationStore(clock=clock, history=8) as shared:
        yield MemoryHarness(shared, clock)


class TestInMemoryCoordinationStore(CoordinationStoreContract):
    pass


@pytest.mark.anyio
async def test_a_watcher_that_fell_behind_the_log_gets_a_resync(harness: MemoryHarness) -> None:
    async with harness.store() as store:
        listing = await store.list_prefix("")
        async with watching(store.watch("", after=listing.revision)) as events:
            revisions = [await store.create(f"k{n}", b"") for n in range(10)]  # history: 8
            resync = await next_within(events)
            assert isinstance(resync, Resync)
            assert [entry.revision for entry in resync.listing.entries] == revisions
            last = await store.create("k-last", b"")
            assert await next_within(events) == KeyChange("k-last", b"", last)
