"""The coordination ports written once, over the ``CoordinationStore`` port.

Every store (etcd, Redis, NATS KV, memory) is a dialect of ``CoordinationStore``
(versioned keys, leases, prefix watches); these classes hold the rules, each write decided
by ``core.coordination.CoordinationState`` on what was read and written only if the
revisions read did not move. Each class implements one port and owns its dialect instance
(``async with``). Key layout: ``adapters.coordination._base``.
"""

from adapters.coordination._base import Dialect, StoreAdapter
from adapters.coordination._election import StoreElection, StoreLeadership
from adapters.coordination._membership import (
    StoreLoadReports,
    StoreMembership,
    StoreMembershipLease,
)
from adapters.coordination._records import (
    StoreAssignmentStore,
    StoreHoldStore,
    StoreProjectRegistry,
)

__all__ = [
    "Dialect",
    "StoreAdapter",
    "StoreAssignmentStore",
    "StoreElection",
    "StoreHoldStore",
    "StoreLeadership",
    "StoreLoadReports",
    "StoreMembership",
    "StoreMembershipLease",
    "StoreProjectRegistry",
]
