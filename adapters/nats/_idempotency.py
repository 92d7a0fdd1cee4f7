"""``NatsIdempotencyStore``: the IdempotencyStore port on a JetStream key-value bucket.

Bucket ``{stream}_IDEMPOTENCY`` (``SHOAL_IDEMPOTENCY`` by default), one value per scope
(``{project}.{key digest}``), history 1, ``max_age`` = the window: the server removes a
record once the window has passed, and every gateway reads the same bucket, so a record
one gateway wrote is seen by every other from the moment its put was confirmed. Storage
and replicas are the work stream's (``SHOAL_NATS_STORAGE``, ``SHOAL_NATS_REPLICAS``).
Created on enter when missing; an existing bucket with another window is updated to
this one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import nats
import nats.errors
from nats.aio.client import Client
from nats.js import api as js_api
from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from adapters._lifecycle import Lifecycle
from adapters._nats_connect import close_client, connect, describe
from adapters._nats_settings import NatsSettings
from core.errors import StoreUnavailableError
from core.idempotency import (
    IdempotentAnswer,
    decode_answer,
    encode_answer,
    is_expired,
    scope,
)
from core.server_floors import NATS_KILL_SAFE

__all__ = ["NatsIdempotencyStore"]

log = logging.getLogger("shoal.adapters.nats")

_STREAM_NAME_IN_USE = 10058


class NatsIdempotencyStore(Lifecycle):
    """``async with NatsIdempotencyStore(settings, window=600) as store``. Every call is
    bounded by ``request_timeout`` and raises ``StoreUnavailableError`` past it, or at once
    while disconnected with ``refuse_while_disconnected`` (one datacenter's store of
    several: the others answer meanwhile)."""

    def __init__(
        self,
        settings: NatsSettings | None = None,
        *,
        window: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window <= 0:
            raise ValueError(f"window must be above 0 s, not {window}")
        self.settings = settings or NatsSettings()
        self.window = window
        self.bucket = f"{self.settings.stream}_IDEMPOTENCY"
        self._clock = clock
        self._nc: Client | None = None
        self._kv: KeyValue | None = None

    async def _connect(self) -> None:
        s = self.settings
        try:
            with anyio.fail_after(s.connect_timeout):
                self._nc = await connect(
                    s,
                    name=f"{s.name}-idempotency",
                    needs=(NATS_KILL_SAFE,),
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=s.reconnect_wait,
                    error_cb=self._on_error,
                )
                self._kv = await self._ensure_bucket()
        except TimeoutError:
            raise TimeoutError(
                f"NATS at {s.url}: idempotency bucket not ready within {s.connect_timeout} s"
            ) from None

    async def _ensure_bucket(self) -> KeyValue:
        assert self._nc is not None
        s = self.settings
        js = self._nc.jetstream(timeout=s.request_timeout)
        config = js_api.KeyValueConfig(
            bucket=self.bucket,
            description="shoal gateway: answers to requests with an Idempotency-Key",
            history=1,
            ttl=self.window,
            storage=js_api.StorageType(s.storage),
            replicas=s.replicas,
        )
        try:
            return await js.create_key_value(config)
        except APIError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
        # It exists with another configuration (another window): take this one.
        info = await js.stream_info(f"KV_{self.bucket}")
        stream = info.config
        stream.max_age = self.window
        stream.duplicate_window = min(120.0, self.window)
        await js.update_stream(stream)
        log.info("idempotency bucket %s: window set to %g s", self.bucket, self.window)
        return await js.key_value(self.bucket)

    async def _disconnect(self) -> None:
        nc, self._nc, self._kv = self._nc, None, None
        if nc is None or nc.is_closed:
            return
        await close_client(nc, self.settings.close_timeout)

    @staticmethod
    async def _on_error(exc: Exception) -> None:
        log.debug("NATS (idempotency store): %r", exc)

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise StoreUnavailableError("NatsIdempotencyStore is not open (use 'async with')")
        if self.settings.refuse_while_disconnected and not (self._nc and self._nc.is_connected):
            raise StoreUnavailableError(
                f"NATS: idempotency bucket {self.bucket}: not connected to "
                f"{describe(self.settings)}"
            )
        return self._kv

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        kv = self._bucket()
        timeout = self.settings.request_timeout
        key = scope(project_id, key_digest)
        try:
            with anyio.fail_after(timeout):
                entry = await kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"NATS: idempotency bucket {self.bucket} did not answer within {timeout:g} s"
            ) from exc
        except nats.errors.Error as exc:
            raise StoreUnavailableError(f"NATS: idempotency bucket {self.bucket}: {exc!r}") from exc
        if entry.value is None:
            return None
        try:
            answer = decode_answer(entry.value)
        except ValueError as exc:
            log.warning("idempotency record %s ignored: %s", key, exc)
            return None
        if answer.scope != key or is_expired(answer, self._clock(), self.window):
            return None
        return answer

    async def remember(self, answer: IdempotentAnswer) -> None:
        kv = self._bucket()
        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                await kv.put(answer.scope, encode_answer(answer))
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"NATS: idempotency bucket {self.bucket} did not confirm within {timeout:g} s"
            ) from exc
        except nats.errors.Error as exc:
            raise StoreUnavailableError(f"NATS: idempotency bucket {self.bucket}: {exc!r}") from exc
