"""``InMemoryCoordination``: one process's stand-in for etcd, shared by the memory adapters.

It keeps what etcd keeps (members and their load reports on leases, the leader key with
its term, the assignment, holds, projects) and a revision counter that grows on every
write, so terms and hold versions behave as etcd's create and mod revisions. Leases keep
time as every store's lease does (``adapters._lease``).

Fault hooks for tests: ``expire(owner_id)`` ends every lease of a member or leader as if
its TTL ran out; ``set_available(False)`` makes every call raise ``StoreUnavailableError``
and every renewal fail (leases are then lost at their deadline) until set back.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import anyio
from anyio.lowlevel import checkpoint

from adapters._lease import RenewedLease
from core.coordination import Applied, CoordinationState
from core.errors import StoreUnavailableError
from core.model import Assignment, MemberId, MemberStats

__all__ = ["InMemoryCoordination", "MemoryLease"]

_log = logging.getLogger(__name__)
_HISTORY = 256  # assignments kept for watchers that fall behind


class MemoryLease(RenewedLease):
    """A lease in ``InMemoryCoordination``: renewed every ttl/2 (at most 5 s) while the
    store is available; losing it drops what it holds from the state."""

    def __init__(self, state: InMemoryCoordination, owner_id: MemberId, ttl: float) -> None:
        super().__init__(
            ttl=ttl,
            granted_at=time.monotonic(),
            max_renew_interval=5.0,
            retry_interval=0.05,
            what=f"in-memory {owner_id}",
        )
        self._state = state
        self.owner_id = owner_id

    def lose(self, reason: str) -> None:
        super().lose(reason)
        self._state.drop_lease(self)

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the store's time)
        await checkpoint()
        self._state.check("lease renewal")


class InMemoryCoordination:
    """The state every in-memory coordination adapter of one "cluster" shares.

    Create one per test and hand it to ``InMemoryMembership``, ``InMemoryElection`` and
    ``InMemoryAssignmentStore``. The rules are ``core.coordination``'s, applied as they are
    (the model as a store, with the fault hooks above; production builds no port from it:
    its in-process ports are ``adapters.coordination``'s over ``InMemoryCoordinationStore``).
    This class only adds what a store adds to the rules (a revision counter for versions
    and terms, leases with deadlines, change events).
    """

    def __init__(self) -> None:
        self.revision = 0
        self.model = CoordinationState()
        self.history: deque[Assignment] = deque(maxlen=_HISTORY)
        self.member_leases: dict[MemberId, MemoryLease] = {}
        self.reports: dict[MemberId, MemberStats] = {}
        self.leader_lease: MemoryLease | None = None
        self.available = True
        self._changed: anyio.Event | None = None

    # --- test hooks ----------------------------------------------------------------------

    def expire(self, owner_id: MemberId) -> None:
        """End every lease of ``owner_id`` (its member and its leadership) as a TTL would."""
        leases = [lease for lease in self.member_leases.values() if lease.owner_id == owner_id]
        if self.leader_lease is not None and self.leader_lease.owner_id == owner_id:
            leases.append(self.leader_lease)
        for lease in leases:
            lease.lose("expired (InMemoryCoordination.expire)")

    def set_available(self, available: bool) -> None:
        """Simulate an outage: while False every call raises ``StoreUnavailableError``."""
        self.available = available
        self.notify()

    # --- for the adapters ----------------------------------------------------------------

    def check(self, what: str) -> None:
        if not self.available:
            raise StoreUnavailableError(f"in-memory store unavailable ({what})")

    def apply(self, applied: Applied) -> bool:
        """Keep an accepted write's state (one revision further, watchers woken)."""
        if applied.accepted and applied.state is not self.model:
            self.model = applied.state
            self.revision += 1
            self.notify()
        return applied.accepted

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def changed(self) -> anyio.Event:
        """An event set at the next change; take it *before* reading the state."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def drop_lease(self, lease: MemoryLease) -> None:
        """Delete what ``lease`` holds (its member record and report, the leader key)."""
        for member_id, held in list(self.member_leases.items()):
            if held is lease:
                del self.member_leases[member_id]
                self.reports.pop(member_id, None)
                self.apply(self.model.leave(member_id))
        if self.leader_lease is lease:
            self.leader_lease = None
            if self.model.leader is not None:
                self.apply(self.model.vacate(self.model.leader.term))
