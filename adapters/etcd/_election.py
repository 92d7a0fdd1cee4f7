"""``EtcdElection``: the ``leader`` key, created by txn on the candidate's own lease.

``if create_revision(leader) == 0 then put(leader, id, lease)``: the winner's term (the
fencing token) is the create revision of its leader key, which only ever grows. Losers
watch the key and try again once it is deleted (resigned, revoked or expired).
"""

from __future__ import annotations

import logging
from contextlib import aclosing

import anyio

from adapters._lease import LeaderOnLease
from adapters.etcd._base import EtcdAdapter
from adapters.etcd._client import EtcdClient
from adapters.etcd._lease import Lease
from adapters.etcd._watch import watch_snapshots
from core.errors import LeaseLostError, ShoalError
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["EtcdElection", "EtcdLeadership"]

_log = logging.getLogger(__name__)


class EtcdLeadership(LeaderOnLease):
    """Won leadership. Lost when its lease is lost or its leader key is deleted or replaced."""

    def __init__(
        self, election: EtcdElection, lease: Lease, leader_id: MemberId, key: str, term: int
    ) -> None:
        super().__init__(lease, leader_id, term)
        self._election = election
        self._etcd_lease = lease
        self._key = key
        self._lost = anyio.Event()
        self._reason = ""
        self._resigned = False

    @property
    def lease_id(self) -> int:
        """etcd's id of the lease the leader key is attached to."""
        return self._etcd_lease.id

    @property
    def lost_reason(self) -> str:
        return self._reason or super().lost_reason

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or super().is_lost(margin)

    async def wait_lost(self) -> None:
        await self._lost.wait()

    async def resign(self) -> None:
        """Delete the leader key if it is still ours and revoke the lease. Idempotent.

        Raises ``StoreUnavailableError`` if etcd did not confirm (the key then goes when
        the lease expires); calling again retries.
        """
        if self._resigned:
            return
        self._lose("resigned")
        self._lease.stop()  # even if etcd is away now, the key goes with the lease's TTL
        client = self._election.client
        try:
            await client.txn(
                [client.created_at(self._key, self.term)], [client.delete_op(self._key)]
            )
        finally:
            await self._etcd_lease.revoke()
        self._resigned = True

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()
            _log.info("leadership of %s (term %d) lost: %s", self.leader_id, self.term, reason)

    async def monitor(self) -> None:
        """Run until the leadership is lost: lease lost, or leader key deleted or replaced."""
        client = self._election.client
        reason = ""
        async with anyio.create_task_group() as tasks:

            async def on_lease_lost() -> None:
                await self._lease.wait_lost()
                tasks.cancel_scope.cancel()

            tasks.start_soon(on_lease_lost)
            try:
                async with aclosing(watch_snapshots(client, self._key, prefix=False)) as snaps:
                    async for snapshot in snaps:
                        entry = snapshot.get(self._key)
                        if entry is None:
                            reason = "the leader key was deleted"
                            break
                        if entry.create_revision != self.term:
                            reason = f"the leader key was replaced (term {entry.create_revision})"
                            break
            except ShoalError as exc:
                reason = f"cannot watch the leader key: {exc}"
            tasks.cancel_scope.cancel()
        self._lose(reason or f"lease lost: {self._lease.lost_reason}")
        if not self._lease.is_lost():
            await self._election.drop_lease(self._etcd_lease)


class EtcdElection(EtcdAdapter):
    """The ``Election`` port on etcd. Use as ``async with EtcdElection(settings) as e``."""

    @property
    def client(self) -> EtcdClient:
        return self._client

    async def campaign(self, candidate_id: MemberId, ttl: float) -> EtcdLeadership:
        """Block until ``candidate_id`` holds the leader key; cancelling withdraws (the
        candidate's lease is revoked). Raises ``StoreUnavailableError`` when etcd does not
        answer a grant or the txn; waiting for the key to go survives etcd restarts."""
        key = self._keys.leader
        client = self._client
        lease = await self._new_lease(ttl)
        try:
            while True:
                if lease.is_lost():
                    await self.drop_lease(lease)
                    lease = await self._new_lease(ttl)
                try:
                    result = await client.txn(
                        [client.created_at(key, 0)],
                        [client.put_op(key, candidate_id.encode(), lease.id)],
                        [client.get_op(key)],
                    )
                except LeaseLostError as exc:
                    lease.lose(str(exc))
                    continue
                if result.succeeded:
                    break
                await self._wait_vacant(key, lease)
        except BaseException:
            await self.drop_lease(lease)
            raise
        leadership = EtcdLeadership(self, lease, candidate_id, key, result.revision)
        self._tasks.start_soon(leadership.monitor)
        _log.info("%s leads with term %d", candidate_id, result.revision)
        return leadership

    async def leader(self) -> LeaderInfo | None:
        entry, _ = await self._client.get(self._keys.leader)
        if entry is None:
            return None
        return LeaderInfo(leader_id=entry.value.decode(), term=entry.create_revision)

    async def drop_lease(self, lease: Lease) -> None:
        await self._drop_lease(lease)

    async def _wait_vacant(self, key: str, lease: Lease) -> None:
        """Return once ``key`` is absent, or ``lease`` is lost (to be granted anew)."""
        async with anyio.create_task_group() as tasks:

            async def on_lease_lost() -> None:
                await lease.wait_lost()
                tasks.cancel_scope.cancel()

            tasks.start_soon(on_lease_lost)
            async with aclosing(watch_snapshots(self._client, key, prefix=False)) as snaps:
                async for snapshot in snaps:
                    if key not in snapshot:
                        break
            tasks.cancel_scope.cancel()
