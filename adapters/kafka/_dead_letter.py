"""Dead letters: records that were terminated or ran out of deliveries.

The subscription copies such a record to the dead-letter topic (``shoal.dlq`` by default;
key the project id, value the payload, the envelope headers plus ``Shoal-Dead-Reason``,
``Shoal-Dead-Attempts`` and ``Shoal-Source``), waits until Kafka confirmed the copy, then
settles the original (the commit moves past it once every part of its record is settled),
then runs the hook
(``log_dead_letter`` by default) and counts it. A copy made twice (a crash between the
copy and the commit) is two records in the dead-letter topic with the same
``Shoal-Msg-Id``. A part of a pack is copied alone, as a plain record with its own
``Shoal-Msg-Id``; the parts of one pack share ``Shoal-Source``, so a letter is known by its
message id and its own offset in the dead-letter topic, never by its source.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from adapters._dead_letter import DeadLetterHook, DeadLetterReason
from adapters.kafka._codec import H_DEAD_ATTEMPTS, H_DEAD_REASON, H_SOURCE, envelope_headers
from adapters.kafka._settings import KafkaSettings
from core.errors import PublishError
from core.messages import Envelope

__all__ = ["DeadLetters"]

log = logging.getLogger("shoal.adapters.kafka")


class DeadLetters:
    """Copies dead records to the dead-letter topic with the transport's producer."""

    def __init__(self, producer: Any, settings: KafkaSettings, hook: DeadLetterHook) -> None:
        self._producer = producer
        self._settings = settings
        self._hook = hook
        self.count = 0

    async def store(
        self, envelope: Envelope, reason: DeadLetterReason, attempts: int, source: str
    ) -> None:
        """Copy ``envelope`` to the dead-letter topic; ``PublishError`` unless confirmed
        within ``publish_timeout``."""
        s = self._settings
        headers = envelope_headers(envelope)
        headers += [
            (H_DEAD_REASON, reason.encode()),
            (H_DEAD_ATTEMPTS, str(attempts).encode()),
            (H_SOURCE, source.encode()),
        ]
        try:
            with anyio.fail_after(s.publish_timeout):
                fut = await self._producer.send(
                    s.dead_letter_topic,
                    envelope.payload,
                    key=envelope.project_id.encode() or None,
                    headers=headers,
                )
                await fut
        except Exception as exc:
            raise PublishError(
                f"dead letter {envelope.message_id} not confirmed by topic "
                f"{s.dead_letter_topic}: {exc!r}"
            ) from exc

    async def notify(self, envelope: Envelope, reason: DeadLetterReason, attempts: int) -> None:
        """Count and run the hook; a failing hook is logged, never raised."""
        self.count += 1
        try:
            await self._hook(envelope, reason, attempts)
        except Exception:
            log.exception("dead-letter hook failed for message %s", envelope.message_id)
