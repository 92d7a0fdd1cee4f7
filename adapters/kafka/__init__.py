"""Kafka adapters: the Transport port (this file's names) and, alongside, coordination.

Transport (``KafkaTransport``): one topic (``shoal.data``) with one partition per shoal
partition, each envelope sent to ``envelope.partition`` (so a project lands in the same
partition number as on NATS; the producer's partitioner is ``partition_for`` for records
sent without one). Envelope fields in headers, key the project id, value the payload
(``_codec``). A subscription ``assign()``s its partition and commits offsets under the
group ``shoal.{group}`` without joining it; per-record settlement (bulk ack, dead_letter),
ack deadlines and delivery counts are emulated on top (``_subscription``,
``_settlements``).
Dead letters go to ``shoal.dlq`` (``_dead_letter``; ``KafkaDeadLetterQueue`` lists, replays
and purges them), registration replies to ``shoal.reg``. ``KafkaHistory`` reads the data
topic again (``shoal replay``), by offset or by time.
``KafkaSettings`` (env ``SHOAL_KAFKA_*``) is shared with the coordination adapters.

Coordination (``KafkaCoordinationStore``, settings ``KafkaKvSettings``): the
``CoordinationStore`` port as a log, ``shoal.{group}.kv``: every write a request decided
by its position when replayed, leases kept in the log's time (``_kv``); the coordination
ports are ``adapters.coordination``'s, as on every store.
"""

from adapters._dead_letter import DeadLetterHook, DeadLetterReason, log_dead_letter
from adapters.kafka._dead_letter_queue import KafkaDeadLetterQueue
from adapters.kafka._history import KafkaHistory
from adapters.kafka._idempotency import KafkaIdempotencyStore
from adapters.kafka._kv import KafkaCoordinationStore
from adapters.kafka._kv_settings import KafkaKvSettings
from adapters.kafka._settings import KafkaSettings
from adapters.kafka._subscription import KafkaDelivery, KafkaSubscription
from adapters.kafka._transport import KafkaTransport, kafka_partitioner

__all__ = [
    "DeadLetterHook",
    "DeadLetterReason",
    "KafkaCoordinationStore",
    "KafkaDeadLetterQueue",
    "KafkaDelivery",
    "KafkaHistory",
    "KafkaIdempotencyStore",
    "KafkaKvSettings",
    "KafkaSettings",
    "KafkaSubscription",
    "KafkaTransport",
    "kafka_partitioner",
    "log_dead_letter",
]
