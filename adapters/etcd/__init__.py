"""The coordination ports on etcd (>= 3.4.22, not 3.5.0-3.5.2) through ``etcd3aio``.

Keys, under ``/shoal/{group}``: ``consumers/{id}`` (a live member, on its lease),
``reports/{id}`` (its latest load report, on the same lease), ``leader`` (on the leader's
lease; its create revision is the term), ``assignment`` (the whole assignment as one JSON
value), ``holds/{p}`` and ``projects/{p}/{project}``.
Each adapter is an async context manager owning its connection and keepalive tasks.
``EtcdCoordinationStore``: the ``CoordinationStore`` port, under ``/shoal/{group}/kv/``.
"""

from adapters.etcd._election import EtcdElection, EtcdLeadership
from adapters.etcd._kv import EtcdCoordinationStore
from adapters.etcd._membership import EtcdLoadReports, EtcdMembership, EtcdMembershipLease
from adapters.etcd._settings import EtcdSettings
from adapters.etcd._store import EtcdAssignmentStore, EtcdHoldStore, EtcdProjectRegistry

__all__ = [
    "EtcdAssignmentStore",
    "EtcdCoordinationStore",
    "EtcdElection",
    "EtcdHoldStore",
    "EtcdLeadership",
    "EtcdLoadReports",
    "EtcdMembership",
    "EtcdMembershipLease",
    "EtcdProjectRegistry",
    "EtcdSettings",
]
