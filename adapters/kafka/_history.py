"""``KafkaHistory``: the History port on the data topic (kept for its ``retention.ms`` /
``retention.bytes``, consumed or not).

A read ``assign()``s the partition to a group-less consumer (no offsets are committed, so
the handlers' progress is untouched), takes the partition's end offset, and seeks: to the
window's start offset, or by time with ``offsets_for_times`` (the first record whose
timestamp is at or after the start, in milliseconds: the window is checked here on each
record's timestamp). It reads until the window's end, or the end offset taken at the
start, so a read ends while publishing goes on. A pack record yields each of its
messages, in their order, all at the record's offset and time.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio

from adapters._lifecycle import Lifecycle
from adapters.kafka._aiokafka import AIOKafkaConsumer, KafkaError, TopicPartition, stop_quietly
from adapters.kafka._codec import decode_all
from adapters.kafka._login import check_login, reaching
from adapters.kafka._settings import KafkaSettings
from core.errors import BrokerUnavailableError
from core.model import Partition
from core.replay import AtPosition, Bound, Place, StoredMessage, Window

__all__ = ["KafkaHistory"]

log = logging.getLogger("shoal.adapters.kafka")

_BATCH = 1000


class KafkaHistory(Lifecycle):
    """The History port on Kafka's data topic. One read at a time."""

    def __init__(self, settings: KafkaSettings | None = None) -> None:
        self.settings = settings or KafkaSettings()
        self._reader: Any = None

    async def _connect(self) -> None:
        s = self.settings
        with reaching(s, "Kafka", BrokerUnavailableError):
            await check_login(s)
            self._reader = AIOKafkaConsumer(
                client_id=f"{s.client_id}-replay",
                group_id=None,
                enable_auto_commit=False,
                fetch_max_bytes=s.fetch_max_bytes,
                max_partition_fetch_bytes=s.fetch_max_bytes,
                **s.client_options(),
            )
            await self._reader.start()

    async def _disconnect(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with anyio.move_on_after(self.settings.close_timeout) as scope:
                await stop_quietly(reader, "stop", scope, "Kafka replay reader")

    # -- the port --------------------------------------------------------------------

    async def read(
        self, partition: Partition, window: Window, project_id: str | None = None
    ) -> AsyncIterator[StoredMessage]:
        s = self.settings
        if not 0 <= partition < s.partitions:
            raise ValueError(f"partition {partition} is outside 0..{s.partitions - 1}")
        reader = self._reader
        if reader is None:
            raise RuntimeError("KafkaHistory is not entered (use 'async with')")
        tp = TopicPartition(s.topic, partition)
        try:
            with anyio.fail_after(s.request_timeout):
                if s.topic not in await reader.topics():
                    return  # nothing was ever published
                reader.assign([tp])
                end = int((await reader.end_offsets([tp]))[tp])
                start = await self._start(tp, window.start)
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"Kafka: seeking in partition {partition}: {exc!r}"
            ) from exc
        if start is None or start >= end:
            return
        reader.seek(tp, start)
        async for record in self._records(tp, end):
            stored_at = record.timestamp / 1000
            place = window.place(record.offset, stored_at)
            if place is Place.AFTER:
                return
            if place is Place.BEFORE:
                continue
            for envelope in decode_all(
                record.headers,
                record.key,
                record.value,
                partition=partition,
                fallback_id=f"{s.topic}:{partition}:{record.offset}",
                fallback_time=stored_at,
            ):
                if project_id in (None, envelope.project_id):
                    yield StoredMessage(envelope, int(record.offset), stored_at)

    # -- helpers ---------------------------------------------------------------------

    async def _start(self, tp: TopicPartition, bound: Bound) -> int | None:
        """The first offset to read; None when no record is at or after a time bound."""
        reader = self._reader
        first = int((await reader.beginning_offsets([tp]))[tp])
        if isinstance(bound, AtPosition):
            return max(bound.position, first)
        found = (await reader.offsets_for_times({tp: max(math.floor(bound.epoch * 1000), 0)}))[tp]
        return None if found is None else max(int(found.offset), first)

    async def _records(self, tp: TopicPartition, end: int) -> AsyncIterator[Any]:
        """The records from the current position up to ``end`` (exclusive), in order;
        ``BrokerUnavailableError`` when none comes for ``request_timeout`` before then."""
        reader, s = self._reader, self.settings
        stalled_since = anyio.current_time()
        try:
            while await reader.position(tp) < end:
                batches = await reader.getmany(tp, timeout_ms=500, max_records=_BATCH)
                records = batches.get(tp, ())
                if not records:
                    if anyio.current_time() - stalled_since > s.request_timeout:
                        raise BrokerUnavailableError(
                            f"Kafka: nothing read from {tp.topic}/{tp.partition} for "
                            f"{s.request_timeout} s before offset {end}"
                        )
                    continue
                stalled_since = anyio.current_time()
                for record in records:
                    if record.offset >= end:
                        return
                    yield record
        except KafkaError as exc:
            raise BrokerUnavailableError(f"Kafka: reading {tp.topic}: {exc!r}") from exc
