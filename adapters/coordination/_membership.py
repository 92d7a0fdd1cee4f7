"""``StoreMembership``: ``members/{id}`` created on the member's own lease (create-if-absent
is the model's ``join``; the lease's end is its ``leave``); ``StoreLoadReports``:
``reports/{id}`` -> stats JSON on that same lease, so a report goes with its member."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping

from adapters._json import dumps, loads_object, stats_from_json, stats_to_json
from adapters._lease import MemberOnLease, reporting_lease
from adapters.coordination._base import (
    MEMBERS,
    REPORTS,
    StoreAdapter,
    StoreLease,
    member_key,
    put,
    report_key,
    snapshots,
)
from core.errors import LeaseLostError, MemberExistsError, RevisionConflictError
from core.keyspace import KeyValue, decode_segment
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["StoreLoadReports", "StoreMembership", "StoreMembershipLease"]

_log = logging.getLogger(__name__)


class StoreMembershipLease(MemberOnLease):
    """A joined member: its key lives on ``lease``, renewed by the adapter's task group."""

    def __init__(self, lease: StoreLease, member_id: MemberId) -> None:
        super().__init__(lease, member_id)
        self.store_lease = lease

    async def leave(self) -> None:
        """Revoke the lease: the member key and its report go at once. Idempotent; raises
        ``StoreUnavailableError`` when the store did not confirm (the keys then go with the
        lease's TTL)."""
        await self.store_lease.revoke()


class StoreMembership(StoreAdapter):
    """The ``Membership`` port over a ``CoordinationStore``."""

    async def join(self, member_id: MemberId, ttl: float) -> StoreMembershipLease:
        """``MemberExistsError`` when a live member has the id (the new lease is revoked)."""
        lease = await self._new_lease(ttl)
        key = member_key(member_id)
        try:
            revision = await self.store.create(key, b"", lease=lease.id)
        except RevisionConflictError:
            await self._drop_lease(lease)
            raise MemberExistsError(f"member {member_id!r} is already live") from None
        except BaseException:
            await self._drop_lease(lease)
            raise
        self._guard(lease, key, revision)
        return StoreMembershipLease(lease, member_id)

    async def members(self) -> frozenset[MemberId]:
        return _ids((await self.store.list_prefix(MEMBERS)).entries)

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """The live member set now and after every join and leave; survives restarts."""
        last: frozenset[MemberId] | None = None
        async for view, _ in snapshots(self.store, MEMBERS):
            members = _ids(view.values())
            if members != last:
                last = members
                yield members


def _ids(entries: Iterable[KeyValue]) -> frozenset[MemberId]:
    return frozenset(decode_segment(entry.key.removeprefix(MEMBERS)) for entry in entries)


class StoreLoadReports(StoreAdapter):
    """The ``LoadReports`` port: a report is written on its member's lease, so only while
    the member is live."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        member = reporting_lease(lease, StoreMembershipLease)
        key, value = report_key(member.member_id), dumps(stats_to_json(stats)).encode()
        try:
            while True:
                try:
                    current = await self.store.get(key)
                    await put(self.store, key, value, current, lease=member.store_lease.id)
                    return
                except RevisionConflictError:
                    continue  # another write of the same member's report: write over it
        except LeaseLostError as exc:
            member.store_lease.lose(str(exc))
            raise

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        reports: dict[MemberId, MemberStats] = {}
        for entry in (await self.store.list_prefix(REPORTS)).entries:
            try:
                stats = stats_from_json(loads_object(entry.value, "member stats"))
            except ValueError as exc:
                _log.warning("ignoring the report at %s: %s", entry.key, exc)
                continue
            reports[decode_segment(entry.key.removeprefix(REPORTS))] = stats
        return dict(sorted(reports.items()))
