"""The Transport port on NATS JetStream.

Subjects (prefix ``handler.data.partitions`` by default; see ``_subjects``): announcements
on ``{prefix}.p{p}``, data on ``{prefix}.p{p}.{project}.data`` (both stored in one
stream: limits retention by default, see ``NatsSettings.retention``), registration replies
on ``{prefix}.p{p}.{project}.reg.response`` (core NATS, not stored). One durable pull
consumer per partition (``p{p}``, filters ``{prefix}.p{p}`` and ``{prefix}.p{p}.*.data``),
so consumers stay O(partitions).
Envelope fields travel in headers, the message id as ``Nats-Msg-Id`` (see ``_codec``).
What a subscription closed on purpose gave back is kept in a key-value bucket, so that the
retry budget does not count it (see ``_excusals``).
Dead letters go to a second stream (see ``_dead_letter``); ``NatsDeadLetterQueue`` lists,
replays and purges them. ``NatsHistory`` reads stored messages again (``shoal replay``;
limits retention only).
"""

from adapters._dead_letter import DeadLetterHook, DeadLetterReason, log_dead_letter
from adapters._nats_settings import NatsSettings
from adapters.nats._dead_letter_queue import NatsDeadLetterQueue
from adapters.nats._history import NatsHistory
from adapters.nats._idempotency import NatsIdempotencyStore
from adapters.nats._subscription import NatsDelivery, NatsSubscription
from adapters.nats._transport import NatsTransport

__all__ = [
    "DeadLetterHook",
    "DeadLetterReason",
    "NatsDeadLetterQueue",
    "NatsDelivery",
    "NatsHistory",
    "NatsIdempotencyStore",
    "NatsSettings",
    "NatsSubscription",
    "NatsTransport",
    "log_dead_letter",
]
