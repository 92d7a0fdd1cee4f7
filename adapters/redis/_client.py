"""One redis-py asyncio client shared by an adapter's calls, with a timeout on every call.

redis-py's own retries are switched off (``Retry(NoBackoff(), 0)``): a broken connection
must surface, so that the change feed knows to re-read (a silent retry on a new
connection would hide a Redis restart). ``call`` sends an idempotent command once more
when its connection broke; the rest is up to the adapters.
Every failure to reach Redis (timeout, connection refused or reset, LOADING after a
restart, READONLY after a failover) surfaces as ``StoreUnavailableError``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.credentials import CredentialProvider
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapters.redis._settings import RedisSettings
from core.errors import StoreUnavailableError

__all__ = ["RedisClient", "ms"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

# Error replies that mean "not now" rather than "wrong call".
_UNAVAILABLE_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "NOREPLICAS")


def ms(seconds: float) -> int:
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


class RedisClient:
    """A redis-py client whose every call is bounded by ``settings.call_timeout``."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self._redis: aioredis.Redis | None = None

    async def connect(self) -> None:
        """Create the client (connections are made lazily, on the first call)."""
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
        client = aioredis.Redis.from_url(
            url,
            **security,  # type: ignore[arg-type]
            socket_connect_timeout=self.settings.call_timeout,
            socket_timeout=None,  # every call is bounded by anyio instead (XREAD BLOCK waits)
            retry=Retry(NoBackoff(), 0),
            decode_responses=False,
        )
        self._redis = client

    async def aclose(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            with anyio.move_on_after(self.settings.close_timeout, shield=True):
                await client.aclose()

    @property
    def closed(self) -> bool:
        return self._redis is None

    @property
    def _connected(self) -> aioredis.Redis:
        if self._redis is None:
            raise StoreUnavailableError("redis client is closed (use the adapter in `async with`)")
        return self._redis

    @property
    def where(self) -> str:
        kwargs = {} if self._redis is None else self._redis.connection_pool.connection_kwargs
        if "path" in kwargs:
            return str(kwargs["path"])
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

    async def call(
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
        client = self._connected
        try:
            with anyio.fail_after(timeout):
                if idempotent:
                    try:
                        return await call(client)
                    except RedisConnectionError as exc:
                        if self.closed:
                            raise
                        _log.debug("redis %s: %s; sending it once more", what, exc)
                return await call(client)
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"redis {what}: no answer within {timeout:g} s from {self.where}"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if self.closed:
                raise StoreUnavailableError(f"redis {what}: client closed") from exc
            raise StoreUnavailableError(f"redis {what} at {self.where}: {exc}") from exc
        except ResponseError as exc:
            if str(exc).startswith(_UNAVAILABLE_REPLIES):
                raise StoreUnavailableError(f"redis {what} at {self.where}: {exc}") from exc
            raise

    async def drop_idle_connections(self) -> None:
        """Close the pooled idle connections (after a restart they would fail on first use)."""
        if self._redis is None:
            return
        with anyio.move_on_after(self.settings.call_timeout), contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect(inuse_connections=False)

    # --- plain commands ------------------------------------------------------------------

    async def server_version(self) -> str:
        """What ``INFO server`` says in ``redis_version``."""
        info = await self.call("info", lambda r: r.info("server"))
        return str(info.get("redis_version", ""))
