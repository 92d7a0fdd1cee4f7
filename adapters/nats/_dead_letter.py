"""Dead letters: messages that were terminated or ran out of deliveries.

A message that reached ``max_deliver`` is never redelivered but stays stored (and the
server only says so in an advisory,
``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>``). So:

- ``Delivery.dead_letter()`` copies the message to the dead-letter stream, then terminates it
  (on a WorkQueue stream a terminated message is removed; on a limits stream, the
  default, it stays until ``max_age`` like every consumed message);
- the max-deliveries advisory (one queue group over all transports of one stream, so
  one process handles each advisory) makes ``DeadLetters`` read the message by stream
  sequence, copy it to the dead-letter stream and delete it from the work stream, so it
  no longer takes space or shows in the per-subject counts.

The dead-letter stream (default ``SHOAL_DLQ``, subjects ``shoal.dlq.>``, limits
retention, ``dead_letter_max_age``) keeps each copy under
``{dead_letter_prefix}.p{partition}.{project}`` with the envelope headers, plus
``Shoal-Dead-Reason`` and ``Shoal-Dead-Attempts``; its ``Nats-Msg-Id`` is the message id,
so a copy made twice (a term whose confirmation was lost) is stored once.

Then the hook runs (``log_dead_letter`` by default), and the transport counts it.
Known gap: advisories are core NATS; one published while no transport of this stream
is connected is lost, and its message stays in the work stream (not in the backlog).
"""

from __future__ import annotations

import json
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import NotFoundError

from adapters._dead_letter import DeadLetterHook, DeadLetterReason
from adapters.nats._codec import H_DEAD_ATTEMPTS, H_DEAD_REASON, decode, envelope_headers
from adapters.nats._settings import NatsSettings
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
        self._sub: Subscription | None = None
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

    async def start(self) -> None:
        """Listen to max-deliveries advisories (queue group: one transport handles each)."""
        stream = self._settings.stream
        self._sub = await self._nc.subscribe(
            self._subjects.max_deliveries_advisory(stream),
            queue=f"shoal-dead-letters-{stream}",
            cb=self._on_advisory,
        )

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()

    async def store(self, envelope: Envelope, reason: DeadLetterReason, attempts: int) -> None:
        """Copy ``envelope`` to the dead-letter stream; raises if JetStream did not confirm."""
        headers = envelope_headers(envelope)
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

    async def _on_advisory(self, msg: Msg) -> None:
        try:
            advisory = json.loads(msg.data)
            seq = int(advisory["stream_seq"])
            attempts = int(advisory.get("deliveries", self._settings.max_deliver))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable max-deliveries advisory on %s: %r", msg.subject, msg.data)
            return
        try:
            await self._move(seq, attempts)
        except Exception:
            log.exception("could not dead-letter stream sequence %d", seq)

    async def _move(self, seq: int, attempts: int) -> None:
        stream = self._settings.stream
        try:
            raw = await self._js.get_msg(stream, seq)
        except NotFoundError:
            return  # another transport (or an earlier advisory) already moved it
        envelope = decode(
            raw.subject or "",
            raw.headers,
            raw.data or b"",
            self._subjects.parse(raw.subject or ""),
            fallback_id=f"{stream}:{seq}",
            fallback_time=raw.time.timestamp() if raw.time else 0.0,
        )
        await self.store(envelope, "max_deliver", attempts)
        try:
            await self._js.delete_msg(stream, seq)
        except NotFoundError:
            return
        await self.notify(envelope, "max_deliver", attempts)
