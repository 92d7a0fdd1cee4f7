"""``RedisCoordinationStore``: the ``CoordinationStore`` port on Redis (layout and scripts:
``_kv_scripts``).

Revisions are a counter the scripts keep; every write and every deletion is one revision
and one entry of the ``events`` stream, whose id is that revision. An empty store's first
write starts the counter at ten per millisecond of Redis's clock, so a Redis that lost
its data still hands out revisions above the ones it lost. Leases are deadlines
by Redis's clock, not TTL keys: a key that expires says nothing (no revision, no event,
and a keyspace notification is lost when nobody listens), while a deadline is ended by
the next script that runs, deleting the lease's keys as ordinary, recorded deletions.

The watch reads the stream after the last revision it yielded. Revisions have no gaps, so
an entry past the next one means the stream was trimmed under a slow watcher: a
``Resync``. After a broken connection it first asks the store whether its history still
holds the last event it saw (revision and the writer's token): a Redis that restarted
with all its data resumes, one that lost writes (no persistence, or ``appendfsync
everysec``'s last second) gets a ``Resync``. While the stream is idle the watch runs the
lease sweep, so expiries show without any other call.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncGenerator, Sequence
from typing import Any, cast

import redis.asyncio as aioredis

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.redis import _kv_scripts
from adapters.redis._client import RedisClient, ms
from adapters.redis._settings import RedisSettings
from core.errors import (
    IncompatibleServerError,
    LeaseLostError,
    RevisionConflictError,
    StoreUnavailableError,
)
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix
from core.server_floors import REDIS, refusal

__all__ = ["RedisCoordinationStore"]

_log = logging.getLogger(__name__)
_SWEEP_EVERY = 0.25  # an idle watch ends due leases at least this often (seconds)


class RedisCoordinationStore(Lifecycle):
    """``async with`` connects (and checks Redis's version); leaving closes the client."""

    def __init__(self, settings: RedisSettings | None = None) -> None:
        self.settings = settings if settings is not None else RedisSettings()
        self._root = f"{self.settings.prefix}kv:"
        self._client = RedisClient(self.settings)

    async def _connect(self) -> None:
        await self._client.connect()
        version = await self._client.server_version()
        problem = refusal(f"Redis at {self._client.where}", version, (REDIS,))
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _disconnect(self) -> None:
        await self._client.aclose()

    async def _run(self, name: str, *args: str | bytes | int, bound: float | None = None) -> Any:
        """Run ``_kv_scripts.<name>``. Only reads are sent again on a broken connection:
        a write sent twice could refuse itself (its first run moved the revision)."""
        source: str = getattr(_kv_scripts, name)
        argv = [self._root, self.settings.events_maxlen, secrets.token_hex(8), *args]

        async def run(redis: aioredis.Redis) -> Any:
            return await redis.register_script(source)(keys=[], args=argv, client=redis)

        return await self._client.call(f"kv {name.lower()}", run, bound, idempotent=name == "READ")

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        listing, _ = await self._read("get", check_key(key))
        return listing.get(key)

    async def list_prefix(self, prefix: str) -> Listing:
        listing, _ = await self._read("list", check_prefix(prefix))
        return listing

    async def _read(self, mode: str, key_or_prefix: str) -> tuple[Listing, bytes]:
        """The keys read, the revision of the read and its event's token (b"" if gone)."""
        reply = cast("list[Any]", await self._run("READ", mode, key_or_prefix))
        revision, token, flat = int(reply[0]), bytes(reply[1]), reply[2:]
        entries = (
            KeyValue(bytes(flat[at]).decode(), bytes(flat[at + 1]), int(flat[at + 2]))
            for at in range(0, len(flat), 3)
        )
        return Listing(tuple(entries), revision), token

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        return await self._write(key, 0, value, lease)

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        return await self._write(key, revision, value, lease)

    async def delete(self, key: str, *, revision: int) -> int:
        return await self._write(key, revision, None, None)

    async def _write(self, key: str, expected: int, value: bytes | None, lease: int | None) -> int:
        operation = "put" if value is not None else "del"
        outcome, revision = await self._run(
            "WRITE", check_key(key), expected, operation, value or b"", lease or 0
        )
        if outcome == -1:
            raise LeaseLostError(f"redis {key}: lease {lease} expired or was revoked")
        if outcome == 0:
            wanted = "absent" if expected == 0 else f"at revision {expected}"
            raise RevisionConflictError(f"redis {key}: not {wanted}")
        return int(revision)

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        return int(await self._run("LEASE", "grant", ms(ttl)))

    async def keep_alive(self, lease: int) -> None:
        if not await self._run("LEASE", "keep", lease):
            raise LeaseLostError(f"redis lease {lease} expired or was revoked")

    async def revoke(self, lease: int) -> None:
        await self._run("LEASE", "revoke", lease)

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        check_prefix(prefix)
        client, settings = self._client, self.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        revision, token = after, b""  # the last event seen and its writer's token
        checked = False  # whether the store's history is known to hold that event
        block = 0.0
        while True:
            try:
                if revision is None:
                    listing, token = await self._read("list", prefix)
                    revision, checked = listing.revision, True
                    yield Resync(listing)
                if not checked:
                    checked = bool(await self._run("READ", "since", revision, token))
                    if not checked:
                        _log.info(
                            "redis watch %s: history since %d lost, listing", prefix, revision
                        )
                        revision = None
                        continue
                entries = await self._events(revision, block)
                if not entries:
                    # an idle stream: end the leases past due (their deletions are events)
                    wait = await self._run("LEASE", "sweep")
                    block = _SWEEP_EVERY if wait < 0 else min(_SWEEP_EVERY, wait / 1000)
                    continue
                for entry_id, fields in entries:
                    number = int(entry_id.split(b"-")[0])
                    # an empty store's first write starts from its clock (_kv_scripts)
                    if number != revision + 1 and not (revision == 0 and number > 0):
                        _log.info("redis watch %s: events after %d trimmed", prefix, revision)
                        revision = None
                        break
                    revision, token = number, fields[b"w"]
                    key = fields[b"k"].decode()
                    if key.startswith(prefix):
                        yield KeyChange(key, fields.get(b"v"), revision)
                backoff.reset()
            except StoreUnavailableError as exc:
                if client.closed:
                    raise
                _log.warning("redis watch %s: %s; resuming after %s", prefix, exc, revision)
                checked = False
                await client.drop_idle_connections()
                await backoff.sleep()

    async def _events(self, after: int, block: float) -> Sequence[tuple[bytes, dict[bytes, bytes]]]:
        stream = self._root + "events"

        async def read(redis: aioredis.Redis) -> Any:
            return await redis.xread({stream: f"{after}-0"}, count=512, block=max(1, ms(block)))

        bound = block + self.settings.call_timeout
        reply = await self._client.call("kv xread", read, bound, idempotent=False)
        return [entry for _, entries in reply or [] for entry in entries]
