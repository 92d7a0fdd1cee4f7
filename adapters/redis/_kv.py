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

Every call is bounded by ``call_timeout``; every failure to reach Redis (timeout,
connection refused or reset, LOADING after a restart, READONLY after a failover) surfaces
as ``StoreUnavailableError``. redis-py's own retries are off (``Retry(NoBackoff(), 0)``):
a broken connection must surface, so that the watch knows to check its history (a silent
retry on a new connection would hide a Redis restart); only reads are sent once more.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import anyio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.credentials import CredentialProvider
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.redis import _kv_scripts
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
T = TypeVar("T")

# Error replies that mean "not now" rather than "wrong call".
_UNAVAILABLE_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "NOREPLICAS")


def _ms(seconds: float) -> int:
    """Whole milliseconds, at least 1 (Redis PX takes integers)."""
    return max(1, math.ceil(seconds * 1000))


class _Credentials(CredentialProvider):
    """The ACL user (None: ``default``) and the password, read again at every login."""

    def __init__(self, username: str | None, password: Callable[[], str]) -> None:
        self._username = username
        self._password = password

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = self._password()
        return (self._username, password) if self._username else (password,)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        return self.get_credentials()


class RedisCoordinationStore(Lifecycle):
    """``async with`` connects (and checks Redis's version); leaving closes the client."""

    def __init__(self, settings: RedisSettings | None = None) -> None:
        self.settings = settings if settings is not None else RedisSettings()
        self._root = f"{self.settings.prefix}kv:"
        self._redis: aioredis.Redis | None = None

    async def _connect(self) -> None:
        s = self.settings
        security: dict[str, object] = {}
        if s.has_secret("password"):
            security["credential_provider"] = _Credentials(s.username, s.secret_reader("password"))
        url = s.url
        if s.use_tls:
            url = "rediss" + url[url.index(":") :]  # redis-py picks TLS by the scheme
            security["ssl_ca_certs"] = None if s.tls_ca_file is None else str(s.tls_ca_file)
            if s.tls_cert_file is not None and s.tls_key_file is not None:
                security["ssl_certfile"] = str(s.tls_cert_file)
                security["ssl_keyfile"] = str(s.tls_key_file)
        self._redis = aioredis.Redis.from_url(  # connects lazily, on the first call
            url,
            **security,  # type: ignore[arg-type]
            socket_connect_timeout=s.call_timeout,
            socket_timeout=None,  # every call is bounded by anyio instead (XREAD BLOCK waits)
            retry=Retry(NoBackoff(), 0),
            decode_responses=False,
        )
        info = await self._call("info", lambda redis: redis.info("server"))
        version = str(info.get("redis_version", ""))
        problem = refusal(f"Redis at {self._where}", version, (REDIS,))
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _disconnect(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            with anyio.move_on_after(self.settings.close_timeout, shield=True):
                await client.aclose()

    @property
    def _where(self) -> str:
        kwargs = {} if self._redis is None else self._redis.connection_pool.connection_kwargs
        if "path" in kwargs:
            return str(kwargs["path"])
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

    async def _call(
        self,
        what: str,
        call: Callable[[aioredis.Redis], Awaitable[T]],
        bound: float | None = None,
        *,
        idempotent: bool = True,
    ) -> T:
        """Run ``call(redis)`` within ``bound`` (default ``call_timeout``), mapping errors.

        An ``idempotent`` call is sent once more when its connection broke (a pooled
        connection to a Redis that restarted fails on first use), within the same bound.
        """
        timeout = self.settings.call_timeout if bound is None else max(bound, 0.001)
        client = self._redis
        if client is None:
            raise StoreUnavailableError("redis client is closed (use the adapter in `async with`)")
        try:
            with anyio.fail_after(timeout):
                if idempotent:
                    try:
                        return await call(client)
                    except RedisConnectionError as exc:
                        if self._redis is None:
                            raise
                        _log.debug("redis %s: %s; sending it once more", what, exc)
                return await call(client)
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"redis {what}: no answer within {timeout:g} s from {self._where}"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if self._redis is None:
                raise StoreUnavailableError(f"redis {what}: client closed") from exc
            raise StoreUnavailableError(f"redis {what} at {self._where}: {exc}") from exc
        except ResponseError as exc:
            if str(exc).startswith(_UNAVAILABLE_REPLIES):
                raise StoreUnavailableError(f"redis {what} at {self._where}: {exc}") from exc
            raise

    async def _drop_idle_connections(self) -> None:
        """Close the pooled idle connections (after a restart they would fail on first use)."""
        if self._redis is None:
            return
        with anyio.move_on_after(self.settings.call_timeout), contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect(inuse_connections=False)

    async def _run(self, name: str, *args: str | bytes | int, bound: float | None = None) -> Any:
        """Run ``_kv_scripts.<name>``. Only reads are sent again on a broken connection:
        a write sent twice could refuse itself (its first run moved the revision)."""
        source: str = getattr(_kv_scripts, name)
        argv = [self._root, self.settings.events_maxlen, secrets.token_hex(8), *args]

        async def run(redis: aioredis.Redis) -> Any:
            return await redis.register_script(source)(keys=[], args=argv, client=redis)

        return await self._call(f"kv {name.lower()}", run, bound, idempotent=name == "READ")

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
        return int(await self._run("LEASE", "grant", _ms(ttl)))

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
        settings = self.settings
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
                if self._redis is None:
                    raise
                _log.warning("redis watch %s: %s; resuming after %s", prefix, exc, revision)
                checked = False
                await self._drop_idle_connections()
                await backoff.sleep()

    async def _events(self, after: int, block: float) -> Sequence[tuple[bytes, dict[bytes, bytes]]]:
        stream = self._root + "events"

        async def read(redis: aioredis.Redis) -> Any:
            return await redis.xread({stream: f"{after}-0"}, count=512, block=max(1, _ms(block)))

        bound = block + self.settings.call_timeout
        reply = await self._call("kv xread", read, bound, idempotent=False)
        return [entry for _, entries in reply or [] for entry in entries]
