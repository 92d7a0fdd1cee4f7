"""Closing a NATS connection within a bound: nats-py closes the socket last, so a close the
bound cut short left the connection open until the garbage collector found it (CI: an
``unclosed socket`` warning in whichever test ran then). ``close_client`` closes it anyway."""

from __future__ import annotations

import asyncio

import pytest

from adapters._nats_connect import close_client, connect
from adapters.nats import NatsSettings
from infra.local._testservers import ServerInfo

pytestmark = [pytest.mark.nats, pytest.mark.anyio]


async def _ignore(exc: Exception) -> None:
    del exc


async def test_a_close_cut_short_still_closes_the_socket(nats_server: ServerInfo) -> None:
    client = await connect(
        NatsSettings(url=nats_server.url), name="close-test", needs=(), error_cb=_ignore
    )
    writer = client._transport._io_writer  # type: ignore[union-attr]
    assert isinstance(writer, asyncio.StreamWriter) and not writer.is_closing()
    await close_client(client, 0.0)  # no time at all: nats-py's close is cut at its first await
    assert client.is_closed
    assert writer.is_closing()


async def test_a_close_in_time_closes_the_socket(nats_server: ServerInfo) -> None:
    client = await connect(
        NatsSettings(url=nats_server.url), name="close-test", needs=(), error_cb=_ignore
    )
    writer = client._transport._io_writer  # type: ignore[union-attr]
    await close_client(client, 5.0)
    assert client.is_closed and writer.is_closing()
