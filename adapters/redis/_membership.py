"""``RedisMembership``: ``consumers:{id}`` -> ``{token}:`` with a TTL (PX);
``RedisLoadReports``: field ``{id}`` of the hash ``reports`` -> ``{token}:{stats JSON}``.

``join`` is ``SET NX PX`` (a live member keeps its id); renewals, reports and ``leave``
are owner-checked scripts. The ``members`` set lists the ids that may be live: Redis
cannot list keys by prefix cheaply, so one script reads the set, the keys and the reports,
pruning ids (and reports) whose key expired, and keeping only reports written by the live
member's token (not by an earlier member of the same id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing

import anyio

from adapters._lease import MemberOnLease, check_ttl, reporting_lease
from adapters.redis._base import RedisAdapter
from adapters.redis._client import RedisClient, ms
from adapters.redis._codec import decode_report, encode_member, encode_report, new_token
from adapters.redis._feed import Change
from adapters.redis._keys import Keys
from adapters.redis._lease import Lease
from adapters.redis._watch import watch_snapshots
from core.errors import LeaseLostError, MemberExistsError, ShoalError
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["RedisLoadReports", "RedisMembership", "RedisMembershipLease"]

_log = logging.getLogger(__name__)


class RedisMembershipLease(MemberOnLease):
    """A joined member: its key is renewed by the adapter's task group."""

    def __init__(self, lease: Lease, member_id: MemberId) -> None:
        super().__init__(lease, member_id)
        self.key_lease = lease

    @property
    def key(self) -> str:
        """The member's Redis key."""
        return self.key_lease.key

    async def leave(self) -> None:
        """Delete the member key now (if still ours). Idempotent.

        Raises ``StoreUnavailableError`` if Redis did not confirm; the key then expires
        with its TTL, and calling ``leave`` again retries.
        """
        await self.key_lease.release()


class RedisMembership(RedisAdapter):
    """The ``Membership`` port on Redis. Use as ``async with RedisMembership(settings) as m``."""

    _expirations = True

    async def join(self, member_id: MemberId, ttl: float) -> RedisMembershipLease:
        """``SET consumers:{member_id} NX PX ttl``; raises ``MemberExistsError`` when a live
        member has that id, ``StoreUnavailableError`` when Redis does not answer."""
        check_ttl(ttl)
        feed = await self._started_feed()
        keys, client, settings = self._keys, self._client, self.settings
        key = keys.consumer(member_id)
        token = new_token()

        async def release() -> object:
            return await client.script(
                "LEAVE",
                [key, keys.members, keys.reports, keys.events],
                [token, member_id, settings.events_maxlen],
            )

        sent = time.monotonic()
        try:
            joined = await client.script(
                "JOIN",
                [key, keys.members, keys.events],
                [member_id, encode_member(token), ms(ttl), settings.events_maxlen],
            )
        except BaseException:
            # it may have been applied (a timeout, a cancellation): undo it if so
            with anyio.CancelScope(shield=True), anyio.move_on_after(settings.call_timeout):
                try:
                    await release()
                except ShoalError as exc:
                    _log.warning("redis: join of %s not undone (expires): %s", member_id, exc)
            raise
        if not joined:
            raise MemberExistsError(f"member {member_id!r} is already live in Redis at {key}")
        lease = Lease(
            client,
            key=key,
            token=token,
            ttl=ttl,
            granted_at=sent,
            release=release,
            what=f"member {member_id}",
        )
        wake = feed.add(lambda change: _taken(change, key))
        await self._keep(lease, wake)
        return RedisMembershipLease(lease, member_id)

    async def members(self) -> frozenset[MemberId]:
        return frozenset(await _live(self._client, self._keys))

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """The live member set now and after every join and leave; survives Redis restarts."""
        feed = await self._started_feed()
        last: frozenset[MemberId] | None = None
        snapshots = watch_snapshots(
            self._client, feed, lambda c: c.topic == "members", self.members, "members"
        )
        async with aclosing(snapshots):
            async for members in snapshots:
                if members != last:
                    last = members
                    yield members


class RedisLoadReports(RedisAdapter):
    """The ``LoadReports`` port on Redis."""

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        member = reporting_lease(lease, RedisMembershipLease)
        held = member.key_lease
        written = await self._client.script(
            "REPORT",
            [held.key, self._keys.reports],
            [held.token, member.member_id, encode_report(held.token, stats)],
        )
        if not written:
            held.lose("member key expired or taken over")
            raise LeaseLostError(f"member {member.member_id}: its key is gone from Redis")

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        reports: dict[MemberId, MemberStats] = {}
        for member_id, raw in sorted((await _live(self._client, self._keys)).items()):
            if raw is None:
                continue
            try:
                reports[member_id] = decode_report(raw)
            except ValueError as exc:
                _log.warning("redis: ignoring the report of %s: %s", member_id, exc)
        return reports


async def _live(client: RedisClient, keys: Keys) -> dict[MemberId, bytes | None]:
    """The live member ids, each with its current report (None when it has none)."""
    reply = await client.script("MEMBERS", [keys.members, keys.reports], [keys.consumers])
    return {
        raw_id.decode(errors="replace"): value or None
        for raw_id, value in zip(reply[::2], reply[1::2], strict=True)
    }


def _taken(change: Change, key: str) -> bool:
    """A change after which ``key`` may no longer be ours (our own updates are not)."""
    return change.key == key and change.op in ("expired", "join", "leave")
