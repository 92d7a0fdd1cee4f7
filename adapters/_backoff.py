"""``Backoff``: ``core.retry.retry_delay`` as a sleep, for the adapters' reconnect loops."""

from __future__ import annotations

import anyio

from core.retry import retry_delay

__all__ = ["Backoff"]


class Backoff:
    """Sleep ``first`` seconds after the first failure, doubling up to ``cap``; ``reset``
    after a success."""

    def __init__(self, first: float, cap: float) -> None:
        self._first, self._cap = first, max(first, cap)
        self._failures = 0

    def reset(self) -> None:
        self._failures = 0

    async def sleep(self) -> None:
        self._failures += 1
        await anyio.sleep(retry_delay(self._failures, base=self._first, cap=self._cap))
