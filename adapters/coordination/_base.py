"""What the coordination ports share over a ``CoordinationStore``: the key layout, the
store's lease kept alive by ``adapters._lease``, and a prefix watched as a whole view.

Keys (``core.keyspace``; ids escaped by ``encode_segment``):
``members/{id}`` (a live member, on its lease), ``reports/{id}`` (its latest load report,
on the same lease), ``leader/office`` (the leader's id, on its lease; the revision of its
create is the term), ``assignment/record`` (the assignment, the term that published it and
the latest term that took office), ``holds/{p}`` (a partition's hold; its revision is the
hold's version) and ``projects/{p}/{project}`` (a registration's expiry).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from types import TracebackType
from typing import Protocol, Self

import anyio
from anyio.abc import TaskStatus

from adapters._lease import RenewedLease, check_ttl
from adapters._lifecycle import Lifecycle
from adapters._store_settings import StoreTiming
from core.errors import ShoalError, StoreUnavailableError
from core.keyspace import KeyValue, Resync, encode_segment
from core.model import MemberId, Partition
from core.ports import CoordinationStore

__all__ = [
    "ASSIGNMENT",
    "DEFAULT_TIMING",
    "HOLDS",
    "LEADER",
    "MEMBERS",
    "REPORTS",
    "Dialect",
    "StoreAdapter",
    "StoreLease",
    "hold_key",
    "member_key",
    "projects_prefix",
    "put",
    "report_key",
    "snapshots",
]

_log = logging.getLogger(__name__)

MEMBERS = "members/"
REPORTS = "reports/"
LEADER = "leader/office"
ASSIGNMENT = "assignment/record"
HOLDS = "holds/"
_PROJECTS = "projects/"


def member_key(member_id: MemberId) -> str:
    return MEMBERS + encode_segment(member_id)


def report_key(member_id: MemberId) -> str:
    return REPORTS + encode_segment(member_id)


def hold_key(partition: Partition) -> str:
    return f"{HOLDS}{partition}"


def projects_prefix(partition: Partition) -> str:
    return f"{_PROJECTS}{partition}/"


def parent(key: str) -> str:
    """The prefix a watch of ``key`` needs (keys are watched by prefix)."""
    return key[: key.rindex("/") + 1]


class Dialect(CoordinationStore, Protocol):
    """A store's dialect as the ports use it: the port, opened with ``async with``."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None: ...


# The settings of a store's dialect carry its timing; these are StoreTiming's defaults,
# without reading the environment (tests and the in-memory store).
DEFAULT_TIMING = StoreTiming.model_construct()


async def put(
    store: CoordinationStore,
    key: str,
    value: bytes,
    current: KeyValue | None,
    *,
    lease: int | None = None,
) -> int:
    """Write ``key`` if it is still ``current`` (absent when None): its new revision.
    ``RevisionConflictError`` when it moved."""
    if current is None:
        return await store.create(key, value, lease=lease)
    return await store.update(key, value, revision=current.revision, lease=lease)


async def snapshots(
    store: CoordinationStore, prefix: str
) -> AsyncIterator[tuple[dict[str, KeyValue], bool]]:
    """Every key under ``prefix`` now, then again after each change (the store's watch folded
    into one view), each with whether it came from a ``Resync`` (which replaces it)."""
    view: dict[str, KeyValue] = {}
    async with aclosing(store.watch(prefix)) as changes:
        async for change in changes:
            resynced = isinstance(change, Resync)
            if isinstance(change, Resync):
                view = {entry.key: entry for entry in change.listing.entries}
            elif change.value is None:
                view.pop(change.key, None)
            else:
                view[change.key] = KeyValue(change.key, change.value, change.revision)
            yield dict(view), resynced


class StoreLease(RenewedLease):
    """One lease granted by the store, renewed by ``adapters._lease``'s rule."""

    def __init__(
        self,
        store: CoordinationStore,
        lease_id: int,
        ttl: float,
        granted_at: float,
        timing: StoreTiming,
    ) -> None:
        super().__init__(
            ttl=ttl,
            granted_at=granted_at,
            max_renew_interval=timing.max_renew_interval,
            retry_interval=timing.retry_interval,
            what=f"lease {lease_id}",
        )
        self._store = store
        self.id = lease_id

    async def revoke(self) -> None:
        """Mark it lost, stop renewing and end it at the store, so its keys go at once."""
        self.lose("revoked")
        await self._store.revoke(self.id)

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the time left)
        with anyio.move_on_after(timeout) as scope:
            await self._store.keep_alive(self.id)
        if scope.cancelled_caught:
            raise StoreUnavailableError(f"lease {self.id}: no answer to its renewal in time")

    async def _end_expired(self) -> None:
        await self._store.revoke(self.id)


class StoreAdapter(Lifecycle):
    """Base of the coordination ports: ``async with`` opens the dialect and owns the lease
    renewals; leaving revokes the leases still held (others see the member or leader go at
    once) within ``timing.close_timeout``, then closes the dialect."""

    def __init__(self, store: Dialect, timing: StoreTiming = DEFAULT_TIMING) -> None:
        self.store = store
        self._timing = timing
        self._leases: set[StoreLease] = set()

    async def _open_outer(self) -> None:
        await self.store.__aenter__()  # its task group encloses the adapter's

    async def _close_outer(self) -> None:
        await self.store.__aexit__(None, None, None)

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self._timing.close_timeout):
            for lease in list(self._leases):
                await self._drop_lease(lease)

    async def _new_lease(self, ttl: float) -> StoreLease:
        """Grant a lease and keep it alive in this adapter's task group until it is lost."""
        check_ttl(ttl)
        self._leases = {held for held in self._leases if not held.is_lost()}
        granted_at = time.monotonic()
        lease = StoreLease(self.store, await self.store.grant(ttl), ttl, granted_at, self._timing)
        self._leases.add(lease)
        await self._tasks.start(self._keep, lease)
        return lease

    async def _keep(self, lease: StoreLease, *, task_status: TaskStatus[None]) -> None:
        try:
            await lease.keep_alive(task_status=task_status)
        finally:
            if lease.is_lost():
                self._leases.discard(lease)

    async def _drop_lease(self, lease: StoreLease) -> None:
        """Revoke ``lease`` (best effort, shielded) and forget it."""
        self._leases.discard(lease)
        with anyio.CancelScope(shield=True):
            try:
                await lease.revoke()
            except ShoalError as exc:
                _log.warning("lease %s not revoked (it will expire): %s", lease.id, exc)

    def _guard(self, lease: StoreLease, key: str, revision: int) -> None:
        """Lose ``lease`` as soon as ``key`` (bound to it, written at ``revision``) is seen
        deleted: the store ended the lease before its renewal could tell."""
        self._tasks.start_soon(self._lose_with_key, lease, key, revision)

    async def _lose_with_key(self, lease: StoreLease, key: str, revision: int) -> None:
        async with anyio.create_task_group() as tasks:

            async def stop_when_lost() -> None:
                await lease.wait_lost()
                tasks.cancel_scope.cancel()

            tasks.start_soon(stop_when_lost)
            async with aclosing(self.store.watch(parent(key), after=revision)) as changes:
                async for change in changes:
                    if isinstance(change, Resync):
                        gone = change.listing.get(key) is None
                    else:
                        gone = change.key == key and change.value is None
                    if gone:
                        lease.lose(f"{key} was deleted at the store")
                        break
            tasks.cancel_scope.cancel()
