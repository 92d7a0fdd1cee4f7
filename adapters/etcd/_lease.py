"""An etcd lease with our own keepalive (etcd3aio's election and lock never renew theirs).

The lease is renewed every ``min(ttl / 2, max_renew_interval)`` seconds, each renewal
bounded by the time left. Its *deadline* is the send time of the last successful renewal
plus ``ttl``: etcd received that renewal no earlier, so the server cannot expire the lease
before the deadline. When renewals keep failing until the deadline passes, or etcd answers
that the lease is gone, the lease is lost: the ``lost`` event is set and renewal stops.
``is_lost`` also compares the monotonic clock with the deadline, without any I/O, so a
process resumed after a pause sees the loss before it does anything else.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

import anyio
from anyio.abc import TaskStatus

from adapters.etcd._client import EtcdClient
from core.errors import LeaseLostError, ShoalError, StoreUnavailableError

__all__ = ["Lease"]

_log = logging.getLogger(__name__)


class Lease:
    """One granted lease. Run ``keep_alive`` in a task group; ``revoke`` or ``stop`` it."""

    def __init__(self, client: EtcdClient, lease_id: int, ttl: float, granted_at: float) -> None:
        self._client = client
        self.id = lease_id
        self.ttl = ttl
        self._deadline = granted_at + ttl
        self._lost = anyio.Event()
        self._reason = ""
        self._paused = False
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    @classmethod
    async def grant(cls, client: EtcdClient, ttl: float) -> Lease:
        """Grant a lease of ``ttl`` seconds. Raises ``StoreUnavailableError``."""
        if not (ttl > 0 and math.isfinite(ttl)):
            raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
        started = time.monotonic()
        return cls(client, await client.grant(ttl), ttl, started)

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` past which the lease may have expired on the server."""
        return self._deadline

    @property
    def lost_reason(self) -> str:
        return self._reason

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or time.monotonic() + margin >= self._deadline

    async def wait_lost(self) -> None:
        await self._lost.wait()

    def lose(self, reason: str) -> None:
        """Mark the lease lost (idempotent; the first reason wins) and stop renewing it."""
        self._mark_lost(reason)
        self.stop()

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()
            _log.info("etcd lease %x lost: %s", self.id, reason)

    def pause_renewal(self) -> None:
        """Stop renewing, as a paused process would; the lease is lost at its deadline.

        A fault-injection hook for tests; production code never calls it.
        """
        self._paused = True

    def stop(self) -> None:
        """Stop renewing (the lease then expires on the server by itself). Idempotent."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def revoke(self) -> None:
        """Mark the lease lost, stop renewing, and revoke it so its keys vanish at once.

        Raises ``StoreUnavailableError`` if etcd did not confirm (the lease then expires
        at its TTL). Revoking a lease etcd no longer knows succeeds.
        """
        self.lose("revoked")
        await self._client.revoke(self.id)

    async def keep_alive(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew until lost or stopped; start it with ``task_group.start``."""
        with anyio.CancelScope() as self._scope:
            task_status.started()
            if not self._stopped:
                await self._renew_until_lost()

    async def _renew_until_lost(self) -> None:
        settings = self._client.settings
        interval = min(self.ttl / 2, settings.max_renew_interval)
        retry = min(settings.retry_interval, interval)
        next_at = self._deadline - self.ttl + interval
        failures = 0
        while True:
            wake = self._deadline if self._paused else min(next_at, self._deadline)
            await anyio.sleep(max(0.0, wake - time.monotonic()))
            sent = time.monotonic()
            if sent >= self._deadline:
                failed = f" ({failures} renewal(s) failed)" if failures else ""
                self._mark_lost(f"not renewed within its {self.ttl:g} s TTL{failed}")
                if not self._paused:
                    # etcd may still hold it (its TTL is at least as long): end it there too,
                    # so that others take over now rather than at the server-side expiry
                    with contextlib.suppress(ShoalError):
                        await self._client.revoke(self.id)
                return
            if self._paused:
                continue
            try:
                remaining = await self._client.keep_alive_once(self.id, self._deadline - sent)
            except LeaseLostError as exc:
                self.lose(str(exc))
                return
            except StoreUnavailableError as exc:
                failures += 1
                if failures == 1:
                    _log.warning("etcd lease %x: renewal failed, retrying: %s", self.id, exc)
                next_at = time.monotonic() + retry
                continue
            if remaining <= 0:
                self.lose("etcd reports it expired or was revoked")
                return
            if failures:
                _log.info("etcd lease %x renewed again after %d failure(s)", self.id, failures)
            failures = 0
            self._deadline = max(self._deadline, sent + self.ttl)
            next_at = sent + interval
