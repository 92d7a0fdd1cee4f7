"""``Interest``: how a watcher learns from a change feed that something it cares about
changed (the Redis and NATS KV coordination adapters' feeds fire them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

__all__ = ["Interest"]

ChangeT = TypeVar("ChangeT")


class Interest(Generic[ChangeT]):
    """A "something you care about changed" flag. ``clear()`` before reading the state,
    ``wait()`` after: a change in between is never lost."""

    def __init__(self, wanted: Callable[[ChangeT], bool]) -> None:
        self._wanted = wanted
        self._dirty = False
        self._event = anyio.Event()

    def fire(self, change: ChangeT | None) -> None:
        """Mark dirty if ``change`` matters (``None``: everything may have changed)."""
        if change is None or self._wanted(change):
            self._dirty = True
            self._event.set()

    def clear(self) -> None:
        self._dirty = False
        if self._event.is_set():
            self._event = anyio.Event()

    async def wait(self, within: float) -> bool:
        """True when fired (now or within ``within`` seconds), False otherwise."""
        if self._dirty:
            return True
        with anyio.move_on_after(max(0.0, within)):
            await self._event.wait()
        return self._dirty
