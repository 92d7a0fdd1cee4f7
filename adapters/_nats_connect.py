"""Connecting to NATS with the configured credentials and TLS (the transport, the dead-letter
queue, the idempotency store and the NATS KV coordination adapters all connect here; shared
by ``adapters.nats`` and ``adapters.natskv``, so it lives outside both).

Each caller names the server features it relies on (``core.server_floors``); a server
older than them is refused with ``IncompatibleServerError`` right after the handshake,
because nats-server does not refuse what it cannot do (it drops unknown stream settings).

nats-py retries a refused login like an unreachable server when reconnecting is allowed,
so a wrong password would look like a timeout. ``connect`` stops at the first
authorization error (or server certificate that does not verify) instead and raises
``PermissionError`` naming the server and the user (never the secret)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import nats.errors
from nats.aio.client import Client

from adapters._credentials import redact_url, ssl_context
from adapters._nats_settings import NatsSettings
from core.errors import IncompatibleServerError
from core.server_floors import Feature, refusal

__all__ = ["close_client", "connect", "connect_options", "describe"]

log = logging.getLogger("shoal.adapters.nats")

_REFUSED = ("authorization violation", "authentication", "user authentication")


def connect_options(s: NatsSettings) -> dict[str, Any]:
    """nats-py's ``connect`` keywords for the credentials and TLS of ``s``."""
    options: dict[str, Any] = {}
    if s.user:
        options["user"] = s.user
        options["password"] = s.secret_reader("password")  # read again at each (re)connect
    elif s.has_secret("token"):
        options["token"] = s.secret_reader("token")
    elif s.nkey_seed_file is not None:
        options["nkeys_seed"] = str(s.nkey_seed_file)
    elif s.creds_file is not None:
        options["user_credentials"] = str(s.creds_file)
    if s.tls_wanted:
        options["tls"] = s.ssl_context()
        if options["tls"] is None:  # tls:// URLs alone: the system's CAs
            options["tls"] = ssl_context()
        if s.tls_server_name:
            options["tls_hostname"] = s.tls_server_name
    return options


def describe(s: NatsSettings) -> str:
    """Where and as whom, for log lines: no secret."""
    servers = ",".join(redact_url(u) for u in s.servers)
    who = (
        f"user {s.user}"
        if s.user
        else "a token"
        if s.has_secret("token")
        else "an nkey"
        if s.nkey_seed_file or s.creds_file
        else "no credentials"
    )
    return f"{servers} ({'TLS' if s.tls_wanted else 'plaintext'}, {who})"


def _final(exc: BaseException, s: NatsSettings) -> str | None:
    """Why retrying cannot help (a refused login, a certificate that does not verify), or
    None for an error worth retrying (no server yet, a dropped connection)."""
    if isinstance(exc, nats.errors.AuthorizationError) or (
        isinstance(exc, nats.errors.Error) and any(r in str(exc).lower() for r in _REFUSED)
    ):
        return f"NATS at {describe(s)} refused the login: {exc}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"NATS at {describe(s)}: the TLS handshake failed: {exc}"
    return None


async def connect(
    s: NatsSettings,
    *,
    name: str,
    needs: Iterable[Feature],
    error_cb: Callable[[Exception], Awaitable[None]],
    **options: Any,
) -> Client:
    """A connected client (bounded by ``s.connect_timeout``, ``TimeoutError`` past it,
    naming the last error seen); ``PermissionError`` at once when the server refuses the
    credentials or its certificate does not verify; ``IncompatibleServerError`` when the
    server is older than the features the caller ``needs``."""
    client = Client()
    last: list[BaseException] = []
    connecting = True
    accepted = False  # the caller's connection callbacks hear of nothing before this

    def once_accepted(callback: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def relay() -> None:
            if accepted:
                await callback()

        return relay

    for key in ("disconnected_cb", "reconnected_cb", "closed_cb"):
        if options.get(key) is not None:
            options[key] = once_accepted(options[key])

    async def on_error(exc: Exception) -> None:
        if connecting:
            last[:] = [exc]
            if _final(exc, s) is not None:
                # nats-py would retry the same thing until the timeout; it reads this
                # option right after calling us and then raises ``exc`` (nats-py 2.x)
                client.options["allow_reconnect"] = False
                return
        await error_cb(exc)

    try:
        with anyio.fail_after(s.connect_timeout):
            await client.connect(
                servers=s.servers,
                name=name,
                connect_timeout=max(1, round(s.connect_timeout)),
                error_cb=on_error,
                **connect_options(s),
                **options,
            )
    except TimeoutError:
        await _abandon(client)
        seen = f" (last error: {last[0]!r})" if last else ""
        raise TimeoutError(
            f"no NATS server answered at {describe(s)} within {s.connect_timeout} s{seen}"
        ) from None
    except BaseException as exc:
        await _abandon(client)
        why = _final(exc, s)
        if why is not None:
            raise PermissionError(why) from None
        raise
    finally:
        connecting = False
    problem = refusal(f"nats-server at {_server_of(client)}", _version_of(client), needs)
    if problem is not None:
        await _abandon(client)
        raise IncompatibleServerError(problem)
    accepted = True
    log.debug("NATS connected to %s", describe(s))
    return client


def _server_of(client: Client) -> str:
    url = client.connected_url
    return redact_url(url.geturl()) if url is not None else "?"


def _version_of(client: Client) -> str:
    version = client.connected_server_version  # 0.0.0 when the server sent none
    return f"{version.major}.{version.minor}.{version.patch}"


async def _abandon(client: Client) -> None:
    with anyio.CancelScope(shield=True):
        await close_client(client, 1.0)


async def close_client(client: Client, timeout: float) -> None:  # noqa: ASYNC109 (the caller's bound)
    """``client.close()`` within ``timeout``. A close cut short (a server that stopped
    reading, a reconnect in progress) or failing still closes the socket: nats-py closes it
    last, so a close cancelled before that would leave the connection open."""
    with anyio.move_on_after(timeout):
        try:
            await client.close()
        except Exception as exc:  # a half-open client: nothing more to do
            log.debug("closing a NATS connection: %r", exc)
    transport = client._transport  # nats-py gives no public handle on its socket
    if transport is not None:
        transport.close()  # type: ignore[no-untyped-call]
