"""What every Redis adapter shares: a client, a task group, a change feed, bounded exit."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import ClassVar, Self

import anyio
from anyio.abc import TaskGroup

from adapters.redis._client import RedisClient
from adapters.redis._feed import Feed, Subscription
from adapters.redis._keys import Keys
from adapters.redis._lease import Lease
from adapters.redis._settings import RedisSettings
from core.errors import ShoalError, StoreUnavailableError

_log = logging.getLogger(__name__)


class RedisAdapter:
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
        self._task_group: TaskGroup | None = None
        self._feed = Feed(self._client, self._keys, expirations=self._expirations)
        self._leases: set[Lease] = set()

    async def __aenter__(self) -> Self:
        await self._client.connect()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        swallowed: bool | None = None
        try:
            with anyio.move_on_after(self.settings.close_timeout, shield=True):
                for lease in list(self._leases):
                    try:
                        await lease.release()
                    except ShoalError as exc:
                        _log.warning("redis key %s not deleted on exit: %s", lease.key, exc)
                self._leases.clear()
        finally:
            try:
                if task_group is not None:
                    task_group.cancel_scope.cancel()
                    swallowed = await task_group.__aexit__(exc_type, exc_value, traceback)
            finally:
                await self._client.aclose()
        return swallowed

    @property
    def _tasks(self) -> TaskGroup:
        if self._task_group is None:
            raise StoreUnavailableError(
                f"{type(self).__name__} is not open: use it as `async with ...`"
            )
        return self._task_group

    async def _started_feed(self) -> Feed:
        """The change feed, started on first use."""
        await self._feed.start(self._tasks)
        return self._feed

    async def _keep(self, lease: Lease, wake: Subscription) -> None:
        """Renew ``lease`` in this adapter's task group until it is lost or stopped."""
        self._leases = {held for held in self._leases if not held.is_lost()}
        self._leases.add(lease)
        await self._tasks.start(self._run_lease, lease, wake)

    async def _run_lease(
        self, lease: Lease, wake: Subscription, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        try:
            await lease.keep_alive(wake, task_status=task_status)
        finally:
            self._feed.remove(wake)
            if lease.is_lost():
                self._leases.discard(lease)
