"""``InMemoryCoordination``: one process's stand-in for etcd, shared by the memory adapters.

It keeps what etcd keeps (members on leases, the leader key with its term, the assignment,
holds, projects) and a revision counter that grows on every write, so terms and hold
versions behave as etcd's create and mod revisions. Time is the event loop's clock.

Fault hooks for tests: ``expire(owner_id)`` ends every lease of a member or leader as if
its TTL ran out; ``set_available(False)`` makes every call raise ``StoreUnavailableError``
and every renewal fail (leases are then lost at their deadline) until set back.
"""

from __future__ import annotations

import logging
import math
from collections import deque

import anyio
from anyio.abc import TaskStatus

from core.coordination import Applied, CoordinationState
from core.errors import StoreUnavailableError
from core.model import Assignment, MemberId

__all__ = ["InMemoryCoordination", "MemoryLease"]

_log = logging.getLogger(__name__)
_HISTORY = 256  # assignments kept for watchers that fall behind


class MemoryLease:
    """A lease in ``InMemoryCoordination``: renewed by ``keep_alive`` every ttl/2."""

    def __init__(self, state: InMemoryCoordination, owner_id: MemberId, ttl: float) -> None:
        if not (ttl > 0 and math.isfinite(ttl)):
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        self._state = state
        self.owner_id = owner_id
        self.ttl = ttl
        self.deadline = anyio.current_time() + ttl
        self._lost = anyio.Event()
        self.reason = ""
        self._paused = False
        self._scope: anyio.CancelScope | None = None

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or anyio.current_time() + margin >= self.deadline

    async def wait_lost(self) -> None:
        await self._lost.wait()

    def pause_renewal(self) -> None:
        """Stop renewing, as a paused process would; the lease expires at its deadline."""
        self._paused = True

    def end(self, reason: str) -> None:
        """Mark lost, stop renewing and drop whatever the lease holds in the state."""
        if not self._lost.is_set():
            self.reason = reason
            self._lost.set()
            self._state.drop_lease(self)
        if self._scope is not None:
            self._scope.cancel()

    async def keep_alive(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as self._scope:
            task_status.started()
            interval = min(self.ttl / 2, 5.0)
            next_at = anyio.current_time() + interval
            while not self._lost.is_set():
                wake = self.deadline if self._paused else min(next_at, self.deadline)
                await anyio.sleep(max(0.0, wake - anyio.current_time()))
                now = anyio.current_time()
                if now >= self.deadline:
                    self.end(f"not renewed within its {self.ttl:g} s TTL")
                elif not self._paused and self._state.available:
                    self.deadline = now + self.ttl
                    next_at = now + interval
                elif not self._paused:
                    next_at = now + min(interval, 0.05)


class InMemoryCoordination:
    """The state every in-memory coordination adapter of one "cluster" shares.

    Create one per test (or per ``shoal up --coordination memory``) and hand it to
    ``InMemoryMembership``, ``InMemoryElection`` and ``InMemoryAssignmentStore``. The
    rules are ``core.coordination``'s: this class only adds what a store adds to them
    (a revision counter for versions and terms, leases with deadlines, change events).
    """

    def __init__(self) -> None:
        self.revision = 0
        self.model = CoordinationState()
        self.history: deque[Assignment] = deque(maxlen=_HISTORY)
        self.member_leases: dict[MemberId, MemoryLease] = {}
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
            lease.end("expired (InMemoryCoordination.expire)")

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
        """Delete what ``lease`` holds (its member record, the leader key)."""
        for member_id, held in list(self.member_leases.items()):
            if held is lease:
                del self.member_leases[member_id]
                self.apply(self.model.leave(member_id))
        if self.leader_lease is lease:
            self.leader_lease = None
            if self.model.leader is not None:
                self.apply(self.model.vacate(self.model.leader.term))
