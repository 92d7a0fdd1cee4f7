"""``EtcdMembership``: ``consumers/{id}`` on the member's own lease; ``EtcdLoadReports``:
``reports/{id}`` -> stats JSON, on that same lease, so a report goes with its member."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping

from adapters._lease import MemberOnLease, reporting_lease
from adapters.etcd._base import EtcdAdapter
from adapters.etcd._client import Entry
from adapters.etcd._codec import decode_stats, encode_stats
from adapters.etcd._lease import Lease
from adapters.etcd._watch import watch_snapshots
from core.errors import LeaseLostError, MemberExistsError
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["EtcdLoadReports", "EtcdMembership", "EtcdMembershipLease"]

_log = logging.getLogger(__name__)


class EtcdMembershipLease(MemberOnLease):
    """A joined member: its key lives on ``lease``, renewed by the adapter's task group."""

    def __init__(self, lease: Lease, member_id: MemberId, key: str, created: int) -> None:
        super().__init__(lease, member_id)
        self.etcd_lease = lease
        self.key = key
        self.created = created
        self._left = False

    @property
    def lease_id(self) -> int:
        """etcd's id of the lease the member key is attached to."""
        return self.etcd_lease.id

    async def leave(self) -> None:
        """Revoke the lease: the member key and its report vanish at once. Idempotent.

        Raises ``StoreUnavailableError`` if etcd did not confirm; the keys then expire with
        the lease's TTL, and calling ``leave`` again retries.
        """
        if self._left:
            return
        await self.etcd_lease.revoke()
        self._left = True


class EtcdMembership(EtcdAdapter):
    """The ``Membership`` port on etcd. Use as ``async with EtcdMembership(settings) as m``."""

    async def join(self, member_id: MemberId, ttl: float) -> EtcdMembershipLease:
        """Put ``consumers/{member_id}`` on a new lease of ``ttl`` seconds if no live member
        has that id. Raises ``MemberExistsError`` (the lease is revoked then) or
        ``StoreUnavailableError``."""
        key = self._keys.consumer(member_id)
        lease = await self._new_lease(ttl)
        client = self._client
        try:
            result = await client.txn(
                [client.created_at(key, 0)],
                [client.put_op(key, b"", lease.id)],
            )
        except BaseException:
            await self._drop_lease(lease)
            raise
        if not result.succeeded:
            await self._drop_lease(lease)
            raise MemberExistsError(f"member {member_id!r} is already live in etcd at {key}")
        return EtcdMembershipLease(lease, member_id, key, result.revision)

    async def members(self) -> frozenset[MemberId]:
        entries, _ = await self._client.get_prefix(self._keys.consumers)
        return self._ids(entries)

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """The live member set now and after every join and leave; survives etcd restarts."""
        last: frozenset[MemberId] | None = None
        async for snapshot in watch_snapshots(self._client, self._keys.consumers, prefix=True):
            members = self._ids(snapshot.values())
            if members != last:
                last = members
                yield members

    def _ids(self, entries: Iterable[Entry]) -> frozenset[MemberId]:
        prefix = self._keys.consumers
        return frozenset(entry.key.removeprefix(prefix) for entry in entries)


class EtcdLoadReports(EtcdAdapter):
    """The ``LoadReports`` port on etcd: a report is written only while its member's key is
    the one the lease created, and on the member's lease."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        member = reporting_lease(lease, EtcdMembershipLease)
        client = self._client
        try:
            result = await client.txn(
                [client.created_at(member.key, member.created)],
                [
                    client.put_op(
                        self._keys.report(member.member_id), encode_stats(stats), member.lease_id
                    )
                ],
            )
        except LeaseLostError as exc:
            member.etcd_lease.lose(str(exc))
            raise
        if not result.succeeded:
            member.etcd_lease.lose("member key deleted or replaced")
            raise LeaseLostError(f"member {member.member_id}: its key is gone from etcd")

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        entries, _ = await self._client.get_prefix(self._keys.reports)
        return self._decode(entries)

    def _decode(self, entries: Iterable[Entry]) -> dict[MemberId, MemberStats]:
        reports: dict[MemberId, MemberStats] = {}
        prefix = self._keys.reports
        for entry in entries:
            try:
                reports[entry.key.removeprefix(prefix)] = decode_stats(entry.value)
            except ValueError as exc:
                _log.warning("etcd: ignoring the report at %s: %s", entry.key, exc)
        return dict(sorted(reports.items()))
