"""What every Redis adapter shares: a client, a task group, a change feed, bounded exit."""

from __future__ import annotations

import logging
from typing import ClassVar

import anyio

from adapters._lifecycle import Lifecycle
from adapters.redis._client import RedisClient
from adapters.redis._feed import Feed, Interest
from adapters.redis._keys import Keys
from adapters.redis._lease import Lease
from adapters.redis._settings import RedisSettings
from core.errors import IncompatibleServerError, ShoalError
from core.server_floors import REDIS, refusal

_log = logging.getLogger(__name__)


class RedisAdapter(Lifecycle):
    """Base of the Redis adapters: ``async with`` connects and owns the background tasks
    (lease renewals, the change feed).

    Leaving stops every renewal, deletes the lease keys still held (owner-checked, so
    others see the member or leader go at once) and closes the client, all within
    ``settings.close_timeout`` seconds.
    """

    _expirations: ClassVar[bool] = False  # does this adapter need expiry notifications?

    def __init__(self, settings: RedisSettings | None = None) -> None:
        self.settings = settings if settings is not None else RedisSettings()
        self._keys = Keys(self.settings.prefix)
        self._client = RedisClient(self.settings)
        self._feed = Feed(self._client, self._keys, expirations=self._expirations)
        self._leases: set[Lease] = set()

    async def _connect(self) -> None:
        await self._client.connect()
        problem = refusal(
            f"Redis at {self._client.where}", await self._client.server_version(), (REDIS,)
        )
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            for lease in list(self._leases):
                try:
                    await lease.release()
                except ShoalError as exc:
                    _log.warning("redis key %s not deleted on exit: %s", lease.key, exc)
            self._leases.clear()

    async def _disconnect(self) -> None:
        await self._client.aclose()

    async def _started_feed(self) -> Feed:
        """The change feed, started on first use."""
        await self._feed.start(self._tasks)
        return self._feed

    async def _keep(self, lease: Lease, wake: Interest) -> None:
        """Renew ``lease`` in this adapter's task group until it is lost or stopped."""
        self._leases = {held for held in self._leases if not held.is_lost()}
        self._leases.add(lease)
        await self._tasks.start(self._run_lease, lease, wake)

    async def _run_lease(
        self, lease: Lease, wake: Interest, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        try:
            await lease.keep_alive(wake, task_status=task_status)
        finally:
            self._feed.remove(wake)
            if lease.is_lost():
                self._leases.discard(lease)
