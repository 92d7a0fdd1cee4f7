"""What every NATS KV adapter shares: a bucket connection, a task group, a change feed,
renewed leases and a bounded exit; and ``KvLease``, a key with a TTL kept alive by
revision-compared rewrites."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from adapters._backoff import Backoff
from adapters._lease import RenewedLease
from adapters._lifecycle import Lifecycle
from adapters.natskv._bucket import Bucket
from adapters.natskv._feed import Change, Feed, Interest
from adapters.natskv._settings import NatsKvSettings
from core.errors import LeaseLostError, ShoalError, StoreUnavailableError

__all__ = ["KvLease", "NatsKvAdapter", "new_token", "owned_by"]

_log = logging.getLogger("shoal.adapters.natskv")
T = TypeVar("T")


def new_token() -> str:
    """A lease owner token: 32 hex digits (no colon)."""
    return secrets.token_hex(16)


def owned_by(change: Change, key: str, token: str) -> bool:
    """Whether ``change`` leaves ``key`` someone else's or gone (our renewals do not)."""
    return change.key == key and (change.deleted or not change.value.startswith(token.encode()))


class KvLease(RenewedLease):
    """One owned TTL key: renewed by rewriting its value with a fresh TTL if its revision is
    still the one we wrote last; lost when that comparison fails (the key expired, was
    deleted, or someone else's). Run ``keep_alive`` in a task group."""

    def __init__(
        self,
        bucket: Bucket,
        *,
        key: str,
        value: bytes,
        token: str,
        revision: int,
        ttl: float,
        granted_at: float,
        release: Callable[[KvLease], Awaitable[None]],
        what: str,
    ) -> None:
        settings = bucket.settings
        super().__init__(
            ttl=ttl,
            granted_at=granted_at,
            max_renew_interval=settings.max_renew_interval,
            retry_interval=settings.retry_interval,
            what=f"NATS KV {what}",
        )
        self._bucket = bucket
        self.key = key
        self.value = value
        self.token = token
        self.revision = revision
        self._release = release
        self._released = False
        self._wake: Interest | None = None

    async def release(self) -> None:
        """Mark the lease lost, stop renewing, and delete the key if it is still ours, so
        others see it go at once. Idempotent once it succeeded; ``StoreUnavailableError``
        when NATS did not confirm (the key then expires at its TTL; calling again retries)."""
        self.lose("released")
        if self._released:
            return
        await self._release(self)
        self._released = True

    async def rewrite(self, value: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Store ``value`` with a fresh TTL if the key is still ours: ``LeaseLostError``
        otherwise (and the lease is lost then)."""
        revision = await self._bucket.update(
            self.key, value, last=self.revision, ttl=self.ttl, timeout=timeout
        )
        if revision is None:
            self.lose("its key expired, was deleted or taken over")
            raise LeaseLostError(f"{self.key}: the key is no longer ours")
        self.revision, self.value = revision, value

    async def keep_alive(
        self,
        wake: Interest | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Renew until lost or stopped. ``wake`` fires when the key may have been taken
        from us: the renewal then runs at once, and its comparison tells."""
        self._wake = wake
        await super().keep_alive(task_status=task_status)

    async def _wait(self, delay: float) -> None:
        if self._wake is None:
            await anyio.sleep(delay)
        else:
            await self._wake.wait(delay)
            self._wake.clear()

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the time left)
        await self.rewrite(self.value, timeout)

    async def _end_expired(self) -> None:
        with anyio.move_on_after(self._bucket.settings.call_timeout):
            await self._release(self)


class NatsKvAdapter(Lifecycle):
    """Base of the NATS KV adapters: ``async with`` connects and owns the background tasks
    (lease renewals, the change feed). Leaving stops every renewal, deletes the lease keys
    still held (revision-compared, so others see the member or leader go at once) and
    closes the connection, all within ``settings.close_timeout`` seconds."""

    _watched: str = ""  # the key prefix this adapter's feed watches ("" for none)

    def __init__(self, settings: NatsKvSettings | None = None) -> None:
        self.settings = settings if settings is not None else NatsKvSettings()
        self._bucket = Bucket(self.settings)
        self._feed = Feed(self._bucket, self._watched)
        self._leases: set[KvLease] = set()

    async def _connect(self) -> None:
        await self._bucket.open()

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            for lease in list(self._leases):
                try:
                    await lease.release()
                except ShoalError as exc:
                    _log.warning("NATS KV key %s not deleted on exit: %s", lease.key, exc)
            self._leases.clear()

    async def _disconnect(self) -> None:
        await self._bucket.close()

    async def _started_feed(self) -> Feed:
        await self._feed.start(self._tasks)
        return self._feed

    async def _keep(self, lease: KvLease) -> None:
        """Renew ``lease`` in this adapter's task group until it is lost or stopped, woken
        when its key changes under it."""
        feed = await self._started_feed()
        self._leases = {held for held in self._leases if not held.is_lost()}
        self._leases.add(lease)
        wake = feed.add(lambda change: owned_by(change, lease.key, lease.token))
        await self._tasks.start(self._run_lease, lease, wake)

    async def _run_lease(
        self, lease: KvLease, wake: Interest, *, task_status: TaskStatus[None]
    ) -> None:
        try:
            await lease.keep_alive(wake, task_status=task_status)
        finally:
            self._feed.remove(wake)
            if lease.is_lost():
                self._leases.discard(lease)

    async def _snapshots(
        self, read: Callable[[], Awaitable[T]], what: str
    ) -> AsyncGenerator[T, None]:
        """Yield ``read()`` now and after every change the feed reports (a snapshot may
        cover several), after every reconnect, and at least every ``resync_interval``.
        Retries while NATS is unreachable."""
        feed = await self._started_feed()
        settings = self.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        with feed.interest(lambda change: True) as changes:
            while True:
                changes.clear()  # before reading: a change during the read fires again
                try:
                    value = await read()
                except StoreUnavailableError as exc:
                    if self._bucket.closed:
                        raise
                    _log.warning("NATS KV watch %s: re-read failed, retrying: %s", what, exc)
                    await backoff.sleep()
                    continue
                backoff.reset()
                yield value
                await changes.wait(settings.resync_interval)
