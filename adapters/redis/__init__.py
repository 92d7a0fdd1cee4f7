"""The coordination ports on Redis (>= 7.0) through redis-py's asyncio client.

Keys, under ``shoal:{group}:``: ``consumers:{id}`` (a live member: its owner token, with a
TTL), ``members`` (the set of member ids), ``reports`` (one hash: the members' latest load
reports, each with its member's token), ``leader`` (``token:term:id`` with a TTL),
``term`` (the fencing counter), ``assignment`` (the whole assignment as one JSON value),
``holds`` (one hash, field per partition), ``projects:{p}`` (a set) and ``events`` (the
change-event stream every mutating script appends to). Each adapter is an async context
manager owning its connection pool, lease renewals and change feed. Needs
``notify-keyspace-events`` with ``Ex`` (or ``KEA``) to see expirations at once; without
it they are seen within ``resync_interval``. ``RedisCoordinationStore``: the
``CoordinationStore`` port, under ``shoal:{group}:kv:`` (see its module).
"""

from adapters.redis._election import RedisElection, RedisLeadership
from adapters.redis._kv import RedisCoordinationStore
from adapters.redis._membership import (
    RedisLoadReports,
    RedisMembership,
    RedisMembershipLease,
)
from adapters.redis._settings import RedisSettings
from adapters.redis._store import RedisAssignmentStore, RedisHoldStore, RedisProjectRegistry

__all__ = [
    "RedisAssignmentStore",
    "RedisCoordinationStore",
    "RedisElection",
    "RedisHoldStore",
    "RedisLeadership",
    "RedisLoadReports",
    "RedisMembership",
    "RedisMembershipLease",
    "RedisProjectRegistry",
    "RedisSettings",
]
