"""``EtcdCoordinationStore``: the ``CoordinationStore`` port on etcd, almost word for word.

Keys live under ``/shoal/{group}/kv/``; a revision is etcd's (a key's mod revision, a
listing's header revision), conditional writes are one transaction each, leases are
etcd's (a lease's keys are deleted together, at one revision). The watch resumes after
the revision of the last event it yielded; when etcd compacted that revision away, or
cancels the watch, it yields a ``Resync``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import grpc  # type: ignore[import-untyped]
from etcd3aio import prefix_range_end

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.etcd._client import Entry, EtcdClient
from adapters.etcd._settings import EtcdSettings
from core.errors import (
    IncompatibleServerError,
    LeaseLostError,
    RevisionConflictError,
    StoreUnavailableError,
)
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix
from core.server_floors import ETCD, refusal

__all__ = ["EtcdCoordinationStore"]

_log = logging.getLogger(__name__)
_DELETE = 1  # mvccpb.Event.EventType


class EtcdCoordinationStore(Lifecycle):
    """``async with`` connects (and checks etcd's version); leaving closes the client."""

    def __init__(self, settings: EtcdSettings | None = None) -> None:
        self.settings = settings if settings is not None else EtcdSettings()
        self._root = f"{self.settings.prefix}/kv/"
        self._client = EtcdClient(self.settings)

    async def _connect(self) -> None:
        await self._client.connect()
        version = await self._client.server_version()
        problem = refusal(f"etcd at {self._client.where}", version, (ETCD,))
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _disconnect(self) -> None:
        await self._client.aclose()

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        entry, _ = await self._client.get(self._root + check_key(key))
        return None if entry is None else self._value(entry)

    async def list_prefix(self, prefix: str) -> Listing:
        entries, revision = await self._client.get_prefix(self._root + check_prefix(prefix))
        return Listing(tuple(self._value(entry) for entry in entries), revision)

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        path = self._root + check_key(key)
        put = EtcdClient.put_op(path, value, lease or 0)
        return await self._write(key, [EtcdClient.created_at(path, 0)], put, "exists")

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        path = self._root + check_key(key)
        put = EtcdClient.put_op(path, value, lease or 0)
        compare = [EtcdClient.modified_at(path, revision)]
        return await self._write(key, compare, put, f"not at revision {revision}")

    async def delete(self, key: str, *, revision: int) -> int:
        path = self._root + check_key(key)
        compare = [EtcdClient.modified_at(path, revision)]
        delete = EtcdClient.delete_op(path)
        return await self._write(key, compare, delete, f"not at revision {revision}")

    async def _write(self, key: str, compare: Sequence[Any], operation: Any, refusal: str) -> int:
        result = await self._client.txn(compare, [operation])
        if not result.succeeded:
            raise RevisionConflictError(f"etcd {key}: {refusal}")
        return result.revision

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        return await self._client.grant(ttl)

    async def keep_alive(self, lease: int) -> None:
        if await self._client.keep_alive_once(lease, self.settings.call_timeout) <= 0:
            raise LeaseLostError(f"etcd lease {lease:x} expired or was revoked")

    async def revoke(self, lease: int) -> None:
        await self._client.revoke(lease)

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        path = self._root + check_prefix(prefix)
        client, settings = self._client, self.settings
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        revision = after
        while True:
            if revision is None:
                try:
                    listing = await self.list_prefix(prefix)
                except StoreUnavailableError as exc:
                    if client.closed:
                        raise
                    _log.warning("etcd watch %s: listing failed, retrying: %s", path, exc)
                    await backoff.sleep()
                    continue
                revision = listing.revision
                yield Resync(listing)
            stream = client.watch_stream(path, prefix_range_end(path).decode(), revision + 1)
            try:
                async with aclosing(stream):
                    async for response in stream:
                        if response.canceled or response.compact_revision:
                            _log.info(
                                "etcd watch %s: cancelled (compacted at %d), listing again",
                                path,
                                response.compact_revision,
                            )
                            revision = None
                            break
                        backoff.reset()
                        # a response holds whole revisions: a lease's deletions share one
                        changes = [self._change(event) for event in response.events]
                        for change in changes:
                            if change.revision > revision:
                                yield change
                        revision = max([revision, *(change.revision for change in changes)])
            except grpc.aio.AioRpcError as exc:
                if client.closed:
                    raise StoreUnavailableError(f"etcd watch {path}: client closed") from exc
                _log.warning(
                    "etcd watch %s: %s %s; resuming after revision %d",
                    path,
                    exc.code().name,
                    exc.details(),
                    revision,
                )
            if revision is not None:
                await backoff.sleep()

    def _value(self, entry: Entry) -> KeyValue:
        return KeyValue(entry.key.removeprefix(self._root), entry.value, entry.mod_revision)

    def _change(self, event: Any) -> KeyChange:
        entry = Entry.of(event.kv)
        value = None if int(event.type) == _DELETE else entry.value
        return KeyChange(entry.key.removeprefix(self._root), value, entry.mod_revision)
