"""``Stateless``: the base of adapters that hold no connection or task: ``async with`` is
a no-op, so they enter composition roots like every other adapter."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Stateless"]


class Stateless:
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
