"""Redis (>= 7.0) through redis-py's asyncio client: ``RedisCoordinationStore``, the
``CoordinationStore`` port under ``shoal:{group}:kv:`` (one compare-and-set script, leases
as deadlines by Redis's clock, a revision-numbered change stream; see its module). The
coordination ports over it are ``adapters.coordination``'s."""

from adapters.redis._kv import RedisCoordinationStore
from adapters.redis._settings import RedisSettings

__all__ = ["RedisCoordinationStore", "RedisSettings"]
