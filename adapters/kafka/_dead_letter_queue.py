"""``KafkaDeadLetterQueue``: the DeadLetterQueue port on the dead-letter topic.

A topic is a log: a letter cannot be deleted on its own. So settling is appended: a
record with ``Shoal-Dead-Settles`` (the settled letters' offsets) and no envelope.
``letters`` reads the topic from its start to its end offset and leaves out every letter
a later record settles. ``replay`` sends each picked message id once to its partition of
the data topic with ``Shoal-Replay`` (its dead-letter offset, so subscriptions do not
take it for a duplicate of the original), waits until Kafka confirmed every copy, then
appends the settling record; ``purge`` appends only the settling record. A replay whose
settling record was not confirmed leaves the letters listed: replaying them again sends
records the landing table then treats as duplicates of the first replay's (same message
id, another position), so ``shoal dlq`` says so when it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

import anyio

from adapters._lifecycle import Lifecycle
from adapters.kafka._aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    KafkaError,
    TopicPartition,
    stop_quietly,
)
from adapters.kafka._codec import (
    H_DEAD_ATTEMPTS,
    H_DEAD_REASON,
    H_REPLAY,
    H_SETTLES,
    H_SOURCE,
    decode,
    envelope_headers,
)
from adapters.kafka._login import check_login, reaching
from adapters.kafka._settings import KafkaSettings
from core.dead_letters import DeadLetter, pick, reason_of
from core.errors import BrokerUnavailableError, PublishError

__all__ = ["KafkaDeadLetterQueue"]

log = logging.getLogger("shoal.adapters.kafka")


class KafkaDeadLetterQueue(Lifecycle):
    """The DeadLetterQueue port on Kafka's dead-letter topic (one partition)."""

    def __init__(self, settings: KafkaSettings | None = None) -> None:
        self.settings = settings or KafkaSettings()
        self._producer: Any = None
        self._reader: Any = None
        self._topic = TopicPartition(self.settings.dead_letter_topic, 0)

    async def _connect(self) -> None:
        s = self.settings
        common = s.client_options()
        with reaching(s, "Kafka", BrokerUnavailableError):
            await check_login(s)
            self._producer = AIOKafkaProducer(
                client_id=f"{s.client_id}-dlq", acks="all", enable_idempotence=True, **common
            )
            await self._producer.start()
            self._reader = AIOKafkaConsumer(
                client_id=f"{s.client_id}-dlq-reader",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **common,
            )
            await self._reader.start()

    async def _disconnect(self) -> None:
        for name, client in (("dead-letter reader", self._reader), ("producer", self._producer)):
            if client is None:
                continue
            with anyio.move_on_after(self.settings.close_timeout) as scope:
                await stop_quietly(client, "stop", scope, f"Kafka {name}")
        self._producer = self._reader = None

    # -- the port --------------------------------------------------------------------

    async def letters(self) -> Sequence[DeadLetter]:
        try:
            with anyio.fail_after(self.settings.request_timeout * 4):
                return await self._read()
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailableError(f"Kafka: reading the dead letters: {exc!r}") from exc

    async def replay(self, message_ids: Collection[str] | None) -> int:
        chosen = pick(await self.letters(), message_ids)
        if not chosen:
            return 0
        s = self.settings
        first: dict[str, DeadLetter] = {}
        for letter in chosen:
            first.setdefault(letter.envelope.message_id, letter)
        try:
            with anyio.fail_after(s.publish_timeout):
                futures = []
                for letter in first.values():
                    envelope = letter.envelope
                    headers = [
                        *envelope_headers(envelope),
                        (H_REPLAY, str(letter.position).encode()),
                    ]
                    futures.append(
                        await self._producer.send(
                            s.topic,
                            envelope.payload,
                            key=envelope.project_id.encode() or None,
                            partition=envelope.partition,
                            headers=headers,
                        )
                    )
                for future in futures:
                    await future
        except (KafkaError, TimeoutError) as exc:
            raise PublishError(
                f"replay of {len(first)} dead letters not confirmed: {exc!r}; "
                "they stay listed (replaying them again may land duplicates)"
            ) from exc
        await self._settle(chosen, "replayed")
        return len(first)

    async def purge(self, message_ids: Collection[str] | None) -> int:
        chosen = pick(await self.letters(), message_ids)
        if chosen:
            await self._settle(chosen, "purged")
        return len(chosen)

    # -- helpers ---------------------------------------------------------------------

    async def _read(self) -> list[DeadLetter]:
        reader = self._reader
        if reader is None:
            raise RuntimeError("KafkaDeadLetterQueue is not entered (use 'async with')")
        if self._topic.topic not in await reader.topics():
            return []  # no message has died yet (the transport creates the topic)
        if not reader.assignment():
            reader.assign([self._topic])
        end = (await reader.end_offsets([self._topic]))[self._topic]
        start = (await reader.beginning_offsets([self._topic]))[self._topic]
        reader.seek(self._topic, start)
        stored: dict[int, DeadLetter] = {}
        settled: set[int] = set()
        while await reader.position(self._topic) < end:
            batches = await reader.getmany(self._topic, timeout_ms=500, max_records=10_000)
            for record in batches.get(self._topic, ()):
                if record.offset >= end:
                    break
                headers = dict(record.headers or ())
                if H_SETTLES in headers:
                    settled.update(int(o) for o in headers[H_SETTLES].decode().split(",") if o)
                elif H_DEAD_REASON in headers:
                    stored[record.offset] = self._letter(record, headers)
        return [letter for offset, letter in sorted(stored.items()) if offset not in settled]

    def _letter(self, record: Any, headers: dict[str, bytes]) -> DeadLetter:
        dead_at = (record.timestamp or 0) / 1000
        envelope = decode(
            record.headers,
            record.key,
            record.value,
            partition=_source_partition(headers.get(H_SOURCE, b"")),
            fallback_id=f"{self.settings.dead_letter_topic}:0:{record.offset}",
            fallback_time=dead_at,
        )
        attempts = headers.get(H_DEAD_ATTEMPTS, b"0").decode(errors="replace")
        return DeadLetter(
            envelope=envelope,
            reason=reason_of(headers[H_DEAD_REASON].decode(errors="replace")),
            attempts=int(attempts) if attempts.isdigit() else 0,
            position=int(record.offset),
            dead_at=dead_at,
        )

    async def _settle(self, letters: Sequence[DeadLetter], how: str) -> None:
        s = self.settings
        offsets = ",".join(str(letter.position) for letter in letters)
        try:
            with anyio.fail_after(s.publish_timeout):
                future = await self._producer.send(
                    s.dead_letter_topic, b"", partition=0, headers=[(H_SETTLES, offsets.encode())]
                )
                await future
        except (KafkaError, TimeoutError) as exc:
            raise PublishError(
                f"{how} {len(letters)} dead letters, but the record saying so was not "
                f"confirmed: {exc!r}; they stay listed"
            ) from exc
        log.info("%d dead letters %s", len(letters), how)


def _source_partition(source: bytes) -> int:
    """The partition in ``topic/partition/offset``; -1 when unreadable."""
    parts = source.decode(errors="replace").split("/")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else -1
