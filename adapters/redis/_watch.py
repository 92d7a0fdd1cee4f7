"""Watch some state as a sequence of snapshots: read it, then re-read whenever the change
feed says it changed, after every feed reconnect, and at least every ``resync_interval``."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from adapters._backoff import Backoff
from adapters.redis._client import RedisClient
from adapters.redis._feed import Change, Feed
from core.errors import StoreUnavailableError

__all__ = ["watch_snapshots"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


async def watch_snapshots(
    client: RedisClient,
    feed: Feed,
    wanted: Callable[[Change], bool],
    read: Callable[[], Awaitable[T]],
    what: str,
) -> AsyncGenerator[T, None]:
    """Yield ``read()`` now and after every change ``wanted`` selects (a snapshot may
    cover several changes). Runs until the caller closes it; retries while Redis is
    unreachable. Raises ``StoreUnavailableError`` only when the client is closed under it.
    """
    settings = client.settings
    backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
    with feed.interest(wanted) as changes:
        while True:
            changes.clear()  # before reading: a change during the read fires again
            try:
                value = await read()
            except StoreUnavailableError as exc:
                if client.closed:
                    raise
                _log.warning("redis watch %s: re-read failed, retrying: %s", what, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            yield value
            await changes.wait(settings.resync_interval)
