"""A value that tasks can wait on to change: the glue between a watch and its readers."""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Observed(Generic[T]):
    """Holds the latest value of something watched; ``wait_change`` wakes on the next set."""

    def __init__(self, initial: T) -> None:
        self._value = initial
        self._changed = anyio.Event()

    @property
    def value(self) -> T:
        return self._value

    def set(self, value: T) -> None:
        self._value = value
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_change(self, within: float) -> bool:
        """True if the value changed within ``within`` seconds."""
        changed = self._changed
        with anyio.move_on_after(within):
            await changed.wait()
            return True
        return False
