"""One etcd connection shared by an adapter's calls, with a timeout on every call.

Every failure to reach etcd (timeout, connection refused, a gRPC error) surfaces as
``StoreUnavailableError``; a call on a lease etcd no longer knows surfaces as
``LeaseLostError``. ``watch_stream`` is one raw stream; the store's ``watch`` (``_kv``) resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import grpc  # type: ignore[import-untyped]
from etcd3aio import Etcd3Client, EtcdError
from etcd3aio._protobuf import WatchCreateRequest, WatchRequest, WatchStub
from etcd3aio.errors import EtcdPermissionDeniedError, EtcdUnauthenticatedError

from adapters.etcd._settings import EtcdSettings
from core.errors import LeaseLostError, StoreUnavailableError

__all__ = ["EtcdClient"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

# grpc.aio answers a cancelled call with a *fresh* ``asyncio.CancelledError()`` (its inner
# response task swallows the cancellation it was sent), which anyio does not take for its
# own: ``fail_after``/``move_on_after`` and task group cancellation around a grpc call
# would not stop at their scope, the error would cancel the enclosing task. ``_detached``
# runs the call in a task of its own awaited through ``asyncio.shield``: the caller gets
# anyio's own cancellation, and the call is cancelled (and briefly waited for) on the way
# out. A call that grpc cancelled by itself (its channel closed under it) raises
# ``StoreUnavailableError``, not a cancellation.
_CANCEL_WAIT = 1.0  # bound on waiting for a cancelled call to wind down


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # mark it retrieved: no "exception was never retrieved" log


async def _detached(awaitable: Awaitable[T]) -> T:
    inner: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    inner.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if inner.cancelled() and task is not None and task.cancelling() == 0:
            # Nobody cancelled us: grpc cancelled the call itself (its channel was closed).
            raise StoreUnavailableError("the etcd call was cancelled: client closed") from None
        raise
    finally:
        if not inner.done():
            inner.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({inner}, timeout=_CANCEL_WAIT)


# gRPC's own reconnect backoff grows to 120 s by default, so after a long etcd outage a
# client could stay disconnected for two minutes: every lease would be lost. Cap it.
_CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


class EtcdClient:
    """An ``Etcd3Client`` whose every call is bounded by ``settings.call_timeout``."""

    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self._client: Etcd3Client | None = None
        self._token: str | None = None  # with a user: etcd's auth token, None until fetched
        self._password = settings.secret_reader("password") if settings.user else None
        self._auth_lock = anyio.Lock()

    async def connect(self) -> None:
        s = self.settings
        ca = cert = key = None
        tls = s.tls_enabled and s.tls_ca_file is not None  # the settings require the CA
        if tls and s.tls_ca_file is not None:
            ca = s.tls_ca_file.read_bytes()
            if s.tls_cert_file is not None and s.tls_key_file is not None:
                cert, key = s.tls_cert_file.read_bytes(), s.tls_key_file.read_bytes()
        client = Etcd3Client(
            list(s.endpoints),  # its own watch is not used (``watch_stream``)
            tls_server_name=s.tls_server_name if tls else None,
            ca_cert=ca,
            cert_chain=cert,
            cert_key=key,
        )
        options = getattr(getattr(client, "_manager", None), "grpc_options", None)
        if isinstance(options, list):  # etcd3aio 0.3.0 offers no public way to set them
            options.extend(_CHANNEL_OPTIONS)
        await client.connect()  # creates the channel only: etcd is contacted lazily
        self._token = None
        self._client = client
        _log.debug(
            "etcd at %s (%s, %s)",
            self.where,
            "TLS" if tls else "plaintext",
            f"user {s.user}" if s.user else "no user",
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(self.settings.close_timeout, shield=True):
                await _detached(client.close())

    @property
    def connected(self) -> Etcd3Client:
        if self._client is None:
            raise StoreUnavailableError("etcd client is closed (use the adapter in `async with`)")
        return self._client

    @property
    def closed(self) -> bool:
        return self._client is None

    async def call(
        self, what: str, call: Callable[[float], Awaitable[T]], bound: float | None = None
    ) -> T:
        """Run ``call(timeout)`` within ``bound`` (default ``call_timeout``), mapping errors."""
        timeout = self.settings.call_timeout if bound is None else bound
        try:
            with anyio.fail_after(timeout):
                token = await self._authenticated()
                try:
                    return await _detached(call(timeout))
                except (EtcdUnauthenticatedError, grpc.aio.AioRpcError) as exc:
                    if not _unauthenticated(exc) or self.settings.user is None:
                        raise
                    # etcd forgot the token (its TTL, or etcd restarted): log in again, once
                    await self._authenticated(stale=token)
                    return await _detached(call(timeout))
        except TimeoutError as exc:
            raise StoreUnavailableError(
                f"etcd {what}: no answer within {timeout:g} s from {self.where}"
            ) from exc
        except EtcdError as exc:
            raise StoreUnavailableError(f"etcd {what} at {self.where}: {exc}") from exc
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # the only NOT_FOUND: a lease
                raise LeaseLostError(f"etcd {what}: {exc.details()}") from exc
            raise StoreUnavailableError(
                f"etcd {what} at {self.where}: {exc.code().name} {exc.details()}"
            ) from exc

    @property
    def where(self) -> str:
        return ",".join(self.settings.endpoints)

    async def _authenticated(self, stale: str | None = None) -> str | None:
        """With a user: the auth token in force, fetched when there is none yet or when it
        is still ``stale`` (one login for every caller that saw it refused)."""
        s, client = self.settings, self.connected
        if s.user is None:
            return None
        async with self._auth_lock:
            if self._token is None or self._token == stale:
                auth = client.auth
                assert auth is not None
                password = self._password() if self._password is not None else ""
                client.set_token(None)  # a login sent with a stale token is refused
                try:
                    response = await _detached(auth.authenticate(s.user, password))
                except (EtcdUnauthenticatedError, EtcdPermissionDeniedError) as exc:
                    raise StoreUnavailableError(
                        f"etcd at {self.where} refused user {s.user!r}: {exc}"
                    ) from None
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                        raise  # unreachable and the like: call says so
                    # etcd's answer to a wrong password or an unknown user
                    raise StoreUnavailableError(
                        f"etcd at {self.where} refused user {s.user!r}: {exc.details()}"
                    ) from None
                self._token = str(response.token)
                client.set_token(self._token)
            return self._token

    # --- watch -------------------------------------------------------------------------

    async def watch_stream(
        self, key: str, range_end: str | None, start_revision: int
    ) -> AsyncGenerator[Any, None]:
        """One watch stream from ``start_revision``: yields etcd's WatchResponses until the
        stream fails (``grpc.aio.AioRpcError``) or ends; it never reconnects by itself.

        etcd3aio's own ``watch`` is not used: it resumes after the header revision of the
        last response (wrong for catch-up responses, stamped with the current revision) and
        leaks a pending grpc request task every time a stream breaks (its request
        generator waits forever, and grpc only cancels it while the call is still live).
        """
        client = self.connected
        request = WatchRequest(
            create_request=WatchCreateRequest(
                key=key.encode(),
                range_end=b"" if range_end is None else range_end.encode(),
                start_revision=start_revision,
            )
        )

        async def requests(done: asyncio.Event) -> AsyncIterator[Any]:
            yield request
            await done.wait()  # keep our side open until the caller is done

        # A stream takes the token it opens with. etcd cancels a stream opened with a token
        # it no longer knows (expired) in its first response: then log in again and open it
        # once more, so the caller does not see a cancellation (and re-read) for it.
        refused: str | None = None
        for attempt in range(2):
            token = await self._watch_token(stale=refused)
            done = asyncio.Event()
            metadata = (("token", token),) if token else None
            call = WatchStub(client._channel).Watch(requests(done), metadata=metadata)
            try:
                while True:
                    response = await _detached(call.read())
                    if response is grpc.aio.EOF:
                        return
                    if (
                        attempt == 0
                        and token is not None
                        and response.canceled
                        and "auth token" in str(response.cancel_reason)
                    ):
                        refused = token
                        break
                    yield response
            finally:
                done.set()  # lets grpc's request task finish even when the call failed
                call.cancel()

    async def _watch_token(self, stale: str | None) -> str | None:
        """The token to open a watch with (None without a user); a failed login leaves the
        stream to open without one (etcd cancels it; the watch retries)."""
        if self.settings.user is None:
            return None
        with (
            contextlib.suppress(StoreUnavailableError, EtcdError, grpc.aio.AioRpcError),
            anyio.move_on_after(self.settings.call_timeout),
        ):
            await self._authenticated(stale=stale)
        return self._token


def _unauthenticated(exc: BaseException) -> bool:
    if isinstance(exc, EtcdUnauthenticatedError):
        return True
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.UNAUTHENTICATED
