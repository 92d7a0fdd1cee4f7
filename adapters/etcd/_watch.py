"""Watch a key or a prefix as a sequence of snapshots that survives etcd restarts.

Each stream starts after the revision of the last event applied; when it breaks (etcd
restarted, connection lost) a new one starts from there after a backoff, so no event
is skipped or repeated. When etcd has compacted that revision away, or cancels the
watch, everything is re-read instead (a snapshot then covers several changes).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import grpc  # type: ignore[import-untyped]
from etcd3aio import prefix_range_end

from adapters._backoff import Backoff
from adapters.etcd._client import Entry, EtcdClient
from core.errors import StoreUnavailableError

__all__ = ["watch_snapshots"]

_log = logging.getLogger(__name__)
_DELETE = 1  # mvccpb.Event.EventType


async def watch_snapshots(
    client: EtcdClient, key: str, *, prefix: bool
) -> AsyncGenerator[dict[str, Entry], None]:
    """Yield ``{key: entry}`` for ``key`` (or every key under it) now and after every revision
    that changed it. Runs until the caller closes it; retries while etcd is unreachable.

    Raises ``StoreUnavailableError`` only when the client is closed under it.
    """
    settings = client.settings
    backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
    range_end = prefix_range_end(key).decode() if prefix else None
    entries: dict[str, Entry] | None = None
    revision = 0  # the store revision `entries` reflects
    while True:
        if entries is None:
            try:
                if prefix:
                    items, revision = await client.get_prefix(key)
                else:
                    entry, revision = await client.get(key)
                    items = [] if entry is None else [entry]
            except StoreUnavailableError as exc:
                if client.closed:
                    raise
                _log.warning("etcd watch %s: re-read failed, retrying: %s", key, exc)
                await backoff.sleep()
                continue
            entries = {item.key: item for item in items}
            yield dict(entries)
        stream = client.watch_stream(key, range_end, revision + 1)
        try:
            async with aclosing(stream):
                async for response in stream:
                    if response.canceled or response.compact_revision:
                        _log.info(
                            "etcd watch %s: cancelled (compacted at %d), re-reading",
                            key,
                            response.compact_revision,
                        )
                        entries = None
                        break
                    if response.created:
                        continue
                    backoff.reset()
                    for event_revision, events in itertools.groupby(
                        response.events, key=_revision_of
                    ):
                        if event_revision <= revision:
                            continue
                        for event in events:
                            _apply(entries, event)
                        revision = event_revision
                        yield dict(entries)
        except grpc.aio.AioRpcError as exc:
            if client.closed:
                raise StoreUnavailableError(f"etcd watch {key}: client closed") from exc
            _log.warning(
                "etcd watch %s: %s %s; resuming after revision %d",
                key,
                exc.code().name,
                exc.details(),
                revision,
            )
        await backoff.sleep()


def _revision_of(event: Any) -> int:
    return int(event.kv.mod_revision)


def _apply(entries: dict[str, Entry], event: Any) -> None:
    entry = Entry.of(event.kv)
    if int(event.type) == _DELETE:
        entries.pop(entry.key, None)
    else:
        entries[entry.key] = entry
