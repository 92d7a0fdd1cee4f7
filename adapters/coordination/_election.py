"""``StoreElection``: a candidate creates ``leader/office`` on its lease (create-if-absent;
the create's revision is the term, so terms only grow) and takes office by stamping its
term on the assignment record (``CoordinationState.lead``). The stamp is what fences a
deposed leader: its publish read the record before the stamp, so its write finds the
revision moved, reads again and is refused by the model."""

from __future__ import annotations

import secrets
from dataclasses import replace

from adapters._lease import LeaderOnLease
from adapters.coordination._base import (
    ASSIGNMENT,
    LEADER,
    StoreAdapter,
    StoreLease,
    parent,
    put,
    snapshots,
)
from adapters.coordination._records import office_holder, office_value, read_record
from core.coordination import Leader
from core.errors import FencedError, RevisionConflictError
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["StoreElection", "StoreLeadership"]


class StoreLeadership(LeaderOnLease):
    """The leadership: the leader key lives on ``lease``, renewed by the adapter."""

    def __init__(self, lease: StoreLease, leader_id: MemberId, term: int, incarnation: str) -> None:
        super().__init__(lease, leader_id, term)
        self.store_lease = lease
        self._token = incarnation

    def _incarnation(self) -> str:
        """This campaign's random token: a store that lost writes may hand one term out
        twice (Redis without persistence); the token still tells the two apart."""
        return self._token

    async def resign(self) -> None:
        """Revoke the lease: the leader key goes at once and the next candidate takes
        office. Idempotent."""
        await self.store_lease.revoke()


class StoreElection(StoreAdapter):
    """The ``Election`` port over a ``CoordinationStore``."""

    async def campaign(self, candidate_id: MemberId, ttl: float) -> StoreLeadership:
        """Wait until the office is free, take it and stamp the term; a cancelled campaign
        revokes its lease, so it never leads."""
        lease, incarnation = await self._new_lease(ttl), secrets.token_hex(8)
        office = office_value(candidate_id, incarnation)
        try:
            while True:
                try:
                    term = await self.store.create(LEADER, office, lease=lease.id)
                    break
                except RevisionConflictError:
                    await self._until_vacant()
            await self._stamp(Leader(candidate_id, term, incarnation))
        except BaseException:
            await self._drop_lease(lease)
            raise
        self._guard(lease, LEADER, term)
        return StoreLeadership(lease, candidate_id, term, incarnation)

    async def leader(self) -> LeaderInfo | None:
        office = await self.store.get(LEADER)
        return (
            None if office is None else LeaderInfo(office_holder(office).leader_id, office.revision)
        )

    async def _until_vacant(self) -> None:
        async for view, _ in snapshots(self.store, parent(LEADER)):
            if LEADER not in view:
                return

    async def _stamp(self, leader: Leader) -> None:
        """Record that ``leader``'s term took office: after this no publish read before it
        can be written."""
        while True:
            record, current = await read_record(self.store)
            applied = record.state(leader=None).lead(leader)
            if not applied.accepted:
                raise FencedError(f"term {leader.term} cannot take office: {applied.reason}")
            try:
                await put(
                    self.store, ASSIGNMENT, replace(record, stamp=leader.term).encode(), current
                )
                return
            except RevisionConflictError:
                continue
