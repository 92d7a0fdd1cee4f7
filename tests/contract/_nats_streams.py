"""Cleaning up after a test on the session's nats-server, which outlives it."""

from __future__ import annotations

import contextlib

import nats
from nats.js.errors import NotFoundError

from adapters.nats import NatsSettings


async def delete_streams(settings: NatsSettings) -> None:
    """Delete the settings' data, dead-letter and excusal streams (those that exist)."""
    nc = await nats.connect(settings.url)
    try:
        excusals = f"KV_{settings.stream}_EXCUSALS"
        for stream in (settings.stream, settings.dead_letter_stream, excusals):
            with contextlib.suppress(NotFoundError):
                await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()
