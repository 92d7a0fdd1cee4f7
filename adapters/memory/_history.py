"""``InMemoryHistory``: the History port over an ``InMemoryTransport``'s kept messages."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio.lowlevel

from adapters.memory._transport import InMemoryTransport
from core.model import Partition
from core.replay import Place, StoredMessage, Window

__all__ = ["InMemoryHistory"]


class InMemoryHistory:
    """Reads what ``transport`` stored (it keeps every message for its lifetime)."""

    def __init__(self, transport: InMemoryTransport) -> None:
        self._transport = transport

    async def read(
        self, partition: Partition, window: Window, project_id: str | None = None
    ) -> AsyncIterator[StoredMessage]:
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        stored = list(self._transport.history.get(partition, ()))  # the end: what is there now
        for message in stored:
            await anyio.lowlevel.checkpoint()
            place = window.place(message.position, message.stored_at)
            if place is Place.AFTER:
                return
            if place is Place.INSIDE and project_id in (None, message.envelope.project_id):
                yield message
