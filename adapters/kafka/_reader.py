"""``Readers``: the consumers a transport reads its subscribed partitions with, one for all.

One group-less ``AIOKafkaConsumer`` serves every partition a process subscribes to: its
fetcher asks each broker once for all of them, where a consumer per partition (64 per
handler) ran a fetch loop and a connection each (measured: the handlers' CPU per message
0.84 x of that, docs/benchmarks.md). Each subscription still reads only its own partition
(``getmany(tp)``) and keeps its own offsets; the reader only carries the records.

aiokafka's ``assign()`` replaces the assignment and forgets every position, so adding or
removing a partition re-assigns the rest and seeks each back to where its subscription
reads next (records prefetched and not yet taken are fetched again). ``assign`` and the
seeks run without an await between them: the fetcher never sees a partition without a
position (with ``auto_offset_reset="none"`` that would be an error, not a reset).

A partition is read by at most one subscription of a reader; a second open subscription
of the same partition (a test that opens it twice in one process) gets a reader of its
own, stopped when its last partition closes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from adapters.kafka._aiokafka import stop_quietly

__all__ = ["Reader", "Readers"]

log = logging.getLogger("shoal.adapters.kafka")


class Reader:
    """One started consumer and the partitions it reads, each with where it reads next."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self._next: dict[Any, Callable[[], int]] = {}  # tp -> its next offset

    def holds(self, tp: Any) -> bool:
        return tp in self._next

    def holds_only(self, tp: Any) -> bool:
        return list(self._next) == [tp]

    def add(self, tp: Any, next_offset: Callable[[], int]) -> None:
        self._next[tp] = next_offset
        self._reassign()

    def remove(self, tp: Any) -> None:
        if self._next.pop(tp, None) is not None:
            self._reassign()

    def _reassign(self) -> None:
        self.consumer.assign(list(self._next))
        for tp, next_offset in self._next.items():
            self.consumer.seek(tp, next_offset())


class Readers:
    """The readers of one transport: the first serves every partition opened once."""

    def __init__(self, make_consumer: Callable[[int], Any], close_timeout: float) -> None:
        self._make = make_consumer  # (reader number) -> an unstarted consumer
        self._close_timeout = close_timeout
        self._readers: list[Reader] = []
        self._made = 0
        self._lock = anyio.Lock()  # partitions opened at once share the first reader

    async def reader_for(self, tp: Any, next_offset: Callable[[], int]) -> Reader:
        """A started reader that now reads ``tp`` from ``next_offset()``; raises what the
        consumer's start raises."""
        async with self._lock:
            return await self._reader_for(tp, next_offset)

    async def _reader_for(self, tp: Any, next_offset: Callable[[], int]) -> Reader:
        for reader in self._readers:
            if not reader.holds(tp):
                reader.add(tp, next_offset)
                return reader
        consumer = self._make(self._made)
        self._made += 1
        try:
            await consumer.start()
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._close_timeout) as scope:
                await stop_quietly(consumer, "stop", scope, "partition reader")
            raise
        reader = Reader(consumer)
        self._readers.append(reader)
        reader.add(tp, next_offset)
        return reader

    async def release(self, reader: Reader, tp: Any, scope: anyio.CancelScope) -> None:
        """Stop reading ``tp``; a reader left without partitions, other than the first, is
        stopped (the first stays for the next partition opened)."""
        if reader.holds_only(tp) and reader in self._readers[1:]:
            self._readers.remove(reader)
            await stop_quietly(reader.consumer, "stop", scope, "partition reader")
        else:
            reader.remove(tp)

    async def stop(self) -> None:
        """Stop every reader, each bounded by the close timeout."""
        readers, self._readers = self._readers, []
        for reader in readers:
            with anyio.move_on_after(self._close_timeout) as scope:
                await stop_quietly(reader.consumer, "stop", scope, "partition reader")
