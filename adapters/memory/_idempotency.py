"""``InMemoryIdempotencyStore``: the IdempotencyStore port in one process (service tests).

Two instances share their records when built on one ``AnswerBook`` (two "gateways").
Time is the wall clock (``clock``, ``time.time`` by default), as ``accepted_at`` is.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio.lowlevel

from adapters._idempotency_book import AnswerBook
from adapters._lifecycle import Lifecycle
from core.idempotency import IdempotentAnswer, scope

__all__ = ["InMemoryIdempotencyStore"]


class InMemoryIdempotencyStore(Lifecycle):
    def __init__(
        self,
        window: float = 600.0,
        *,
        max_entries: int = 100_000,
        book: AnswerBook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.book = book if book is not None else AnswerBook(window, max_entries)
        self.window = self.book.window
        self._clock = clock

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        await anyio.lowlevel.checkpoint()
        return self.book.get(scope(project_id, key_digest), self._clock())

    async def remember(self, answer: IdempotentAnswer) -> None:
        await anyio.lowlevel.checkpoint()
        self.book.put(answer, self._clock())
