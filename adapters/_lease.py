"""``RenewedLease``: a lease kept alive by the client, the rule every store's lease shares.

It is renewed every ``min(ttl / 2, max_renew_interval)`` seconds, each renewal bounded by
the time left. Its *deadline* is ``core.lease.LeaseDeadline``'s: the send time of the last
successful renewal plus ``ttl``. When renewals keep failing until the deadline passes, or
the store answers that the lease is gone, the lease is lost: ``wait_lost`` returns and
renewal stops. ``is_lost`` also compares the monotonic clock with the deadline, without
any I/O, so a process resumed after a pause sees the loss before it does anything else.

A store's lease subclasses it and says how to renew (``_renew``: return normally when
renewed, raise ``LeaseLostError`` when the store says the lease is gone,
``StoreUnavailableError`` to retry), how to end it at the store once its deadline passed
(``_end_expired``, so others take over now rather than at the store's own expiry), and
optionally what else wakes the renewal loop (``_wait``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from core.coordination import Leader
from core.errors import LeaseLostError, ShoalError, StoreUnavailableError
from core.lease import LeaseDeadline
from core.model import MemberId
from core.ports import MembershipLease

__all__ = [
    "LeaderOnLease",
    "MemberOnLease",
    "OnLease",
    "RenewedLease",
    "check_ttl",
    "reporting_lease",
]

L = TypeVar("L", bound=MembershipLease)

_log = logging.getLogger(__name__)


def check_ttl(ttl: float) -> None:
    """``ValueError`` unless ``ttl`` is a positive, finite number of seconds."""
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")


class RenewedLease:
    """Run ``keep_alive`` in a task group (``task_group.start``); ``lose`` or ``stop`` it."""

    def __init__(
        self,
        *,
        ttl: float,
        granted_at: float,
        max_renew_interval: float,
        retry_interval: float,
        what: str,
    ) -> None:
        check_ttl(ttl)
        self.ttl = ttl
        self._deadline = LeaseDeadline.granted(ttl, granted_at)
        self._interval = min(ttl / 2, max_renew_interval)
        self._retry = min(retry_interval, self._interval)
        self._what = what
        self._lost = anyio.Event()
        self._reason = ""
        self._paused = False
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    # -- what a store's lease says -----------------------------------------------------------

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the time left)
        raise NotImplementedError

    async def _end_expired(self) -> None:
        """Best effort: end the lease at the store now that its deadline passed."""

    async def _wait(self, delay: float) -> None:
        await anyio.sleep(delay)

    # -- the lease ---------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` past which the lease may have expired at the store."""
        return self._deadline.at

    @property
    def lost_reason(self) -> str:
        return self._reason

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or self._deadline.passed(time.monotonic(), margin)

    async def wait_lost(self) -> None:
        await self._lost.wait()

    def renewed(self, sent: float) -> None:
        """Record a successful renewal (or write with a fresh TTL) sent at ``sent``."""
        if not self._lost.is_set():
            self._deadline = self._deadline.renewed(sent)

    def lose(self, reason: str) -> None:
        """Mark the lease lost (idempotent; the first reason wins) and stop renewing it."""
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()
            _log.info("lease of %s lost: %s", self._what, reason)
        self.stop()

    def pause_renewal(self) -> None:
        """Stop renewing, as a paused process would; the lease is lost at its deadline.

        A fault-injection hook for tests; production code never calls it.
        """
        self._paused = True

    def stop(self) -> None:
        """Stop renewing (the lease then expires at the store by itself). Idempotent."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def keep_alive(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew until lost or stopped; start it with ``task_group.start``."""
        with anyio.CancelScope() as self._scope:
            task_status.started()
            if not self._stopped:
                await self._renew_until_lost()

    async def _renew_until_lost(self) -> None:
        next_at = self._deadline.at - self.ttl + self._interval
        failures = 0
        while True:
            deadline = self._deadline.at
            wake = deadline if self._paused else min(next_at, deadline)
            delay = max(0.0, wake - time.monotonic())
            if self._paused:
                await anyio.sleep(delay)
            else:
                await self._wait(delay)
            sent = time.monotonic()
            if self._deadline.passed(sent):
                failed = f" ({failures} renewal(s) failed)" if failures else ""
                self.lose(f"not renewed within its {self.ttl:g} s TTL{failed}")
                if not self._paused:
                    with anyio.CancelScope(shield=True), contextlib.suppress(ShoalError):
                        await self._end_expired()
                return
            if self._paused:
                continue
            try:
                await self._renew(self._deadline.at - sent)
            except LeaseLostError as exc:
                self.lose(str(exc))
                return
            except StoreUnavailableError as exc:
                failures += 1
                if failures == 1:
                    _log.warning("lease of %s: renewal failed, retrying: %s", self._what, exc)
                next_at = time.monotonic() + self._retry
                continue
            if failures:
                _log.info("lease of %s renewed again after %d failure(s)", self._what, failures)
            failures = 0
            self.renewed(sent)
            next_at = sent + self._interval


class OnLease:
    """A member's or a leader's handle on the lease it lives on (``MembershipLease`` and
    ``Leadership`` are both such handles): loss, its reason and the test hook delegate to
    the lease."""

    def __init__(self, lease: RenewedLease, owner_id: MemberId) -> None:
        self._lease = lease
        self._owner_id = owner_id

    @property
    def lost_reason(self) -> str:
        return self._lease.lost_reason or "not renewed before its deadline"

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lease.is_lost(margin)

    async def wait_lost(self) -> None:
        await self._lease.wait_lost()

    def pause_renewal(self) -> None:
        """Fault injection for tests: stop renewing, as a paused process would."""
        self._lease.pause_renewal()


class MemberOnLease(OnLease):
    """The ``MembershipLease`` port over a store's lease: a store says how to leave."""

    @property
    def member_id(self) -> MemberId:
        return self._owner_id

    async def leave(self) -> None:
        raise NotImplementedError


def reporting_lease(lease: MembershipLease, kind: type[L]) -> L:
    """``lease`` as the backend's own lease class, to report for its member (the
    ``LoadReports`` rule every backend shares): ``LeaseLostError`` when it is lost,
    ``TypeError`` when it is another backend's."""
    if not isinstance(lease, kind):
        raise TypeError(
            f"a {type(lease).__name__} cannot report here: this backend's leases are "
            f"{kind.__name__}"
        )
    if lease.is_lost():
        raise LeaseLostError(f"member {lease.member_id}: lease lost, nothing reported")
    return lease


class LeaderOnLease(OnLease):
    """The ``Leadership`` port over a store's lease: a store says how to resign."""

    def __init__(self, lease: RenewedLease, leader_id: MemberId, term: int) -> None:
        super().__init__(lease, leader_id)
        self._term = term

    @property
    def term(self) -> int:
        return self._term

    @property
    def fence(self) -> Leader:
        return Leader(self._owner_id, self._term, self._incarnation())

    def _incarnation(self) -> str:
        """Empty: the store never hands a term out twice (see ``Leadership.fence``)."""
        return ""

    @property
    def leader_id(self) -> MemberId:
        return self._owner_id

    async def resign(self) -> None:
        raise NotImplementedError
