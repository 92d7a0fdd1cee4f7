"""``Lifecycle``: how every adapter opens and closes, written once.

``async with adapter:`` runs ``_open_outer`` (what must enclose the adapter's tasks: a
connection with a task group of its own, closed last by ``_close_outer``), opens a task
group the adapter owns (``self._tasks``: lease renewals, change feeds, listeners), then
runs ``_connect`` (connect, create what is missing; it may start tasks). Leaving runs
``_wind_down`` while those tasks still run (revoke leases, close subscriptions), then
cancels the tasks and waits for them, then runs ``_disconnect``: in that order even when a
step fails, and shielded from the caller's cancellation, so a cancelled owner still
releases what the adapter holds. Each hook bounds its own time (the adapters'
``close_timeout`` settings). A failed ``_connect`` closes everything the same way before
its error propagates.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup

__all__ = ["Lifecycle"]


class Lifecycle:
    _task_group: TaskGroup | None = None

    async def _open_outer(self) -> None:
        """Open what must enclose the adapter's task group (a connection that has a task
        group of its own), before it starts. Nothing by default."""

    async def _close_outer(self) -> None:
        """Close what ``_open_outer`` opened, last and outside every scope of this adapter
        (its own exit bounds and shields itself). Nothing by default."""

    async def _connect(self) -> None:
        """Open connections and start background tasks; nothing by default."""

    async def _wind_down(self) -> None:
        """Release what the adapter holds while its tasks still run; nothing by default."""

    async def _disconnect(self) -> None:
        """Close connections once the tasks have stopped; nothing by default."""

    @property
    def _tasks(self) -> TaskGroup:
        if self._task_group is None:
            raise RuntimeError(f"{type(self).__name__} is not open: use it as `async with ...`")
        return self._task_group

    async def __aenter__(self) -> Self:
        await self._open_outer()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await self._connect()
        except BaseException:
            # Closed as on a clean exit, so the error propagates as itself (handed to
            # the task group, it would come out wrapped in an exception group).
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        swallowed: bool | None = None
        try:
            with anyio.CancelScope(shield=True):
                await self._wind_down()
        finally:
            self._task_group = None
            try:
                if task_group is not None:
                    task_group.cancel_scope.cancel()
                    swallowed = await task_group.__aexit__(exc_type, exc_value, traceback)
            finally:
                try:
                    with anyio.CancelScope(shield=True):
                        await self._disconnect()
                finally:
                    await self._close_outer()
        return swallowed
