"""``InMemoryCoordinationStore``: the ``CoordinationStore`` port in one process, a
``KeySpace`` (``adapters._keyspace``) fed in call order.

Leases keep the time of an injected clock (``time.monotonic`` by default): every call
first ends the leases past their deadline, and a background task does so at the next
deadline, so watchers see the deletions without a call. A test that drives the clock
itself calls ``expire_due`` after moving it. Watchers read a bounded history of changes;
one that falls behind it gets a ``Resync``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncGenerator, Callable

import anyio
from anyio.abc import TaskStatus
from anyio.lowlevel import checkpoint

from adapters._keyspace import KeySpace
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix

__all__ = ["InMemoryCoordinationStore"]


class InMemoryCoordinationStore(Lifecycle):
    """Use it as ``async with``; ``history`` changes are kept for watchers that fall behind."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, history: int = 1024) -> None:
        self._clock = clock
        self._space = KeySpace(history=history)
        self._lease_ids = itertools.count(1)
        self._changed = anyio.Event()

    async def _connect(self) -> None:
        await self._tasks.start(self._expire_on_time)

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        await self._step()
        return self._space.get(check_key(key))

    async def list_prefix(self, prefix: str) -> Listing:
        await self._step()
        return self._space.listing(check_prefix(prefix))

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        await self._step()
        return self._changing(self._space.create(check_key(key), value, lease, revision=self._next))

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        await self._step()
        return self._changing(
            self._space.update(check_key(key), value, lease, expected=revision, revision=self._next)
        )

    async def delete(self, key: str, *, revision: int) -> int:
        await self._step()
        return self._changing(
            self._space.delete(check_key(key), expected=revision, revision=self._next)
        )

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        await self._step()
        lease = next(self._lease_ids)
        self._space.grant(lease, ttl, now=self._clock())
        self._notify()  # the expiry task sleeps until the nearest deadline
        return lease

    async def keep_alive(self, lease: int) -> None:
        await self._step()
        self._space.keep_alive(lease, now=self._clock())

    async def revoke(self, lease: int) -> None:
        await self._step()
        before = self._space.revision
        self._space.revoke(lease, revision=self._next)
        if self._space.revision != before:
            self._notify()

    def expire_due(self) -> None:
        """End every lease whose deadline the clock has passed (deleting its keys)."""
        if self._space.expire(now=self._clock(), revision=self._next):
            self._notify()

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        check_prefix(prefix)
        await self._step()
        if after is None:
            listing = self._space.listing(prefix)
            after = listing.revision
            yield Resync(listing)
        while True:
            changed = self._changed
            pending = self._space.changes_after(after)
            if pending is None:  # what it missed is no longer kept
                listing = self._space.listing(prefix)
                after = listing.revision
                yield Resync(listing)
                continue
            for change in pending:
                after = change.revision
                if change.key.startswith(prefix):
                    yield change
            if not pending:
                await changed.wait()

    # --- the clock and the watchers --------------------------------------------------------

    @property
    def _next(self) -> int:
        return self._space.revision + 1

    async def _step(self) -> None:
        """A checkpoint standing for a real store's round trip; leases past due end first."""
        await checkpoint()
        self.expire_due()

    def _changing(self, revision: int) -> int:
        self._notify()
        return revision

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _expire_on_time(self, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        while True:
            self.expire_due()
            changed = self._changed
            with anyio.move_on_after(self._space.next_deadline() - self._clock()):
                await changed.wait()
