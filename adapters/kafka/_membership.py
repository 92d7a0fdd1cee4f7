"""``KafkaMembership``: a member is a session in the coordination group.

``join`` opens a session (role ``member``) whose session timeout is the lease TTL and
returns once a rebalance admitted it; the broker's group coordinator keeps it alive with
heartbeats and expires it when they stop. The live set is the last completed rebalance
(every member receives it from the group leader's assignor; observers read it with
DescribeGroups), minus the sessions that have left since.

Stats: the JoinGroup metadata carries a member's stats at join time, but Kafka only takes
new metadata on a rejoin, and a rejoin is a rebalance of the whole group. So ``update``
writes the stats to the compacted topic ``shoal.{group}.stats`` (key: member id, value:
incarnation and stats) instead, and readers merge it by incarnation.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping

from adapters.kafka._coord_codec import MEMBER, encode_stats_record
from adapters.kafka._coord_participant import GroupParticipant
from adapters.kafka._coord_tail import Appender, TopicTail
from adapters.kafka._coord_view import StatsBook
from adapters.kafka._group import GroupSession
from adapters.kafka._settings import KafkaSettings
from core.assignment import DEFAULT_STRATEGY, AssignmentOptions, Strategy
from core.errors import LeaseLostError, MemberExistsError, ShoalError
from core.model import MemberId, MemberStats

__all__ = ["KafkaMembership", "KafkaMembershipLease"]

_log = logging.getLogger("shoal.adapters.kafka.coord")


class KafkaMembershipLease:
    """A joined member: one group session, kept alive by the adapter's task group."""

    def __init__(self, membership: KafkaMembership, session: GroupSession) -> None:
        self._membership = membership
        self._session = session
        self._left = False

    @property
    def member_id(self) -> MemberId:
        return self._session.assignor.member_id

    @property
    def incarnation(self) -> str:
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

    async def update(self, stats: MemberStats) -> None:
        """Publish ``stats`` to the stats topic. Raises ``LeaseLostError`` when the lease is
        lost, ``StoreUnavailableError`` when Kafka did not confirm in time."""
        if self.is_lost():
            raise LeaseLostError(f"member {self.member_id}: lease lost ({self.lost_reason})")
        self._session.assignor.stats = stats  # a rejoin carries them too
        await self._membership.put_stats(self.member_id, self.incarnation, stats)

    async def leave(self) -> None:
        """Leave the group now: the others rebalance without this member at once (far
        sooner than the TTL). Idempotent. The stats record is removed best effort."""
        if self._left:
            return
        self._left = True
        await self._session.leave()
        await self._membership.drop_stats(self.member_id, self.incarnation)


class KafkaMembership(GroupParticipant):
    """The ``Membership`` port on a Kafka consumer group. Use as ``async with``.

    Every method raises ``StoreUnavailableError`` when Kafka does not answer in time.
    """

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        strategy: str | Strategy = DEFAULT_STRATEGY,
        options: AssignmentOptions | None = None,
        observe_interval: float = 0.5,
    ) -> None:
        super().__init__(
            settings, strategy=strategy, options=options, observe_interval=observe_interval
        )
        self.book = StatsBook()
        self._stats_out = Appender(self.settings, self.names.stats_topic)
        self._stats_in = TopicTail(
            self.settings, self.names.stats_topic, self.book.apply, self.changes.notify
        )

    async def _open(self) -> None:
        await super()._open()
        await self._stats_out.start()
        await self._stats_in.start(self.tasks)
        await self._stats_in.sync()

    async def _close(self) -> None:
        try:
            await super()._close()
        finally:
            try:
                await self._stats_in.stop()
            finally:
                await self._stats_out.stop()

    async def join(
        self, member_id: MemberId, stats: MemberStats, ttl: float
    ) -> KafkaMembershipLease:
        """Join the group as ``member_id`` with a session of ``ttl`` seconds; return once a
        rebalance admitted it. Raises ``MemberExistsError`` when a live member already has
        this id (seen before joining, or refused by the group leader's assignor)."""
        await self.refresh()
        if member_id in self.book.members(self.view.current()):
            raise MemberExistsError(f"member {member_id!r} is already live in the group")
        session = self.new_session(MEMBER, member_id, ttl, stats)
        await self.start_session(session)
        broadcast = session.broadcast
        if broadcast is not None and session.kafka_member_id in broadcast.rejected:
            await session.leave()
            raise MemberExistsError(f"member {member_id!r} is already live in the group")
        return KafkaMembershipLease(self, session)

    async def members(self) -> Mapping[MemberId, MemberStats]:
        await self.refresh()
        return self.book.members(self.view.current())

    async def watch(self) -> AsyncIterator[Mapping[MemberId, MemberStats]]:
        """The live member map now and after every change (join, leave, expiry, stats).
        Survives broker restarts (it keeps polling until the broker answers again)."""
        with self.watching():
            await self.refresh_until_answered()
            last: dict[MemberId, MemberStats] | None = None
            while True:
                changed = self.changes.event()
                members = dict(self.book.members(self.view.current()))
                if members != last:
                    last = members
                    yield dict(members)
                await changed.wait()

    # --- stats ---------------------------------------------------------------------------

    async def put_stats(self, member_id: MemberId, inc: str, stats: MemberStats) -> None:
        key, value = member_id.encode(), encode_stats_record(inc, stats)
        offset = await self._stats_out.append(key, value)
        self.book.apply(offset, key, value)
        self.changes.notify()

    async def drop_stats(self, member_id: MemberId, inc: str) -> None:
        """Tombstone the member's stats record, unless another incarnation wrote since."""
        if self.book.stats_of(member_id, inc, default=_ABSENT) is _ABSENT:
            return
        try:
            await self._stats_out.append(member_id.encode(), None)
        except ShoalError as exc:
            _log.info("stats of %s not removed (compaction keeps them): %s", member_id, exc)


_ABSENT = MemberStats(last_message_id="\0absent")
