"""``Batched``: concurrent single-key reads served by one read of many keys.

A leader that takes office reads the backlog of every partition at once, and a handler
opens its partitions at once; on Kafka each per-partition read is a request of its own
(and a peek at a record a consumer re-assignment), so 128 of them kept the process busy
for a second. ``Batched.get(key)`` gathers the keys asked for until the asker's next
checkpoint, so the callers that run concurrently share one ``read(keys)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["Batched"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(eq=False)
class _Batch(Generic[K, V]):
    keys: dict[K, None] = field(default_factory=dict)  # ordered, unique
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Mapping[K, V] | None = None
    error: Exception | None = None


class Batched(Generic[K, V]):
    """``get(key)`` is ``read([key, ...])[key]``, one ``read`` per gathering of keys.

    The first caller of a gathering reads for everyone who joined it before its next
    checkpoint; the others wait for that read. A key the read's mapping leaves out was
    not answered in time: its ``get`` raises ``TimeoutError``. An exception of the read
    reaches every caller of its gathering; a reader that was cancelled hands the wait
    over (its waiters start a gathering of their own)."""

    def __init__(self, read: Callable[[Sequence[K]], Awaitable[Mapping[K, V]]]) -> None:
        self._read = read
        self._gathering: _Batch[K, V] | None = None

    async def get(self, key: K) -> V:
        while True:
            batch = self._gathering
            if batch is None:
                return await self._lead(key)
            batch.keys[key] = None
            await batch.done.wait()
            if batch.error is not None:
                raise batch.error
            if batch.result is not None:
                return _answer(batch.result, key)
            # its reader was cancelled before it read: gather again

    async def _lead(self, key: K) -> V:
        batch: _Batch[K, V] = _Batch()
        batch.keys[key] = None
        self._gathering = batch
        try:
            try:
                await anyio.lowlevel.checkpoint()  # the concurrent callers join here
            finally:
                self._gathering = None
            batch.result = await self._read(list(batch.keys))
        except Exception as exc:
            batch.error = exc
            raise
        finally:
            batch.done.set()
        return _answer(batch.result, key)


def _answer(result: Mapping[K, V], key: K) -> V:
    try:
        return result[key]
    except KeyError:
        raise TimeoutError(f"no answer for {key!r} in time") from None
