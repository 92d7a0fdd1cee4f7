"""``RedisElection``: ``SET leader {token}:{term}:{id} NX PX ttl`` and ``INCR term``, in one
script. The winner's term (the fencing token) is the counter's new value; it only grows.

The leader renews its key with the owner-checked ``RENEW`` script; resigning deletes it
(owner-checked). Candidates that lost wait for the key to go: the ``resigned`` event, the
key's expiry notification, or at the latest when its TTL runs out (they retry then).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from adapters._backoff import Backoff
from adapters._lease import LeaderOnLease, check_ttl
from adapters.redis._base import RedisAdapter
from adapters.redis._client import ms
from adapters.redis._codec import decode_leader, new_token
from adapters.redis._feed import Change
from adapters.redis._lease import Lease
from core.errors import ShoalError, StoreUnavailableError
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["RedisElection", "RedisLeadership"]

_log = logging.getLogger(__name__)
_RETRY_MARGIN = 0.01  # retry a campaign this long after the leader key's TTL ran out


class RedisLeadership(LeaderOnLease):
    """Won leadership. Lost when its key is not renewed in time, or is gone or someone else's."""

    def __init__(self, lease: Lease, leader_id: MemberId, term: int) -> None:
        super().__init__(lease, leader_id, term)
        self._key_lease = lease

    @property
    def key(self) -> str:
        """The leader key in Redis."""
        return self._key_lease.key

    def _incarnation(self) -> str:
        """The leader key's random owner token: after Redis lost recent writes its term
        counter may hand this term to another candidate too."""
        return self._key_lease.token

    async def resign(self) -> None:
        """Delete the leader key if it is still ours. Idempotent.

        Raises ``StoreUnavailableError`` if Redis did not confirm (the key then goes when
        its TTL runs out); calling again retries.
        """
        await self._key_lease.release()


class RedisElection(RedisAdapter):
    """The ``Election`` port on Redis. Use as ``async with RedisElection(settings) as e``."""

    _expirations = True

    async def campaign(self, candidate_id: MemberId, ttl: float) -> RedisLeadership:
        """Block until ``candidate_id`` holds the leader key; cancelling withdraws. Raises
        ``StoreUnavailableError`` when Redis does not answer an attempt; waiting for the
        key to go survives Redis restarts."""
        check_ttl(ttl)
        feed = await self._started_feed()
        keys, client, settings = self._keys, self._client, self.settings
        token = new_token()

        async def release() -> object:
            return await client.script(
                "RESIGN", [keys.leader, keys.events], [token, settings.events_maxlen]
            )

        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        attempts = 0
        with feed.interest(lambda change: change.topic == "leader") as changes:
            while True:
                changes.clear()
                sent = time.monotonic()
                attempts += 1
                try:
                    won, value = await client.script(
                        "CAMPAIGN",
                        [keys.leader, keys.term, keys.events],
                        [candidate_id, token, ms(ttl), settings.events_maxlen],
                    )
                except StoreUnavailableError as exc:
                    if attempts == 1 or client.closed:
                        await self._undo(release, candidate_id)
                        raise
                    # the script is idempotent for one token: retrying is safe
                    _log.warning("redis: campaign of %s failed, retrying: %s", candidate_id, exc)
                    await backoff.sleep()
                    continue
                except BaseException:
                    await self._undo(release, candidate_id)
                    raise
                if won:
                    break
                backoff.reset()
                await changes.wait(_retry_after(int(value), settings.resync_interval))
        term = int(value)
        lease = Lease(
            client,
            key=keys.leader,
            token=token,
            ttl=ttl,
            granted_at=sent,
            release=release,
            what=f"leader {candidate_id} (term {term})",
        )
        await self._keep(lease, feed.add(lambda change: _taken(change, keys.leader)))
        _log.info("%s leads with term %d", candidate_id, term)
        return RedisLeadership(lease, candidate_id, term)

    async def _undo(self, release: Callable[[], Awaitable[object]], candidate_id: str) -> None:
        """A campaign that failed or was cancelled may have been applied: undo it if so."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.call_timeout):
            try:
                await release()
            except ShoalError as exc:
                _log.warning("redis: campaign of %s not undone: %s", candidate_id, exc)

    async def leader(self) -> LeaderInfo | None:
        raw = await self._client.get(self._keys.leader)
        if raw is None:
            return None
        return decode_leader(raw)


def _retry_after(pttl_ms: int, resync_interval: float) -> float:
    """When to try again, given the leader key's PTTL (-2: gone, -1: no TTL at all)."""
    if pttl_ms == -2:
        return 0.0
    if pttl_ms < 0:
        return resync_interval
    return min(pttl_ms / 1000 + _RETRY_MARGIN, resync_interval)


def _taken(change: Change, key: str) -> bool:
    """A change after which the leader key may no longer be ours."""
    return change.key == key and change.op in ("expired", "elected", "resigned")
