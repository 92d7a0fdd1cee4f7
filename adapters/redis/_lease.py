"""A Redis "lease": a key with a TTL (PX) whose value starts with a random owner token,
kept alive by ``adapters._lease.RenewedLease``.

A renewal is an owner-checked Lua script (``PEXPIRE`` only if the value still starts with
our token); the lease is lost when the script finds the key gone or someone else's (it
expired and was taken). Between renewals, the adapter's change feed wakes the lease when
its key expired or was written by someone else, so a lease that Redis dropped is seen
lost at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from adapters._lease import RenewedLease
from adapters.redis._client import RedisClient, ms
from adapters.redis._feed import Interest
from core.errors import LeaseLostError

__all__ = ["Lease"]


class Lease(RenewedLease):
    """One owned TTL key. Run ``keep_alive`` in a task group; ``release`` or ``stop`` it."""

    def __init__(
        self,
        client: RedisClient,
        *,
        key: str,
        token: str,
        ttl: float,
        granted_at: float,
        release: Callable[[], Awaitable[object]],
        what: str,
    ) -> None:
        super().__init__(
            ttl=ttl,
            granted_at=granted_at,
            max_renew_interval=client.settings.max_renew_interval,
            retry_interval=client.settings.retry_interval,
            what=f"redis {what}",
        )
        self._client = client
        self.key = key
        self.token = token
        self._release = release
        self._released = False
        self._wake: Interest | None = None

    async def release(self) -> None:
        """Mark the lease lost, stop renewing, and delete the key if it is still ours, so
        others see it go at once. Idempotent once it succeeded.

        Raises ``StoreUnavailableError`` if Redis did not confirm (the key then expires at
        its TTL; calling again retries).
        """
        self.lose("released")
        if self._released:
            return
        await self._release()
        self._released = True

    async def keep_alive(
        self,
        wake: Interest | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Renew until lost or stopped; start it with ``task_group.start``. ``wake`` fires
        when the key may have been taken from us (checked at once)."""
        self._wake = wake
        await super().keep_alive(task_status=task_status)

    async def _wait(self, delay: float) -> None:
        if self._wake is None:
            await anyio.sleep(delay)
        else:
            await self._wake.wait(delay)
            self._wake.clear()

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the time left)
        renewed = await self._client.script(
            "RENEW", [self.key], [self.token, ms(self.ttl)], timeout
        )
        if not renewed:
            raise LeaseLostError("its key expired or was taken over in Redis")

    async def _end_expired(self) -> None:
        with anyio.move_on_after(self._client.settings.call_timeout):
            await self._release()
