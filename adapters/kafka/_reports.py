"""``KafkaLoadReports``: members' load reports in the compacted topic ``shoal.{group}.stats``.

A report is one record keyed by member id whose value is the reporting session's
incarnation and the stats; compaction keeps the latest record per member id. Every reader
tails the topic into a ``StatsBook`` (one entry per member id) and shows a member's report
only while the coordination group (read with DescribeGroups, as ``KafkaMembership`` does)
seats that member with the record's incarnation. So a report goes with its member (on
leave, or when the broker expires its session) and a re-joined member shows no report
until it reports again. Records of departed members are not removed: they stay in the
topic and the books, the latest one per member id, ignored until the id reports again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from adapters._lease import reporting_lease
from adapters.kafka._coord_base import KafkaCoordinationAdapter
from adapters.kafka._coord_codec import Broadcast, decode_stats_record, encode_stats_record
from adapters.kafka._coord_tail import Appender, TopicTail
from adapters.kafka._coord_view import GroupView, describe_group
from adapters.kafka._membership import KafkaMembershipLease
from adapters.kafka._settings import KafkaSettings
from core.model import MemberId, MemberStats
from core.ports import MembershipLease

__all__ = ["KafkaLoadReports", "StatsBook"]


@dataclass(frozen=True, slots=True)
class _Report:
    offset: int
    inc: str
    stats: MemberStats


class StatsBook:
    """The latest stats record per member id (from the topic, and this process's own)."""

    def __init__(self) -> None:
        self._by_id: dict[MemberId, _Report] = {}

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        member_id = key.decode()
        known = self._by_id.get(member_id)
        if known is not None and offset < known.offset:
            return  # this process already applied a later report of its own
        if value is None:  # a tombstone (compaction keeps deletes written by older versions)
            self._by_id.pop(member_id, None)
            return
        inc, stats = decode_stats_record(value)
        self._by_id[member_id] = _Report(offset, inc, stats)

    def reports(self, broadcast: Broadcast | None) -> dict[MemberId, MemberStats]:
        """The reports of the members ``broadcast`` seats, by the seated incarnation."""
        if broadcast is None:
            return {}
        reports: dict[MemberId, MemberStats] = {}
        for member_id, seat in sorted(broadcast.members.items()):
            known = self._by_id.get(member_id)
            if known is not None and known.inc == seat.inc:
                reports[member_id] = known.stats
        return reports


class KafkaLoadReports(KafkaCoordinationAdapter):
    """The ``LoadReports`` port on Kafka, for ``KafkaMembership``'s leases. Use as
    ``async with``. Every method raises ``StoreUnavailableError`` when Kafka does not
    answer in time."""

    def __init__(self, settings: KafkaSettings | None = None) -> None:
        super().__init__(settings)
        self.book = StatsBook()
        self.view = GroupView()
        self._out = Appender(self.settings, self.names.stats_topic)
        self._in = TopicTail(self.settings, self.names.stats_topic, self.book.apply)

    async def _open(self) -> None:
        await self._out.start()
        await self._in.start(self.tasks)
        await self._in.sync()

    async def _close(self) -> None:
        try:
            await self._in.stop()
        finally:
            await self._out.stop()

    async def report(self, lease: MembershipLease, stats: MemberStats) -> None:
        """Append ``stats`` as the latest report of the lease's member and incarnation.
        ``LeaseLostError`` when the lease is lost (nothing is written then); a record a
        lease wrote as it was being lost names a gone incarnation, which no reader shows."""
        member = reporting_lease(lease, KafkaMembershipLease)
        key = member.member_id.encode()
        value = encode_stats_record(member.incarnation, stats)
        offset = await self._out.append(key, value)
        self.book.apply(offset, key, value)

    async def reports(self) -> Mapping[MemberId, MemberStats]:
        await self._in.sync()
        await self._refresh()
        return self.book.reports(self.view.current())

    async def _refresh(self) -> None:
        """Read the group; until a first broadcast is known, wait out a rebalance (which
        DescribeGroups shows without one) for up to ``request_timeout``."""
        bound = self.settings.request_timeout
        group_id = self.names.group_id
        give_up = time.monotonic() + bound
        while True:
            snapshot = await describe_group(self.admin, group_id, bound)
            self.view.observe(snapshot)
            known = self.view.current() is not None
            if known or not snapshot.rebalancing or time.monotonic() >= give_up:
                return
            await anyio.sleep(self.settings.retry_backoff)
