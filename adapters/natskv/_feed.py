"""The change feed of one adapter: a KV watcher on the keys it cares about, telling its
watches and leases that something changed.

A change only says "re-read": watches always read the whole state afterwards, so a
notification carries no state and a lost one costs latency, not correctness. The watcher
is an ordered consumer; it sees writes, deletes and the server's expiry markers (a key
whose TTL ran out). Whenever it is (re)created, after a NATS reconnect (the server may have
restarted: the ephemeral consumer is gone) or a failure, every interest is told to re-read,
and watches re-read every ``resync_interval`` anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup, TaskStatus

from adapters._backoff import Backoff
from adapters._interest import Interest as _Interest
from adapters.natskv._bucket import Bucket, stop_watcher
from core.errors import StoreUnavailableError

__all__ = ["Change", "Feed", "Interest"]

_log = logging.getLogger("shoal.adapters.natskv")


@dataclass(frozen=True, slots=True)
class Change:
    key: str
    value: bytes  # empty for a delete or an expiry
    deleted: bool


Interest = _Interest[Change]
"""A watcher's flag, fired by this feed's changes."""


class Feed:
    """Changes under ``prefix``. ``start`` it once in the adapter's task group."""

    def __init__(self, bucket: Bucket, prefix: str) -> None:
        self._bucket = bucket
        self._prefix = prefix
        self._interests: set[Interest] = set()
        self._started = False

    async def start(self, tasks: TaskGroup) -> None:
        """Start watching (idempotent). Returns once the first watcher is set up (or failed,
        then it retries), so a change after this call is seen."""
        if self._started:
            return
        self._started = True
        await tasks.start(self._run)

    @contextmanager
    def interest(self, wanted: Callable[[Change], bool]) -> Iterator[Interest]:
        interest = self.add(wanted)
        try:
            yield interest
        finally:
            self.remove(interest)

    def add(self, wanted: Callable[[Change], bool]) -> Interest:
        """An interest that lives until ``remove``."""
        interest = Interest(wanted)
        self._interests.add(interest)
        return interest

    def remove(self, interest: Interest) -> None:
        self._interests.discard(interest)

    def _fire(self, change: Change | None) -> None:
        for interest in list(self._interests):
            interest.fire(change)

    async def _run(self, *, task_status: TaskStatus[None]) -> None:
        bucket, settings = self._bucket, self._bucket.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        started = False
        while not bucket.closed:
            generation = bucket.generation
            try:
                watcher = await bucket.watch(self._prefix)
            except StoreUnavailableError as exc:
                _log.warning("NATS KV feed %s: %s; retrying", self._prefix, exc)
                if not started:
                    started = True
                    task_status.started()
                await backoff.sleep()
                continue
            try:
                self._fire(None)  # changes may have been missed while not watching
                if not started:
                    started = True
                    task_status.started()
                backoff.reset()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_cancel_on_reconnect, bucket, generation, tasks.cancel_scope)
                    async for entry in watcher:
                        if entry is None:  # the end of the initial values
                            continue
                        deleted = entry.operation in ("DEL", "PURGE")
                        self._fire(Change(entry.key, entry.value or b"", deleted))
                    tasks.cancel_scope.cancel()  # the watcher was stopped under us
            finally:
                await stop_watcher(watcher)


async def _cancel_on_reconnect(bucket: Bucket, generation: int, scope: anyio.CancelScope) -> None:
    """The ordered consumer may be gone with a restarted server: start a new watcher."""
    await bucket.wait_reconnect(generation)
    scope.cancel()
