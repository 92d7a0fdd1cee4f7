"""``EtcdCoordinationStore``: the ``CoordinationStore`` port on etcd, almost word for word.

Keys live under ``/shoal/{group}/kv/``; a revision is etcd's (a key's mod revision, a
listing's header revision), conditional writes are one transaction each, leases are
etcd's (a lease's keys are deleted together, at one revision). The watch resumes after
the revision of the last event it yielded; when etcd compacted that revision away, or
cancels the watch, it yields a ``Resync``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import grpc  # type: ignore[import-untyped]
from etcd3aio import prefix_range_end
from etcd3aio._protobuf import Compare
from etcd3aio.kv import KVService

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.etcd._client import EtcdClient
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
        maintenance = self._client.connected.maintenance
        assert maintenance is not None
        status = await self._client.call("status", lambda t: maintenance.status(timeout=t))
        problem = refusal(f"etcd at {self._client.where}", str(status.version), (ETCD,))
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _disconnect(self) -> None:
        await self._client.aclose()

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        found, _ = await self._range(self._root + check_key(key), None)
        return self._value(found[0]) if found else None

    async def list_prefix(self, prefix: str) -> Listing:
        path = self._root + check_prefix(prefix)
        found, revision = await self._range(path, prefix_range_end(path))
        return Listing(tuple(self._value(kv) for kv in found), revision)

    async def _range(self, key: str, end: bytes | None) -> tuple[list[Any], int]:
        kv = self._client.connected.kv
        assert kv is not None
        response = await self._client.call("get", lambda t: kv.get(key, end, timeout=t))
        return list(response.kvs), int(response.header.revision)

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        return await self._write(key, 0, value, lease, "exists")

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        return await self._write(key, revision, value, lease, f"not at revision {revision}")

    async def delete(self, key: str, *, revision: int) -> int:
        return await self._write(key, revision, None, None, f"not at revision {revision}")

    async def _write(
        self, key: str, revision: int, value: bytes | None, lease: int | None, refusal: str
    ) -> int:
        """Put ``value`` (delete: None) if the key's mod revision is still ``revision`` (0:
        absent), in one transaction."""
        path = self._root + check_key(key)
        kv = self._client.connected.kv
        assert kv is not None
        compare = Compare(
            result=Compare.EQUAL, target=Compare.MOD, key=path.encode(), mod_revision=revision
        )
        operation = (
            KVService.txn_op_delete(path)
            if value is None
            else KVService.txn_op_put(path, value, lease=lease or 0)
        )
        response = await self._client.call(
            "txn", lambda t: kv.txn([compare], [operation], [], timeout=t, max_attempts=1)
        )
        if not response.succeeded:
            raise RevisionConflictError(f"etcd {key}: {refusal}")
        return int(response.header.revision)

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        """A lease of ``ceil(ttl)`` seconds (etcd may round it up, to 2 s at least)."""
        check_ttl(ttl)
        lease = self._client.connected.lease
        assert lease is not None
        seconds = max(1, math.ceil(ttl))
        response = await self._client.call(
            "lease grant", lambda t: lease.grant(seconds, timeout=t, max_attempts=1)
        )
        return int(response.ID)

    async def keep_alive(self, lease: int) -> None:
        leases = self._client.connected.lease
        assert leases is not None

        async def renew(_: float) -> int:
            stream = leases.keep_alive(lease)
            try:
                async for response in stream:
                    return int(response.TTL)
            finally:
                stream.cancel()
            raise StoreUnavailableError("etcd lease keepalive: the stream ended without answer")

        if await self._client.call("lease keepalive", renew) <= 0:
            raise LeaseLostError(f"etcd lease {lease:x} expired or was revoked")

    async def revoke(self, lease: int) -> None:
        """A lease etcd no longer knows is revoked already."""
        leases = self._client.connected.lease
        assert leases is not None
        with contextlib.suppress(LeaseLostError):
            await self._client.call("lease revoke", lambda t: leases.revoke(lease, timeout=t))

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

    def _value(self, kv: Any) -> KeyValue:
        """A mvccpb.KeyValue as the port's ``KeyValue``."""
        return KeyValue(
            bytes(kv.key).decode().removeprefix(self._root), bytes(kv.value), int(kv.mod_revision)
        )

    def _change(self, event: Any) -> KeyChange:
        value = self._value(event.kv)
        deleted = int(event.type) == _DELETE
        return KeyChange(value.key, None if deleted else value.value, value.revision)
