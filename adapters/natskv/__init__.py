"""The coordination ports on NATS JetStream key-value (``SHOAL_COORDINATION=nats``).

One bucket per group (``shoal_{group}``), created with per-key TTLs and expiry markers.
Keys: ``members.{id}`` (a live member: its owner token, with the lease's TTL),
``reports.{id}`` (its latest load report), ``leader`` (``token:term:id`` with a TTL; the
term is the revision of the create), ``assignment`` (the assignment JSON with its term),
``holds.{p}`` (a partition's hold; its revision is the hold's version) and
``projects.{p}.{id}`` (a registration's expiry, with a TTL). Ids are escaped to the key
charset (``_keys``). Each adapter is an async context manager owning its NATS connection,
lease renewals and change feed (a KV watcher). See docs/architecture.md.
``NatsKvCoordinationStore``: the ``CoordinationStore`` port, under ``k.``, ``lease.`` and
``bind.`` of the same bucket (see its module for the leases).
"""

from adapters.natskv._election import NatsKvElection, NatsKvLeadership
from adapters.natskv._kv import NatsKvCoordinationStore
from adapters.natskv._membership import (
    NatsKvLoadReports,
    NatsKvMembership,
    NatsKvMembershipLease,
)
from adapters.natskv._settings import NatsKvSettings
from adapters.natskv._store import NatsKvAssignmentStore, NatsKvHoldStore, NatsKvProjectRegistry

__all__ = [
    "NatsKvAssignmentStore",
    "NatsKvCoordinationStore",
    "NatsKvElection",
    "NatsKvHoldStore",
    "NatsKvLeadership",
    "NatsKvLoadReports",
    "NatsKvMembership",
    "NatsKvMembershipLease",
    "NatsKvProjectRegistry",
    "NatsKvSettings",
]
