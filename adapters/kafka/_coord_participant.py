"""``GroupParticipant``: an adapter that opens sessions in the group and observes it.

Shared by ``KafkaMembership`` (member sessions) and ``KafkaElection`` (candidate
sessions): it starts sessions in the adapter's task group, feeds their broadcasts and
DescribeGroups snapshots into one ``GroupView``, polls DescribeGroups while somebody
watches, and — when one of its sessions was the group leader and its assignor replaced
the shoal leader — appends ``depose`` to the coordination log, so a leader whose session
expired is fenced even when no other candidate takes over.
"""

from __future__ import annotations

import logging
import uuid

import anyio

from adapters._backoff import Backoff
from adapters._lease import check_ttl
from adapters.kafka._assignor import ShoalAssignor
from adapters.kafka._coord_base import KafkaCoordinationAdapter
from adapters.kafka._coord_codec import Role
from adapters.kafka._coord_log import CoordLog
from adapters.kafka._coord_view import GroupView, describe_group
from adapters.kafka._group import GroupSession
from adapters.kafka._settings import KafkaSettings
from core.errors import ShoalError, StoreUnavailableError
from core.model import MemberId

__all__ = ["GroupParticipant"]

_log = logging.getLogger("shoal.adapters.kafka.coord")


class GroupParticipant(KafkaCoordinationAdapter):
    _tail_log = False  # does this adapter replay the coordination log?

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        observe_interval: float = 0.5,
    ) -> None:
        super().__init__(settings, observe_interval=observe_interval)
        self.view = GroupView()
        self._sessions: set[GroupSession] = set()
        self._watchers = 0
        self._polling = False
        self.log = CoordLog(
            self.settings, self.names.log_topic, tail=self._tail_log, on_change=self.changes.notify
        )

    async def _open(self) -> None:
        await self.log.start(self.tasks)

    async def _close(self) -> None:
        try:
            async with anyio.create_task_group() as leaving:
                for session in list(self._sessions):
                    leaving.start_soon(session.leave)
        finally:
            await self.log.stop()

    # --- sessions ------------------------------------------------------------------------

    def new_session(self, role: Role, member_id: MemberId, ttl: float) -> GroupSession:
        check_ttl(ttl)
        log_state = self.log.state
        assignor = ShoalAssignor(
            topic=self.names.coord_topic,
            role=role,
            member_id=member_id,
            incarnation=uuid.uuid4().hex,
            log_term=lambda: log_state.model.max_term,
        )
        return GroupSession(
            settings=self.settings,
            group_id=self.names.group_id,
            assignor=assignor,
            session_timeout=self.session_timeout(ttl),
            lease_ttl=ttl,
            heartbeat_interval=self.heartbeat_interval(ttl),
            on_change=self._on_session,
        )

    async def start_session(self, session: GroupSession) -> None:
        """Run ``session`` in this adapter's task group and wait for its first rebalance,
        within ``request_timeout`` plus the lease TTL. Raises ``StoreUnavailableError``
        (the session is left) when it did not complete in time or was lost before."""
        self._sessions.add(session)
        try:
            await self.tasks.start(self._run_session, session)
            bound = self.settings.request_timeout + session.rebalance_timeout
            with anyio.fail_after(bound):
                await session.wait_synced()
        except TimeoutError as exc:
            await session.leave()
            raise StoreUnavailableError(
                f"Kafka: no rebalance of group {self.names.group_id} completed within {bound:g} s"
            ) from exc
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.leave()
            raise
        if session.broadcast is None:
            await session.leave()
            raise StoreUnavailableError(
                f"Kafka: session in group {self.names.group_id} lost before it joined: "
                f"{session.lost_reason}"
            )

    async def _run_session(
        self, session: GroupSession, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        try:
            await session.run(task_status=task_status)
        finally:
            self._sessions.discard(session)

    def _on_session(self, session: GroupSession) -> None:
        self.view.offer(session.broadcast, session.broadcast_at)
        term, session.deposed_term = session.deposed_term, None
        if term is not None and self._task_group is not None:
            self._task_group.start_soon(self._post_depose, term)
        self.changes.notify()

    async def _post_depose(self, term: int) -> None:
        try:
            await self.log.post("depose", term=term)
        except ShoalError as exc:
            _log.warning("could not record that term %d ended: %s", term, exc)

    # --- observing ---------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the group now (DescribeGroups). Raises ``StoreUnavailableError``."""
        snapshot = await describe_group(
            self.admin, self.names.group_id, self.settings.request_timeout
        )
        self.view.observe(snapshot)
        self.changes.notify()

    async def refresh_until_answered(self) -> None:
        """``refresh``, retried until the broker answers (a watch survives outages)."""
        backoff = Backoff(self.settings.retry_backoff, 2.0)
        while True:
            try:
                await self.refresh()
                return
            except StoreUnavailableError as exc:
                _log.info("group %s unreadable, retrying: %s", self.names.group_id, exc)
                await backoff.sleep()

    def watching(self) -> _Watching:
        return _Watching(self)

    async def _poll(self) -> None:
        try:
            while self._watchers > 0:
                await anyio.sleep(self.observe_interval)
                try:
                    await self.refresh()
                except StoreUnavailableError as exc:
                    _log.debug("group %s unreadable: %s", self.names.group_id, exc)
        finally:
            self._polling = False


class _Watching:
    """Keeps the DescribeGroups poller running while at least one watch is open."""

    def __init__(self, participant: GroupParticipant) -> None:
        self._participant = participant

    def __enter__(self) -> None:
        p = self._participant
        p._watchers += 1
        if not p._polling:
            p._polling = True
            p.tasks.start_soon(p._poll)

    def __exit__(self, *_: object) -> None:
        self._participant._watchers -= 1
