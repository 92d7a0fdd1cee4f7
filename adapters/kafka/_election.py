"""``KafkaElection``: candidates are sessions in the coordination group; the group leader's
assignor names the shoal leader among them; the winner takes office in the coordination log.

``campaign`` opens a session (role ``candidate``, session timeout = the TTL) and waits for
a broadcast that names it. The assignor keeps the incumbent and otherwise elects the
candidate seen longest, with a term above every term the sessions know (the Kafka
generation normally). The winner then appends ``lead {term}`` to the log and returns once
the log accepted it: from then on the store accepts only this term's publishes, and a
deposed leader's late ``lead`` is refused (its term is lower). A rejected ``lead`` (the
log already had a higher term, e.g. Kafka forgot the group) makes the session rejoin with
the log's term in its metadata, so the next broadcast carries a higher one.

Leadership is lost when the session is lost (expired, evicted, paused past its TTL), when a
later broadcast names another leader, or when the log shows another term; the loser then
appends ``depose`` and leaves the group. ``resign`` does the same at once.

Why not the group leader itself (the member Kafka picks): shoal's leader is the leader
*service*, a process that campaigns; handlers only join. Kafka's own pick is whichever
session joined first, often a handler, so the assignor chooses among candidates instead.
"""

from __future__ import annotations

import logging
import time

import anyio

from adapters.kafka._coord_codec import CANDIDATE, Broadcast
from adapters.kafka._coord_participant import GroupParticipant
from adapters.kafka._group import GroupSession
from core.coordination import Leader, LeaderSeat
from core.errors import ShoalError
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["KafkaElection", "KafkaLeadership"]

_log = logging.getLogger("shoal.adapters.kafka.coord")


class KafkaLeadership:
    """Won leadership: a candidate session the group names and the log accepted."""

    def __init__(self, election: KafkaElection, session: GroupSession, term: int) -> None:
        self._election = election
        self._session = session
        self._record = Leader(session.assignor.member_id, term, session.assignor.incarnation)
        self._lost = anyio.Event()
        self._reason = ""
        self._resigned = False

    @property
    def term(self) -> int:
        return self._record.term

    @property
    def fence(self) -> Leader:
        return self._record

    @property
    def leader_id(self) -> MemberId:
        return self._record.leader_id

    @property
    def kafka_member_id(self) -> str:
        return self._session.kafka_member_id

    @property
    def lost_reason(self) -> str:
        return self._reason or self._session.lost_reason

    def is_lost(self) -> bool:
        return self._lost.is_set() or self._session.is_lost()

    async def wait_lost(self) -> None:
        await self._lost.wait()

    def pause_renewal(self) -> None:
        """Fault injection for tests: stop heartbeating, as a paused process would."""
        self._session.pause()

    async def resign(self) -> None:
        """End the term in the log and leave the group, so another candidate is elected at
        once. Idempotent. Raises ``StoreUnavailableError`` if the log did not confirm (the
        session is left anyway; the next leader's term supersedes this one)."""
        if self._resigned:
            return
        self._lose("resigned")
        try:
            await self._election.log.post("depose", term=self.term)
        finally:
            await self._session.leave()
        self._resigned = True

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()
            _log.info("leadership of %s (term %d) lost: %s", self.leader_id, self.term, reason)

    def _why_lost(self) -> str:
        session = self._session
        if session.is_lost():
            return f"session lost: {session.lost_reason or 'not renewed within its TTL'}"
        named = None if session.broadcast is None else session.broadcast.leader
        if named is None or (named.id, named.inc, named.term) != (
            self._record.leader_id,
            self._record.incarnation,
            self._record.term,
        ):
            return "the group names another leader"
        if self._election.log.state.model.leader != self._record:
            return "the log names another leader"
        return ""

    async def monitor(self) -> None:
        """Run until the leadership is lost; then end the term and leave the group."""
        election = self._election
        while not self._lost.is_set():
            changed = election.changes.event()
            reason = self._why_lost()
            if reason:
                self._lose(reason)
                break
            # the deadline passes without any event: wake up for it
            until_deadline = self._session.deadline - time.monotonic()
            with anyio.move_on_after(min(max(until_deadline, 0.05), 1.0)):
                await changed.wait()
        if self._resigned:
            return
        with anyio.CancelScope(shield=True):
            if election.log.state.model.leader == self._record:
                try:
                    await election.log.post("depose", term=self.term)
                except ShoalError as exc:
                    _log.warning("term %d not ended in the log: %s", self.term, exc)
            await self._session.leave()


class KafkaElection(GroupParticipant):
    """The ``Election`` port on a Kafka consumer group. Use as ``async with``."""

    _tail_log = True

    async def campaign(self, candidate_id: MemberId, ttl: float) -> KafkaLeadership:
        """Block until ``candidate_id`` leads; cancelling withdraws the candidacy (the
        session leaves the group). Raises ``StoreUnavailableError`` when Kafka does not
        answer; a session lost while waiting is replaced by a new one."""
        while True:
            await self.log.sync()
            session = self.new_session(CANDIDATE, candidate_id, ttl)
            await self.start_session(session)
            try:
                term = await self._await_office(session)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await session.leave()
                raise
            if term is not None:
                leadership = KafkaLeadership(self, session, term)
                self.tasks.start_soon(leadership.monitor)
                _log.info("%s leads with term %d", candidate_id, term)
                return leadership
            await session.leave()

    async def _await_office(self, session: GroupSession) -> int | None:
        """The term once the group names ``session`` and the log accepted it; None when the
        session was lost first."""
        me = (session.assignor.member_id, session.assignor.incarnation)
        refused: int | None = None
        while not session.is_lost():
            changed = self.changes.event()
            named = _named(session.broadcast)
            if named is not None and (named.id, named.inc) == me and named.term != refused:
                record = Leader(named.id, named.term, named.inc)
                if self.log.state.model.leader == record:
                    return named.term
                outcome = await self.log.request(
                    "lead", id=named.id, inc=named.inc, term=named.term
                )
                if outcome.accepted:
                    return named.term
                _log.info("term %d refused by the log (%s): rejoining", named.term, outcome.reason)
                refused = named.term
                session.request_rejoin()
                continue
            await changed.wait()
        return None

    async def leader(self) -> LeaderInfo | None:
        await self.refresh()
        broadcast = self.view.current()
        named = _named(broadcast)
        return None if named is None else LeaderInfo(named.id, named.term)


def _named(broadcast: Broadcast | None) -> LeaderSeat | None:
    return None if broadcast is None else broadcast.leader
