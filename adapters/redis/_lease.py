"""A Redis "lease": a key with a TTL (PX) whose value starts with a random owner token.

It is renewed every ``min(ttl / 2, max_renew_interval)`` seconds by an owner-checked Lua
script (``PEXPIRE`` only if the value still starts with our token). Its *deadline* is the
send time of the last successful renewal (or write) plus ``ttl``: Redis received it no
earlier, so the key cannot expire there before the deadline. The lease is lost when the
deadline passes without a renewal, or when the script finds the key gone or someone
else's (it expired and was taken). ``is_lost`` compares the monotonic clock with the
deadline without any I/O, so a process resumed after a pause sees the loss first.

Between renewals, the adapter's change feed wakes the lease when its key expired or was
written by someone else, so a lease that Redis dropped is seen lost at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from adapters.redis._client import RedisClient, ms
from adapters.redis._feed import Subscription
from core.errors import ShoalError, StoreUnavailableError

__all__ = ["Lease", "check_ttl"]

_log = logging.getLogger(__name__)


def check_ttl(ttl: float) -> None:
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl!r}")


class Lease:
    """One owned TTL key. Run ``keep_alive`` in a task group; ``release`` or ``stop`` it."""

    def __init__(
        self,
        client: RedisClient,
        *,
        key: str,
        token: str,
        ttl: float,
        granted_at: float,
        release: Callable[[], Awaitable[object]],
        what: str,
    ) -> None:
        self._client = client
        self.key = key
        self.token = token
        self.ttl = ttl
        self._deadline = granted_at + ttl
        self._release = release
        self._what = what
        self._lost = anyio.Event()
        self._reason = ""
        self._paused = False
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self._released = False

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` past which the key may have expired in Redis."""
        return self._deadline

    @property
    def lost_reason(self) -> str:
        return self._reason

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or time.monotonic() + margin >= self._deadline

    async def wait_lost(self) -> None:
        await self._lost.wait()

    def renewed(self, sent: float) -> None:
        """Record a successful write of the key (with a fresh PX) sent at ``sent``."""
        if not self._lost.is_set():
            self._deadline = max(self._deadline, sent + self.ttl)

    def lose(self, reason: str) -> None:
        """Mark the lease lost (idempotent; the first reason wins) and stop renewing it."""
        self._mark_lost(reason)
        self.stop()

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()
            _log.info("redis lease of %s lost: %s", self._what, reason)

    def pause_renewal(self) -> None:
        """Stop renewing, as a paused process would; the lease is lost at its deadline.

        A fault-injection hook for tests; production code never calls it.
        """
        self._paused = True

    def stop(self) -> None:
        """Stop renewing (the key then expires in Redis by itself). Idempotent."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def release(self) -> None:
        """Mark the lease lost, stop renewing, and delete the key if it is still ours, so
        others see it go at once. Idempotent once it succeeded.

        Raises ``StoreUnavailableError`` if Redis did not confirm (the key then expires at
        its TTL; calling again retries).
        """
        self.lose("released")
        if self._released:
            return
        await self._release()
        self._released = True

    async def keep_alive(
        self,
        wake: Subscription | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Renew until lost or stopped; start it with ``task_group.start``. ``wake`` fires
        when the key may have been taken from us (checked at once)."""
        with anyio.CancelScope() as self._scope:
            task_status.started()
            if not self._stopped:
                await self._renew_until_lost(wake)

    async def _renew_until_lost(self, wake: Subscription | None) -> None:
        settings = self._client.settings
        interval = min(self.ttl / 2, settings.max_renew_interval)
        retry = min(settings.retry_interval, interval)
        next_at = self._deadline - self.ttl + interval
        failures = 0
        while True:
            wake_at = self._deadline if self._paused else min(next_at, self._deadline)
            delay = max(0.0, wake_at - time.monotonic())
            if wake is not None and not self._paused:
                await wake.wait(delay)
                wake.clear()
            else:
                await anyio.sleep(delay)
            sent = time.monotonic()
            if sent >= self._deadline:
                failed = f" ({failures} renewal(s) failed)" if failures else ""
                self._mark_lost(f"not renewed within its {self.ttl:g} s TTL{failed}")
                if not self._paused:
                    # Redis may still hold the key for a moment: delete it if it is ours,
                    # so that others take over now
                    with (
                        contextlib.suppress(ShoalError),
                        anyio.move_on_after(settings.call_timeout),
                    ):
                        await self._release()
                return
            if self._paused:
                continue
            try:
                renewed = await self._client.script(
                    "RENEW", [self.key], [self.token, ms(self.ttl)], self._deadline - sent
                )
            except StoreUnavailableError as exc:
                failures += 1
                if failures == 1:
                    _log.warning("redis lease of %s: renewal failed, retrying: %s", self._what, exc)
                next_at = time.monotonic() + retry
                continue
            if not renewed:
                self.lose("its key expired or was taken over in Redis")
                return
            if failures:
                _log.info("redis lease of %s renewed after %d failure(s)", self._what, failures)
            failures = 0
            self.renewed(sent)
            next_at = sent + interval
