"""``InMemoryRouteStore``: the RouteStore port as one variable (service tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from core.errors import RouteConflictError
from core.routing import RouteTable

__all__ = ["InMemoryRouteStore"]


class InMemoryRouteStore:
    def __init__(self) -> None:
        self._table: RouteTable | None = None
        self._changed = anyio.Event()

    async def current(self) -> RouteTable | None:
        return self._table

    async def put(self, table: RouteTable) -> None:
        stored = 0 if self._table is None else self._table.version
        if table.version != stored + 1:
            raise RouteConflictError(
                f"route table version {table.version} does not follow the stored {stored}"
            )
        self._table = table
        self._changed.set()
        self._changed = anyio.Event()

    async def watch(self) -> AsyncIterator[RouteTable | None]:
        changed = self._changed
        table = self._table
        yield table
        while True:
            await changed.wait()
            changed = self._changed
            if self._table is not table:
                table = self._table
                yield table
