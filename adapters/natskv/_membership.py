"""``NatsKvMembership``: ``members.{id}`` -> ``{token}`` with the lease's TTL;
``NatsKvLoadReports``: ``reports.{id}`` -> ``{token}:{stats JSON}`` (no TTL).

``join`` creates the key if absent (a live member keeps its id); renewals rewrite it with a
fresh TTL if its revision is still ours; ``leave`` deletes it (revision-compared) and the
member's report. A member whose key expired is gone: the server drops the key and leaves an
expiry marker, which the watches see. A report counts only while the member key holds the
token it was written with; readers delete the others (a member that expired), so a report
goes when its member does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing

import anyio

from adapters._json import dumps, loads_object, stats_from_json, stats_to_json
from adapters._lease import MemberOnLease, check_ttl, reporting_lease
from adapters.natskv import _keys as keys
from adapters.natskv._base import KvLease, NatsKvAdapter, new_token
from adapters.natskv._bucket import Bucket, Entry
from core.errors import LeaseLostError, MemberExistsError, ShoalError, StoreUnavailableError
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["NatsKvLoadReports", "NatsKvMembership", "NatsKvMembershipLease"]

_log = logging.getLogger("shoal.adapters.natskv")


class NatsKvMembershipLease(MemberOnLease):
    """A joined member: its key is renewed by the adapter's task group."""

    def __init__(self, lease: KvLease, member_id: MemberId) -> None:
        super().__init__(lease, member_id)
        self.key_lease = lease

    @property
    def key(self) -> str:
        """The member's key in the bucket."""
        return self.key_lease.key

    async def leave(self) -> None:
        """Delete the member key now (if still ours) and its report. Idempotent.
        ``StoreUnavailableError`` if NATS did not confirm; the key then expires with its
        TTL, and calling ``leave`` again retries."""
        await self.key_lease.release()


async def _leave(bucket: Bucket, lease: KvLease, member_id: MemberId) -> None:
    await bucket.delete(lease.key, last=lease.revision)  # refused: not ours any more
    report_key = keys.report(member_id)
    report = await bucket.get(report_key)
    if report is not None and _token(report.value) == lease.token:
        await bucket.delete(report_key, last=report.revision)


def _token(value: bytes) -> str:
    return value.partition(b":")[0].decode(errors="replace")


class NatsKvMembership(NatsKvAdapter):
    """The ``Membership`` port on NATS KV. ``async with NatsKvMembership(settings) as m``."""

    _watched = keys.MEMBERS

    async def join(self, member_id: MemberId, ttl: float) -> NatsKvMembershipLease:
        """Create ``members.{id}`` with a TTL; ``MemberExistsError`` when a live member has
        that id, ``StoreUnavailableError`` when NATS does not answer."""
        check_ttl(ttl)
        await self._started_feed()
        bucket, key, token = self._bucket, keys.member(member_id), new_token()

        async def release(lease: KvLease) -> None:
            await _leave(bucket, lease, member_id)

        sent = time.monotonic()
        try:
            revision = await bucket.create(key, token.encode(), ttl=ttl)
        except BaseException:
            await self._undo(key, token)  # it may have been applied (a timeout, a cancel)
            raise
        if revision is None:
            raise MemberExistsError(f"member {member_id!r} is live already")
        lease = KvLease(
            bucket,
            key=key,
            value=token.encode(),
            token=token,
            revision=revision,
            ttl=ttl,
            granted_at=sent,
            release=release,
            what=f"member {member_id}",
        )
        await self._keep(lease)
        return NatsKvMembershipLease(lease, member_id)

    async def _undo(self, key: str, token: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.call_timeout):
            try:
                entry = await self._bucket.get(key)
                if entry is not None and entry.value == token.encode():
                    await self._bucket.delete(key, last=entry.revision)
            except ShoalError as exc:
                _log.warning("NATS KV: join of %s not undone: %s", key, exc)

    async def members(self) -> frozenset[MemberId]:
        return frozenset(_live(await self._bucket.snapshot(keys.MEMBERS)))

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """The live member set now and after every join, leave and expiry; survives NATS
        restarts (re-reads after every reconnect)."""
        last: frozenset[MemberId] | None = None
        async with aclosing(self._snapshots(self.members, "members")) as snapshots:
            async for members in snapshots:
                if members != last:
                    last = members
                    yield members


class NatsKvLoadReports(NatsKvAdapter):
    """The ``LoadReports`` port on NATS KV."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        member = reporting_lease(lease, NatsKvMembershipLease)
        held = member.key_lease
        entry = await self._bucket.get(held.key)
        if entry is None or entry.value != held.token.encode():
            held.lose("member key expired or taken over")
            raise LeaseLostError(f"member {member.member_id}: its key is gone from NATS KV")
        value = f"{held.token}:{dumps(stats_to_json(stats))}".encode()
        await self._bucket.put(keys.report(member.member_id), value)

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        live = _live(await self._bucket.snapshot(keys.MEMBERS))
        reports: dict[MemberId, MemberStats] = {}
        for key, entry in sorted((await self._bucket.snapshot(keys.REPORTS)).items()):
            member_id = keys.decode_id(key.removeprefix(keys.REPORTS))
            token, _, stats = entry.value.partition(b":")
            if live.get(member_id) != token.decode(errors="replace"):
                await self._prune(entry)
                continue
            try:
                reports[member_id] = stats_from_json(loads_object(stats, "member stats"))
            except ValueError as exc:
                _log.warning("NATS KV: ignoring the report of %s: %s", member_id, exc)
        return reports

    async def _prune(self, entry: Entry) -> None:
        """Delete the report of a member gone (unless rewritten meanwhile). Best effort:
        it is not counted anyway, and the next read tries again."""
        try:
            await self._bucket.delete(entry.key, last=entry.revision)
        except StoreUnavailableError as exc:
            _log.debug("NATS KV: stale report %s not deleted: %s", entry.key, exc)


def _live(entries: Mapping[str, Entry]) -> dict[MemberId, str]:
    """The live member ids, each with its owner token."""
    return {
        keys.decode_id(key.removeprefix(keys.MEMBERS)): entry.value.decode(errors="replace")
        for key, entry in entries.items()
    }
