"""``RedisMembership``: ``consumers:{id}`` -> ``{token}:{stats JSON}`` with a TTL (PX).

``join`` is ``SET NX PX`` (a live member keeps its id); renewals, updates and ``leave``
are owner-checked scripts. The ``members`` set lists the ids that may be live: Redis
cannot list keys by prefix cheaply, so ``members()`` reads the set and the keys in one
script, pruning ids whose key expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing

import anyio

from adapters._lease import MemberOnLease, check_ttl
from adapters.redis._base import RedisAdapter
from adapters.redis._client import RedisClient, ms
from adapters.redis._codec import decode_member, encode_member, new_token
from adapters.redis._feed import Change
from adapters.redis._lease import Lease
from adapters.redis._watch import watch_snapshots
from core.errors import LeaseLostError, MemberExistsError, ShoalError
from core.model import MemberId, MemberStats

__all__ = ["RedisMembership", "RedisMembershipLease"]

_log = logging.getLogger(__name__)


class RedisMembershipLease(MemberOnLease):
    """A joined member: its key is renewed by the adapter's task group."""

    def __init__(
        self, client: RedisClient, lease: Lease, member_id: MemberId, events_key: str
    ) -> None:
        super().__init__(lease, member_id)
        self._client = client
        self._key_lease = lease
        self._events_key = events_key

    @property
    def key(self) -> str:
        """The member's Redis key."""
        return self._key_lease.key

    async def _write(self, stats: MemberStats) -> None:
        """Write ``stats`` and renew the TTL, if the member key is still ours."""
        lease = self._key_lease
        sent = time.monotonic()
        written = await self._client.script(
            "UPDATE",
            [lease.key, self._events_key],
            [
                lease.token,
                encode_member(lease.token, stats),
                ms(lease.ttl),
                self._client.settings.events_maxlen,
            ],
        )
        if not written:
            lease.lose("member key expired or taken over")
            raise LeaseLostError(f"member {self.member_id}: its key is gone from Redis")
        lease.renewed(sent)

    async def leave(self) -> None:
        """Delete the member key now (if still ours). Idempotent.

        Raises ``StoreUnavailableError`` if Redis did not confirm; the key then expires
        with its TTL, and calling ``leave`` again retries.
        """
        await self._key_lease.release()


class RedisMembership(RedisAdapter):
    """The ``Membership`` port on Redis. Use as ``async with RedisMembership(settings) as m``."""

    _expirations = True

    async def join(
        self, member_id: MemberId, stats: MemberStats, ttl: float
    ) -> RedisMembershipLease:
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
                [key, keys.members, keys.events],
                [token, member_id, settings.events_maxlen],
            )

        sent = time.monotonic()
        try:
            joined = await client.script(
                "JOIN",
                [key, keys.members, keys.events],
                [member_id, encode_member(token, stats), ms(ttl), settings.events_maxlen],
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
        return RedisMembershipLease(client, lease, member_id, keys.events)

    async def members(self) -> Mapping[MemberId, MemberStats]:
        reply = await self._client.script("MEMBERS", [self._keys.members], [self._keys.consumers])
        return self._decode(reply)

    async def watch(self) -> AsyncIterator[Mapping[MemberId, MemberStats]]:
        """The live member map now and after every change; survives Redis restarts."""
        feed = await self._started_feed()
        last: Mapping[MemberId, MemberStats] | None = None
        snapshots = watch_snapshots(
            self._client, feed, lambda c: c.topic == "members", self.members, "members"
        )
        async with aclosing(snapshots):
            async for members in snapshots:
                if members != last:
                    last = members
                    yield dict(members)

    def _decode(self, reply: Sequence[bytes]) -> dict[MemberId, MemberStats]:
        members: dict[MemberId, MemberStats] = {}
        for raw_id, value in zip(reply[::2], reply[1::2], strict=True):
            member_id = raw_id.decode(errors="replace")
            try:
                members[member_id] = decode_member(value)
            except ValueError as exc:
                _log.warning("redis: ignoring member %s: %s", member_id, exc)
        return dict(sorted(members.items()))


def _taken(change: Change, key: str) -> bool:
    """A change after which ``key`` may no longer be ours (our own updates are not)."""
    return change.key == key and change.op in ("expired", "join", "leave")
