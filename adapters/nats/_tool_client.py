"""``NatsToolClient``: the connection of a NATS adapter that an operator command uses for
a short while (``shoal dlq``, ``shoal replay``): no reconnects (a lost server fails the
command, it does not hang it), a server that does not answer is ``BrokerUnavailableError``,
a refused login stays ``PermissionError``."""

from __future__ import annotations

import logging

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from adapters._lifecycle import Lifecycle
from adapters._nats_connect import close_client, connect, describe
from adapters._nats_settings import NatsSettings
from adapters.nats._subjects import Subjects
from core.errors import BrokerUnavailableError
from core.server_floors import NATS_KILL_SAFE

__all__ = ["NatsToolClient"]

log = logging.getLogger("shoal.adapters.nats")


class NatsToolClient(Lifecycle):
    """``client_suffix`` names the connection on the server (``{name}-{suffix}``)."""

    client_suffix = "tool"

    def __init__(self, settings: NatsSettings | None = None) -> None:
        self.settings = settings or NatsSettings()
        self.subjects = Subjects(self.settings.subject_prefix, self.settings.dead_letter_prefix)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None

    async def _connect(self) -> None:
        s = self.settings
        try:
            self._nc = await connect(
                s,
                name=f"{s.name}-{self.client_suffix}",
                needs=(NATS_KILL_SAFE,),
                error_cb=self._on_error,
                allow_reconnect=False,
            )
        except TimeoutError as exc:  # `connect` says where it tried and the last error
            raise BrokerUnavailableError(str(exc)) from None
        except (nats.errors.Error, OSError) as exc:
            if isinstance(exc, PermissionError):
                raise
            raise BrokerUnavailableError(
                f"no NATS server answered at {describe(s)} within {s.connect_timeout} s: {exc!r}"
            ) from None
        self._js = self._nc.jetstream(timeout=s.request_timeout)

    @staticmethod
    async def _on_error(exc: Exception) -> None:
        log.debug("NATS: %r", exc)  # the failed call raises it, with context

    async def _disconnect(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await close_client(nc, self.settings.close_timeout)

    def _client(self) -> Client:
        if self._nc is None:
            raise RuntimeError(f"{type(self).__name__} is not entered (use 'async with')")
        return self._nc

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError(f"{type(self).__name__} is not entered (use 'async with')")
        return self._js
