"""``InMemoryCoordinationStore``: the ``CoordinationStore`` port in one process.

Leases keep the time of an injected clock (``time.monotonic`` by default): every call
first ends the leases past their deadline, and a background task does so at the next
deadline, so watchers see the deletions without a call. A test that drives the clock
itself calls ``expire_due`` after moving it. Watchers read a bounded log of changes; one
that falls behind it gets a ``Resync``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus
from anyio.lowlevel import checkpoint

from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from core.errors import LeaseLostError, RevisionConflictError
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix

__all__ = ["InMemoryCoordinationStore"]


@dataclass(slots=True)
class _Lease:
    ttl: float
    deadline: float
    keys: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Stored:
    entry: KeyValue
    lease: int | None


class InMemoryCoordinationStore(Lifecycle):
    """Use it as ``async with``; ``history`` changes are kept for watchers that fall behind."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, history: int = 1024) -> None:
        self._clock = clock
        self._revision = 0
        self._stored: dict[str, _Stored] = {}
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(1)
        self._log: deque[KeyChange] = deque(maxlen=history)
        self._changed = anyio.Event()

    async def _connect(self) -> None:
        await self._tasks.start(self._expire_on_time)

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        await self._step()
        stored = self._stored.get(check_key(key))
        return None if stored is None else stored.entry

    async def list_prefix(self, prefix: str) -> Listing:
        await self._step()
        return self._listing(check_prefix(prefix))

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        await self._step()
        if check_key(key) in self._stored:
            raise RevisionConflictError(f"{key}: exists")
        return self._put(key, value, lease)

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        await self._step()
        self._compare(check_key(key), revision)
        return self._put(key, value, lease)

    async def delete(self, key: str, *, revision: int) -> int:
        await self._step()
        self._compare(check_key(key), revision)
        return self._remove(key)

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        await self._step()
        lease = next(self._lease_ids)
        self._leases[lease] = _Lease(ttl, self._clock() + ttl)
        self._notify()  # the expiry task sleeps until the nearest deadline
        return lease

    async def keep_alive(self, lease: int) -> None:
        await self._step()
        held = self._live(lease)
        held.deadline = self._clock() + held.ttl

    async def revoke(self, lease: int) -> None:
        await self._step()
        self._end(lease)

    def expire_due(self) -> None:
        """End every lease whose deadline the clock has passed (deleting its keys)."""
        now = self._clock()
        for lease in [lease for lease, held in self._leases.items() if held.deadline <= now]:
            self._end(lease)

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        check_prefix(prefix)
        await self._step()
        if after is None:
            listing = self._listing(prefix)
            after = listing.revision
            yield Resync(listing)
        while True:
            changed = self._changed
            if self._log and self._log[0].revision > after + 1 and self._revision > after:
                listing = self._listing(prefix)  # what it missed is no longer in the log
                after = listing.revision
                yield Resync(listing)
                continue
            pending = [change for change in self._log if change.revision > after]
            for change in pending:
                after = change.revision
                if change.key.startswith(prefix):
                    yield change
            if not pending:
                await changed.wait()

    # --- the state -------------------------------------------------------------------------

    async def _step(self) -> None:
        """A checkpoint standing for a real store's round trip; leases past due end first."""
        await checkpoint()
        self.expire_due()

    def _listing(self, prefix: str) -> Listing:
        entries = sorted(
            (stored.entry for key, stored in self._stored.items() if key.startswith(prefix)),
            key=lambda entry: entry.key,
        )
        return Listing(tuple(entries), self._revision)

    def _compare(self, key: str, revision: int) -> None:
        stored = self._stored.get(key)
        if stored is None or stored.entry.revision != revision:
            raise RevisionConflictError(f"{key}: not at revision {revision}")

    def _live(self, lease: int) -> _Lease:
        held = self._leases.get(lease)
        if held is None:
            raise LeaseLostError(f"lease {lease} expired or was revoked")
        return held

    def _put(self, key: str, value: bytes, lease: int | None) -> int:
        holder = None if lease is None else self._live(lease)
        self._unbind(key)
        if holder is not None:
            holder.keys.add(key)
        revision = self._record(KeyChange(key, value, self._revision + 1))
        self._stored[key] = _Stored(KeyValue(key, value, revision), lease)
        return revision

    def _remove(self, key: str) -> int:
        self._unbind(key)
        del self._stored[key]
        return self._record(KeyChange(key, None, self._revision + 1))

    def _unbind(self, key: str) -> None:
        stored = self._stored.get(key)
        if stored is not None and stored.lease in self._leases:
            self._leases[stored.lease].keys.discard(key)

    def _end(self, lease: int) -> None:
        held = self._leases.pop(lease, None)
        for key in sorted(held.keys if held is not None else ()):
            self._remove(key)

    def _record(self, change: KeyChange) -> int:
        self._revision = change.revision
        self._log.append(change)
        self._notify()
        return change.revision

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _expire_on_time(self, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        while True:
            self.expire_due()
            changed = self._changed
            deadline = min((held.deadline for held in self._leases.values()), default=math.inf)
            with anyio.move_on_after(deadline - self._clock()):
                await changed.wait()
