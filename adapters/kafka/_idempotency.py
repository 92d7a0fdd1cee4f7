"""``KafkaIdempotencyStore``: the IdempotencyStore port on a topic of its own.

Topic ``{topic}.idempotency`` (``shoal.data.idempotency``): one partition, records keyed
by scope (``{project}.{key digest}``), ``cleanup.policy=compact,delete`` with
``retention.ms`` and ``segment.ms`` = the window, so the topic holds about two windows of
records at most. Every gateway tails it from the start into an ``AnswerBook`` (the
latest answer per scope, dropped ``window`` seconds after its ``accepted_at``, and at
most ``max_entries`` of them: bounded memory). ``remember`` produces with acks=all and
idempotence and returns once confirmed; ``recall`` first waits until the tail has read
up to the end offset the topic had when it was called (bounded by ``request_timeout``),
so an answer another gateway remembered before the call is seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio

from adapters._idempotency_book import AnswerBook
from adapters._lifecycle import Lifecycle
from adapters.kafka._admin import create_topics
from adapters.kafka._aiokafka import AIOKafkaAdminClient, NewTopic
from adapters.kafka._login import check_login, reaching
from adapters.kafka._settings import KafkaSettings
from adapters.kafka._tail import Appender, TopicTail
from core.errors import StoreUnavailableError
from core.idempotency import IdempotentAnswer, decode_answer, encode_answer, scope

__all__ = ["KafkaIdempotencyStore"]


class KafkaIdempotencyStore(Lifecycle):
    """``async with KafkaIdempotencyStore(settings, window=600) as store``."""

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        window: float = 600.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or KafkaSettings()
        self.topic = f"{self.settings.topic}.idempotency"
        self.book = AnswerBook(window, max_entries)
        self.window = window
        self._clock = clock
        self._out = Appender(self.settings, self.topic)
        self._in = TopicTail(self.settings, self.topic, self._apply)

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None or value is None:
            return
        answer = decode_answer(value)  # a ValueError is logged and skipped by the tail
        if answer.scope != key.decode("utf-8", "replace"):
            raise ValueError(f"record key {key!r} is not its answer's scope")
        self.book.put(answer, self._clock())

    async def _connect(self) -> None:
        with reaching(
            self.settings, f"Kafka idempotency topic {self.topic}", StoreUnavailableError
        ):
            await self._ensure_topic()
            await self._out.start()
            await self._in.start(self._tasks)
            await self._in.sync()

    async def _ensure_topic(self) -> None:
        s = self.settings
        if not s.create_topics:
            return
        window_ms = str(max(1, s.ms(self.window)))
        await check_login(s)
        admin: Any = AIOKafkaAdminClient(
            client_id=f"{s.client_id}-idempotency-admin", **s.client_options()
        )
        await admin.start()
        try:
            topic = NewTopic(
                self.topic,
                1,
                s.replication_factor,
                topic_configs={
                    "min.insync.replicas": str(s.min_insync_replicas),
                    "cleanup.policy": "compact,delete",
                    "retention.ms": window_ms,
                    "segment.ms": window_ms,
                },
            )
            await create_topics(admin, s, [topic])
        finally:
            await admin.close()

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            try:
                await self._in.stop()
            finally:
                await self._out.stop()

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        await self._in.sync()  # StoreUnavailableError past request_timeout
        return self.book.get(scope(project_id, key_digest), self._clock())

    async def remember(self, answer: IdempotentAnswer) -> None:
        await self._out.append(answer.scope.encode(), encode_answer(answer))
        self.book.put(answer, self._clock())
