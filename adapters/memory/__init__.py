"""In-process adapters: the same semantics as the real ones, checked by the same contract
suites, for service-level tests.

Coordination: one ``InMemoryCoordination`` state shared by ``InMemoryMembership``,
``InMemoryElection``, ``InMemoryAssignmentStore``, ``InMemoryHoldStore`` and
``InMemoryProjectRegistry`` (one class per port). ``InMemoryCoordinationStore``: the
``CoordinationStore`` port (versioned keys, leases, watches) on its own.
"""

from adapters.memory._api_keys import InMemoryApiKeys
from adapters.memory._coordination import InMemoryCoordination
from adapters.memory._election import InMemoryElection, InMemoryLeadership
from adapters.memory._history import InMemoryHistory
from adapters.memory._idempotency import InMemoryIdempotencyStore
from adapters.memory._kv import InMemoryCoordinationStore
from adapters.memory._ledger import InMemoryLedger
from adapters.memory._membership import (
    InMemoryLoadReports,
    InMemoryMembership,
    InMemoryMembershipLease,
)
from adapters.memory._routes import InMemoryRouteStore
from adapters.memory._scaler import InMemoryScaler
from adapters.memory._store import (
    InMemoryAssignmentStore,
    InMemoryHoldStore,
    InMemoryProjectRegistry,
)
from adapters.memory._transport import InMemoryTransport

__all__ = [
    "InMemoryApiKeys",
    "InMemoryAssignmentStore",
    "InMemoryCoordination",
    "InMemoryCoordinationStore",
    "InMemoryElection",
    "InMemoryHistory",
    "InMemoryHoldStore",
    "InMemoryIdempotencyStore",
    "InMemoryLeadership",
    "InMemoryLedger",
    "InMemoryLoadReports",
    "InMemoryMembership",
    "InMemoryMembershipLease",
    "InMemoryProjectRegistry",
    "InMemoryRouteStore",
    "InMemoryScaler",
    "InMemoryTransport",
]
