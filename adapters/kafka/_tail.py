"""``TopicTail``: read one single-partition topic from its start and keep up with it.

Used for the coordination log (``_kv``) and the idempotency records. Records are applied
in offset order by one task; ``sync()`` waits until everything the broker had when it was
called is applied (read-your-writes and linearizable reads for whoever calls it). The
consumer has no group: it ``assign()``s partition 0 and never commits. It sees only
records every in-sync replica has (the high watermark), so whatever it applies is
durable. ``Appender`` produces with acks=all and idempotence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from adapters.kafka._aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    KafkaError,
    TopicPartition,
)
from adapters.kafka._settings import KafkaSettings
from core.errors import StoreUnavailableError

__all__ = ["Appender", "TopicTail"]

_log = logging.getLogger("shoal.adapters.kafka.coord")

Apply = Callable[[int, bytes | None, bytes | None], None]


class TopicTail:
    """Apply every record of ``topic``'s partition 0 with ``apply(offset, key, value)``."""

    def __init__(self, settings: KafkaSettings, topic: str, apply: Apply) -> None:
        self.settings = settings
        self.topic = topic
        self._apply = apply
        self._tp = TopicPartition(topic, 0)
        self._consumer: Any = None
        # End offsets are asked on another connection: the broker answers one request per
        # connection at a time, and the reader's connection is usually parked in a long
        # poll (up to fetch_max_wait_ms), which would delay every sync() by as much.
        self._probe: Any = None
        self._scope: anyio.CancelScope | None = None
        self.position = 0  # the next offset to apply
        self.timestamp = 0  # the broker's timestamp (ms) of the record being applied
        self._changed = anyio.Event()

    def changed(self) -> anyio.Event:
        """Set at the next change of ``position``: take it *before* reading, wait after."""
        return self._changed

    def _new_consumer(self) -> Any:
        s = self.settings
        return AIOKafkaConsumer(
            client_id=f"{s.client_id}-tail",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=500,
            **s.client_options(),
        )

    async def start(self, tasks: TaskGroup) -> None:
        probe = self._new_consumer()
        await probe.start()
        self._probe = probe
        consumer = self._new_consumer()
        await consumer.start()
        self._consumer = consumer
        consumer.assign([self._tp])
        await consumer.seek_to_beginning(self._tp)
        await tasks.start(self._run)

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
        consumer, self._consumer = self._consumer, None
        probe, self._probe = self._probe, None
        try:
            if consumer is not None:
                await consumer.stop()
        finally:
            if probe is not None:
                await probe.stop()

    async def _run(self, *, task_status: TaskStatus[None]) -> None:
        # Shielded, and stopped by ``stop()`` only: when the task that owns the adapter is
        # cancelled, its shielded clean-up (a handler releasing its holds) still needs the
        # reader to learn the outcome of its last requests.
        with anyio.CancelScope(shield=True) as self._scope:
            task_status.started()
            await self._read()

    async def _read(self) -> None:
        backoff = self.settings.retry_backoff
        while self._consumer is not None:
            consumer = self._consumer
            try:
                batches = await consumer.getmany(self._tp, timeout_ms=1000, max_records=1000)
                for record in batches.get(self._tp, ()):
                    try:
                        self.timestamp = int(record.timestamp)
                        self._apply(int(record.offset), record.key, record.value)
                    except ValueError as exc:
                        _log.warning("%s@%d: ignoring record: %s", self.topic, record.offset, exc)
                position = int(await consumer.position(self._tp))
            except KafkaError as exc:
                _log.warning("reading %s failed, retrying: %r", self.topic, exc)
                await anyio.sleep(backoff)
                continue
            if position != self.position or batches:
                self.position = position
                self._changed.set()
                self._changed = anyio.Event()

    async def sync(self) -> None:
        """Wait until every record stored before this call is applied. Raises
        ``StoreUnavailableError`` when the broker does not answer within ``request_timeout``."""
        probe = self._probe
        if probe is None:
            raise StoreUnavailableError(f"{self.topic}: not open")
        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                end = int((await probe.end_offsets([self._tp]))[self._tp])
                while self.position < end:
                    await self.changed().wait()
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"Kafka: {self.topic} not read up to its end within {timeout:g} s"
            ) from exc
        except KafkaError as exc:
            raise StoreUnavailableError(f"Kafka: end offset of {self.topic}: {exc!r}") from exc


class Appender:
    """Produce to one topic's partition 0 with acks=all and idempotence."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self._producer: Any = None

    async def start(self) -> None:
        s = self.settings
        producer = AIOKafkaProducer(
            client_id=f"{s.client_id}-coord",
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            **s.client_options(),
        )
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def append(self, key: bytes | None, value: bytes | None) -> int:
        """Store one record; its offset. Raises ``StoreUnavailableError`` when the broker
        did not confirm within ``request_timeout`` (the record may still be stored)."""
        producer = self._producer
        if producer is None:
            raise StoreUnavailableError(f"{self.topic}: not open")
        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                metadata = await producer.send_and_wait(self.topic, value, key=key, partition=0)
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"Kafka: write to {self.topic} not confirmed within {timeout:g} s"
            ) from exc
        except KafkaError as exc:
            raise StoreUnavailableError(f"Kafka: write to {self.topic}: {exc!r}") from exc
        return int(metadata.offset)
