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

Coordination (``KafkaMembership``, ``KafkaLoadReports``, ``KafkaElection``,
``KafkaAssignmentStore``, ``KafkaHoldStore``, ``KafkaProjectRegistry``): the two-level
design. Members and leader candidates are sessions of the consumer group
``shoal.{group}.coord`` (the broker's group coordinator tracks them and picks a group
leader); the group leader's ``ShoalAssignor`` admits members and elects the shoal leader
among candidates, and every session receives the whole result. Assignments, holds and
projects are requests in the coordination log ``shoal.{group}.coord-log``, decided by
replay (compare-and-set by total order). Membership is presence only: load reports go,
via ``KafkaLoadReports``, to the compacted ``shoal.{group}.stats`` (by member id and
session incarnation), and show only while their member's session is in the group.
"""

from adapters._dead_letter import DeadLetterHook, DeadLetterReason, log_dead_letter
from adapters.kafka._dead_letter_queue import KafkaDeadLetterQueue
from adapters.kafka._election import KafkaElection, KafkaLeadership
from adapters.kafka._history import KafkaHistory
from adapters.kafka._idempotency import KafkaIdempotencyStore
from adapters.kafka._membership import KafkaMembership, KafkaMembershipLease
from adapters.kafka._reports import KafkaLoadReports
from adapters.kafka._settings import KafkaSettings
from adapters.kafka._store import KafkaAssignmentStore, KafkaHoldStore, KafkaProjectRegistry
from adapters.kafka._subscription import KafkaDelivery, KafkaSubscription
from adapters.kafka._transport import KafkaTransport, kafka_partitioner

__all__ = [
    "DeadLetterHook",
    "DeadLetterReason",
    "KafkaAssignmentStore",
    "KafkaDeadLetterQueue",
    "KafkaDelivery",
    "KafkaElection",
    "KafkaHistory",
    "KafkaHoldStore",
    "KafkaIdempotencyStore",
    "KafkaLeadership",
    "KafkaLoadReports",
    "KafkaMembership",
    "KafkaMembershipLease",
    "KafkaProjectRegistry",
    "KafkaSettings",
    "KafkaSubscription",
    "KafkaTransport",
    "kafka_partitioner",
    "log_dead_letter",
]
