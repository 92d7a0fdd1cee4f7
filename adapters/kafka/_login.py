"""Reaching the brokers: a client's start bounded by the connect timeout, and a refused
login told from an unreachable broker.

aiokafka reports both as ``KafkaConnectionError("Unable to bootstrap from ...")`` (the
reason only goes to its log). With SASL or TLS on, ``check_login`` opens one connection
the way every client will (``KafkaSettings.security_options``) before the clients start,
and turns a refusal into a ``PermissionError`` that names the servers, the protocol and
the user, never the password."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from adapters.kafka._aiokafka import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
    create_conn,
)
from adapters.kafka._settings import KafkaSettings
from core.errors import ShoalError

__all__ = ["check_login", "reaching"]

log = logging.getLogger("shoal.adapters.kafka")

_REFUSED = (
    SaslAuthenticationFailed,
    AuthenticationFailedError,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


async def check_login(s: KafkaSettings) -> None:
    """``PermissionError`` when a broker refuses the credentials or the TLS handshake
    fails; nothing when the first broker that answers accepts them, or none answers
    (the clients then report the broker unreachable, as without credentials)."""
    if s.security_protocol == "PLAINTEXT":
        return
    options = s.security_options()
    for server in s.bootstrap_servers:
        host, _, port = server.rpartition(":")
        try:
            with anyio.fail_after(s.connect_timeout):
                conn = await create_conn(
                    host,
                    int(port),
                    client_id=f"{s.client_id}-login",
                    request_timeout_ms=s.ms(s.request_timeout),
                    **options,
                )
        except _REFUSED as exc:
            raise PermissionError(f"Kafka at {s.describe()} refused the login: {exc}") from None
        except ssl.SSLError as exc:
            raise PermissionError(f"Kafka at {s.describe()}: TLS handshake failed: {exc}") from None
        except (OSError, TimeoutError, KafkaError) as exc:
            log.debug("Kafka login check at %s: %r", server, exc)
            continue
        conn.close(reason="login checked")
        return


@contextmanager
def reaching(s: KafkaSettings, what: str, unavailable: type[ShoalError]) -> Iterator[None]:
    """Run the block (starting ``what``'s clients) within ``s.connect_timeout``; a broker
    that does not answer in time or fails the start is ``unavailable``, naming ``what`` and
    the servers. A refused login (``check_login``'s ``PermissionError``) and shoal's own
    errors (some are ``TimeoutError``s) pass as they are."""
    try:
        with anyio.fail_after(s.connect_timeout):
            yield
    except (PermissionError, ShoalError):
        raise
    except (TimeoutError, KafkaError, OSError) as exc:
        raise unavailable(
            f"{what} at {s.bootstrap}: not ready within {s.connect_timeout:g} s: {exc!r}"
        ) from exc
