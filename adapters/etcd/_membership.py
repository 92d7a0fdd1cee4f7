"""``EtcdMembership``: ``consumers/{id}`` -> stats JSON, on the member's own lease."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping

from adapters._lease import MemberOnLease
from adapters.etcd._base import EtcdAdapter
from adapters.etcd._client import Entry, EtcdClient
from adapters.etcd._codec import decode_stats, encode_stats
from adapters.etcd._lease import Lease
from adapters.etcd._watch import watch_snapshots
from core.errors import LeaseLostError, MemberExistsError
from core.model import MemberId, MemberStats

__all__ = ["EtcdMembership", "EtcdMembershipLease"]

_log = logging.getLogger(__name__)


class EtcdMembershipLease(MemberOnLease):
    """A joined member: its key lives on ``lease``, renewed by the adapter's task group."""

    def __init__(
        self, client: EtcdClient, lease: Lease, member_id: MemberId, key: str, created: int
    ) -> None:
        super().__init__(lease, member_id)
        self._client = client
        self._etcd_lease = lease
        self._key = key
        self._created = created
        self._left = False

    @property
    def lease_id(self) -> int:
        """etcd's id of the lease the member key is attached to."""
        return self._etcd_lease.id

    async def _write(self, stats: MemberStats) -> None:
        """Write ``stats`` if the member key is still ours (created at ``created``)."""
        client = self._client
        try:
            result = await client.txn(
                [client.created_at(self._key, self._created)],
                [client.put_op(self._key, encode_stats(stats), self._etcd_lease.id)],
            )
        except LeaseLostError as exc:
            self._lease.lose(str(exc))
            raise
        if not result.succeeded:
            self._lease.lose("member key deleted or replaced")
            raise LeaseLostError(f"member {self.member_id}: its key is gone from etcd")

    async def leave(self) -> None:
        """Revoke the lease: the member key vanishes at once. Idempotent.

        Raises ``StoreUnavailableError`` if etcd did not confirm; the key then expires with
        the lease's TTL, and calling ``leave`` again retries.
        """
        if self._left:
            return
        await self._etcd_lease.revoke()
        self._left = True


class EtcdMembership(EtcdAdapter):
    """The ``Membership`` port on etcd. Use as ``async with EtcdMembership(settings) as m``."""

    async def join(
        self, member_id: MemberId, stats: MemberStats, ttl: float
    ) -> EtcdMembershipLease:
        """Put ``consumers/{member_id}`` on a new lease of ``ttl`` seconds if no live member
        has that id. Raises ``MemberExistsError`` (the lease is revoked then) or
        ``StoreUnavailableError``."""
        key = self._keys.consumer(member_id)
        lease = await self._new_lease(ttl)
        client = self._client
        try:
            result = await client.txn(
                [client.created_at(key, 0)],
                [client.put_op(key, encode_stats(stats), lease.id)],
            )
        except BaseException:
            await self._drop_lease(lease)
            raise
        if not result.succeeded:
            await self._drop_lease(lease)
            raise MemberExistsError(f"member {member_id!r} is already live in etcd at {key}")
        return EtcdMembershipLease(client, lease, member_id, key, result.revision)

    async def members(self) -> Mapping[MemberId, MemberStats]:
        entries, _ = await self._client.get_prefix(self._keys.consumers)
        return self._decode(entries)

    async def watch(self) -> AsyncIterator[Mapping[MemberId, MemberStats]]:
        """The live member map now and after every change; survives etcd restarts."""
        last: dict[MemberId, MemberStats] | None = None
        async for snapshot in watch_snapshots(self._client, self._keys.consumers, prefix=True):
            members = self._decode(snapshot.values())
            if members != last:
                last = members
                yield dict(members)

    def _decode(self, entries: Iterable[Entry]) -> dict[MemberId, MemberStats]:
        members: dict[MemberId, MemberStats] = {}
        prefix = self._keys.consumers
        for entry in entries:
            try:
                members[entry.key.removeprefix(prefix)] = decode_stats(entry.value)
            except ValueError as exc:
                _log.warning("etcd: ignoring member %s: %s", entry.key, exc)
        return dict(sorted(members.items()))
