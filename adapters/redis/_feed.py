"""The change feed: one per adapter, telling its watchers and leases that something changed.

Two sources, each read by one task of the adapter's task group:

- the ``events`` stream, appended to by every mutating script (durable): ``XREAD BLOCK``
  from the last id seen;
- expirations, which write no event: the keyspace notification channel
  ``__keyevent@{db}__:expired`` (fire-and-forget pub/sub; Redis must run with
  ``notify-keyspace-events`` containing ``E`` and ``x``, e.g. ``Ex`` or ``KEA``).

A notification only says "re-read": watchers always read the whole state afterwards, so
an event never has to carry data, and a lost one costs latency, not correctness. Whenever
either source (re)connects, every subscriber is told to re-read (events or expirations
may have been missed while it was away, or Redis restarted and lost the stream), and
watchers re-read every ``resync_interval`` anyway. Without keyspace notifications the
adapters still work: an expired member or leader is then seen within ``resync_interval``
(a waiting candidate retries when the leader key's TTL runs out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup, TaskStatus
from redis.exceptions import RedisError

from adapters._backoff import Backoff
from adapters._interest import Interest as _Interest
from adapters.redis._client import RedisClient
from adapters.redis._keys import Keys
from core.errors import StoreUnavailableError

__all__ = ["Change", "Feed", "Interest"]

_log = logging.getLogger(__name__)
_warned: set[str] = set()  # servers already reported as not publishing expirations


@dataclass(frozen=True, slots=True)
class Change:
    topic: str  # members | leader | assignment | holds
    op: str  # join, update, leave, expired, elected, resigned, published, claimed, released
    key: str


Interest = _Interest[Change]
"""A watcher's flag, fired by this feed's changes."""


class Feed:
    """The change feed of one adapter. ``start`` it once in the adapter's task group."""

    def __init__(self, client: RedisClient, keys: Keys, *, expirations: bool) -> None:
        self._client = client
        self._keys = keys
        self._expirations = expirations
        self._interests: set[Interest] = set()
        self._started = False

    async def start(self, tasks: TaskGroup) -> None:
        """Start reading (idempotent). Returns once each source made its first attempt, so
        a change after this call is seen (or a reconnect re-read is signalled)."""
        if self._started:
            return
        self._started = True
        await tasks.start(self._read_events)
        if self._expirations:
            await tasks.start(self._read_expirations)

    @contextmanager
    def interest(self, wanted: Callable[[Change], bool]) -> Iterator[Interest]:
        interest = Interest(wanted)
        self._interests.add(interest)
        try:
            yield interest
        finally:
            self._interests.discard(interest)

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

    # --- sources ---------------------------------------------------------------------------

    async def _read_events(self, *, task_status: TaskStatus[None]) -> None:
        client, stream = self._client, self._keys.events
        settings = client.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        block = min(settings.resync_interval, settings.call_timeout)
        last: bytes | None = None
        started = failed = False
        while True:
            try:
                if failed:
                    # Redis may have restarted: idle pooled connections would fail once each
                    await client.drop_idle_connections()
                    failed = False
                if last is None:
                    # (Re)start after the newest entry: what came before is in the state
                    # the subscribers re-read now. After a restart that lost the stream,
                    # the old id would be ahead of every new one: never resume from it.
                    last = await client.last_event_id(stream)
                    self._fire(None)
                if not started:
                    started = True
                    task_status.started()
                for event in await client.read_events(stream, last, block):
                    last = event.id
                    self._fire(Change(event.topic, event.op, event.key))
                backoff.reset()
            except (StoreUnavailableError, RedisError) as exc:
                if client.closed:
                    return
                if last is not None:
                    _log.warning("redis change feed %s: %s; re-reading when back", stream, exc)
                last, failed = None, True
                if not started:
                    started = True
                    task_status.started()
                await backoff.sleep()

    async def _read_expirations(self, *, task_status: TaskStatus[None]) -> None:
        client = self._client
        settings = client.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        channel = f"__keyevent@{client.db}__:expired"
        wait = min(settings.resync_interval, settings.call_timeout)
        started = False
        checked = False
        while True:
            try:
                pubsub = await client.subscribe(channel)
            except (StoreUnavailableError, RedisError) as exc:
                if client.closed:
                    return
                _log.debug("redis expirations: cannot subscribe: %s", exc)
                if not started:
                    started = True
                    task_status.started()
                await backoff.sleep()
                continue
            try:
                self._fire(None)  # expirations may have been missed while unsubscribed
                if not started:
                    started = True
                    task_status.started()
                if not checked:
                    checked = await self._check_notifications()
                backoff.reset()
                while True:
                    key = await client.next_message(pubsub, wait)
                    if key is not None:
                        self._on_expired(key)
            except (StoreUnavailableError, RedisError) as exc:
                if client.closed:
                    return
                _log.warning("redis expirations %s: %s; re-subscribing", channel, exc)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(settings.close_timeout):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await backoff.sleep()

    def _on_expired(self, key: str) -> None:
        keys = self._keys
        if key.startswith(keys.consumers):
            self._fire(Change("members", "expired", key))
        elif key == keys.leader:
            self._fire(Change("leader", "expired", key))

    async def _check_notifications(self) -> bool:
        """Warn once when Redis does not publish expirations. True once checked."""
        try:
            config = await self._client.config_get("notify-keyspace-events")
        except StoreUnavailableError:
            return False
        except RedisError as exc:  # CONFIG may be disabled (managed Redis): cannot tell
            _log.info("redis: cannot read notify-keyspace-events (%s)", exc)
            return True
        flags = config.get("notify-keyspace-events", "")
        where = self._client.where
        if ("E" not in flags or not ("x" in flags or "A" in flags)) and where not in _warned:
            _warned.add(where)  # once per server and process, not per adapter
            _log.warning(
                "redis at %s: notify-keyspace-events is %r: expirations are not published, so an "
                "expired member or leader is noticed only by the periodic re-read (every "
                "%g s); set it to 'Ex' (or 'KEA')",
                where,
                flags,
                self._client.settings.resync_interval,
            )
        return True
