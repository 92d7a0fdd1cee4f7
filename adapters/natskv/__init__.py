"""NATS JetStream key-value (``SHOAL_COORDINATION=nats``): ``NatsKvCoordinationStore``, the
``CoordinationStore`` port on one bucket per group (``shoal_{group}``, created with
per-key TTLs and expiry markers): data under ``k.``, leases as TTL records under
``lease.``, their bound keys under ``bind.`` (see its module). The coordination ports over
it are ``adapters.coordination``'s."""

from adapters.natskv._kv import NatsKvCoordinationStore
from adapters.natskv._settings import NatsKvSettings

__all__ = ["NatsKvCoordinationStore", "NatsKvSettings"]
