"""Dead letters: messages a consumer gave up on (``Delivery.dead_letter(reason)``).

``dead_letter`` copies the message to the dead-letter stream, then terminates it (on a
WorkQueue stream a terminated message is removed; on a limits stream, the default, it
stays until ``max_age`` like every consumed message). The consumers have no
``max_deliver``: the server redelivers without bound and the consumer applies the retry
budget (``core.retry.deliveries_exhausted``), so a message past it is dead-lettered like
any other, by the handler that fetched it.

The dead-letter stream (default ``SHOAL_DLQ``, subjects ``shoal.dlq.>``, limits
retention, ``dead_letter_max_age``) keeps each copy under
``{dead_letter_prefix}.p{partition}.{project}`` with the envelope headers, plus
``Shoal-Dead-Reason`` and ``Shoal-Dead-Attempts``; its ``Nats-Msg-Id`` is the message id
and the work-stream sequence, so a copy made twice (a termination whose confirmation was
lost) is stored once, while a replayed message that dies again is stored again.

Then the hook runs (``log_dead_letter`` by default), and the transport counts it.
"""

from __future__ import annotations

import logging

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api

from adapters._dead_letter import DeadLetterHook, DeadLetterReason
from adapters._headers import H_DEAD_ATTEMPTS, H_DEAD_REASON
from adapters._nats_settings import NatsSettings
from adapters.nats._codec import headers_deduplicated_as
from adapters.nats._subjects import Subjects
from core.messages import Envelope

__all__ = ["DeadLetters"]

log = logging.getLogger("shoal.adapters.nats")


class DeadLetters:
    """Copies dead messages to the dead-letter stream, then tells the hook."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        settings: NatsSettings,
        subjects: Subjects,
        hook: DeadLetterHook,
    ) -> None:
        self._nc = nc
        self._js = js
        self._settings = settings
        self._subjects = subjects
        self._hook = hook
        self.count = 0

    def stream_config(self) -> js_api.StreamConfig:
        s = self._settings
        return js_api.StreamConfig(
            name=s.dead_letter_stream,
            subjects=self._subjects.dead_letter_subjects(),
            retention=js_api.RetentionPolicy.LIMITS,
            storage=js_api.StorageType(s.storage),
            num_replicas=s.replicas,
            max_age=s.dead_letter_max_age,
            duplicate_window=s.duplicate_window,
        )

    async def store(
        self, envelope: Envelope, reason: DeadLetterReason, attempts: int, position: int
    ) -> None:
        """Copy ``envelope`` (at work-stream sequence ``position``) to the dead-letter
        stream; raises if JetStream did not confirm."""
        headers = headers_deduplicated_as(envelope, f"{envelope.message_id}@{position}")
        headers[H_DEAD_REASON] = reason
        headers[H_DEAD_ATTEMPTS] = str(attempts)
        await self._js.publish(
            self._subjects.dead_letter(envelope.partition, envelope.project_id or None),
            envelope.payload,
            timeout=self._settings.request_timeout,
            headers=headers,
        )

    async def notify(self, envelope: Envelope, reason: DeadLetterReason, attempts: int) -> None:
        """Count and run the hook; a failing hook is logged, never raised."""
        self.count += 1
        try:
            await self._hook(envelope, reason, attempts)
        except Exception:
            log.exception("dead-letter hook failed for message %s", envelope.message_id)
