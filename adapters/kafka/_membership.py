"""``KafkaMembership``: a member is a session in the coordination group.

``join`` opens a session (role ``member``) whose session timeout is the lease TTL and
returns once a rebalance admitted it; the broker's group coordinator keeps it alive with
heartbeats and expires it when they stop. The live set is the last completed rebalance
(every member receives it from the group leader's assignor; observers read it with
DescribeGroups), minus the sessions that have left since.

Presence only: a member's load goes to ``KafkaLoadReports`` (``_reports``), never into the
group (Kafka only takes new JoinGroup metadata on a rejoin, a rebalance of the whole group).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from adapters.kafka._coord_codec import MEMBER
from adapters.kafka._coord_participant import GroupParticipant
from adapters.kafka._group import GroupSession
from core.errors import MemberExistsError
from core.model import MemberId

__all__ = ["KafkaMembership", "KafkaMembershipLease"]


class KafkaMembershipLease:
    """A joined member: one group session, kept alive by the adapter's task group."""

    def __init__(self, session: GroupSession) -> None:
        self._session = session
        self._left = False

    @property
    def member_id(self) -> MemberId:
        return self._session.assignor.member_id

    @property
    def incarnation(self) -> str:
        """Tells this session apart from any other of the same member id (its seat's ``inc``)."""
        return self._session.assignor.incarnation

    @property
    def kafka_member_id(self) -> str:
        """Kafka's member id of the session (what the broker expires or removes)."""
        return self._session.kafka_member_id

    @property
    def lost_reason(self) -> str:
        return self._session.lost_reason or "not renewed before its deadline"

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._left or self._session.is_lost(margin)

    async def wait_lost(self) -> None:
        await self._session.wait_lost()

    def pause_renewal(self) -> None:
        """Fault injection for tests: stop heartbeating, as a paused process would."""
        self._session.pause()

    async def leave(self) -> None:
        """Leave the group now: the others rebalance without this member at once (far
        sooner than the TTL). Idempotent."""
        if self._left:
            return
        self._left = True
        await self._session.leave()


class KafkaMembership(GroupParticipant):
    """The ``Membership`` port on a Kafka consumer group. Use as ``async with``.

    Every method raises ``StoreUnavailableError`` when Kafka does not answer in time.
    """

    async def join(self, member_id: MemberId, ttl: float) -> KafkaMembershipLease:
        """Join the group as ``member_id`` with a session of ``ttl`` seconds; return once a
        rebalance admitted it. Raises ``MemberExistsError`` when a live member already has
        this id (seen before joining, or refused by the group leader's assignor)."""
        await self.refresh()
        if member_id in self._live():
            raise MemberExistsError(f"member {member_id!r} is already live in the group")
        session = self.new_session(MEMBER, member_id, ttl)
        await self.start_session(session)
        broadcast = session.broadcast
        if broadcast is not None and session.kafka_member_id in broadcast.rejected:
            await session.leave()
            raise MemberExistsError(f"member {member_id!r} is already live in the group")
        return KafkaMembershipLease(session)

    async def members(self) -> frozenset[MemberId]:
        await self.refresh()
        return self._live()

    async def watch(self) -> AsyncIterator[frozenset[MemberId]]:
        """The live member set now and after every join, leave and expiry. Survives broker
        restarts (it keeps polling until the broker answers again)."""
        with self.watching():
            await self.refresh_until_answered()
            last: frozenset[MemberId] | None = None
            while True:
                changed = self.changes.event()
                members = self._live()
                if members != last:
                    last = members
                    yield members
                await changed.wait()

    def _live(self) -> frozenset[MemberId]:
        current = self.view.current()
        return frozenset() if current is None else frozenset(current.members)
