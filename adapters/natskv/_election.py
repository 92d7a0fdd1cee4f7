"""``NatsKvElection``: the ``leader`` key, created if absent with the lease's TTL. The
winner's term (the fencing token) is the revision of that create: a stream sequence, so it
only grows (while the bucket lives). The value is ``{token}:{term}:{id}``: the create
writes it without the term (unknown until the server answers), so the winner rewrites it
with the term at once; a reader that meets the create alone takes its revision.

The leader renews by rewriting the key with a fresh TTL if its revision is still ours;
resigning deletes it (revision-compared). Candidates that lost wait on the feed for the
key to go: a delete, or the server's expiry marker when its TTL ran out.
"""

from __future__ import annotations

import logging
import time

import anyio

from adapters._backoff import Backoff
from adapters._lease import LeaderOnLease, check_ttl
from adapters.natskv import _keys as keys
from adapters.natskv._base import KvLease, NatsKvAdapter, new_token
from adapters.natskv._bucket import Bucket, Entry
from core.errors import LeaseLostError, ShoalError, StoreUnavailableError
from core.model import MemberId
from core.ports import LeaderInfo

__all__ = ["NatsKvElection", "NatsKvLeadership", "decode_leader"]

_log = logging.getLogger("shoal.adapters.natskv")


def decode_leader(entry: Entry) -> tuple[str, LeaderInfo]:
    """The owner token and who leads with which term; ``ValueError`` when malformed."""
    parts = entry.value.decode(errors="replace").split(":", 2)
    if len(parts) != 3 or not (parts[1].isdigit() or parts[1] == "") or not parts[0]:
        raise ValueError(f"leader: expected token:term:id, got {entry.value[:80]!r}")
    term = int(parts[1]) if parts[1] else entry.revision
    return parts[0], LeaderInfo(leader_id=parts[2], term=term)


class NatsKvLeadership(LeaderOnLease):
    """Won leadership. Lost when its key is not renewed in time, or is gone or someone else's."""

    def __init__(self, lease: KvLease, leader_id: MemberId, term: int) -> None:
        super().__init__(lease, leader_id, term)
        self._key_lease = lease

    @property
    def key(self) -> str:
        return self._key_lease.key

    def _incarnation(self) -> str:
        """The leader key's owner token: a bucket deleted and created again starts its
        revisions anew, so a term could come round twice; the token tells them apart."""
        return self._key_lease.token

    async def resign(self) -> None:
        """Delete the leader key if it is still ours. Idempotent; ``StoreUnavailableError``
        if NATS did not confirm (the key then goes when its TTL runs out)."""
        await self._key_lease.release()


async def _resign(bucket: Bucket, lease: KvLease) -> None:
    await bucket.delete(lease.key, last=lease.revision)  # refused: not ours any more


class NatsKvElection(NatsKvAdapter):
    """The ``Election`` port on NATS KV. ``async with NatsKvElection(settings) as e``."""

    _watched = keys.LEADER

    async def campaign(self, candidate_id: MemberId, ttl: float) -> NatsKvLeadership:
        """Block until ``candidate_id`` holds the leader key; cancelling withdraws.
        ``StoreUnavailableError`` when NATS does not answer the first attempt; later
        attempts are retried (waiting survives NATS restarts)."""
        check_ttl(ttl)
        feed = await self._started_feed()
        bucket, settings, token = self._bucket, self.settings, new_token()
        backoff = Backoff(settings.retry_interval, settings.max_retry_interval)
        attempts = 0
        with feed.interest(lambda change: change.key == keys.LEADER) as changes:
            while True:
                changes.clear()
                sent = time.monotonic()
                attempts += 1
                try:
                    revision = await bucket.create(
                        keys.LEADER, f"{token}::{candidate_id}".encode(), ttl=ttl
                    )
                except StoreUnavailableError as exc:
                    await self._undo(token, candidate_id)
                    if attempts == 1 or bucket.closed:
                        raise
                    _log.warning("NATS KV: campaign of %s failed, retrying: %s", candidate_id, exc)
                    await backoff.sleep()
                    continue
                except BaseException:
                    await self._undo(token, candidate_id)
                    raise
                if revision is not None:
                    break
                backoff.reset()
                # the leader key's delete or expiry marker wakes us; the resync is a safety net
                await changes.wait(settings.resync_interval)
        term = revision
        lease = KvLease(
            bucket,
            key=keys.LEADER,
            value=f"{token}:{term}:{candidate_id}".encode(),
            token=token,
            revision=revision,
            ttl=ttl,
            granted_at=sent,
            release=lambda held: _resign(bucket, held),
            what=f"leader {candidate_id} (term {term})",
        )
        try:
            sent = time.monotonic()
            await lease.rewrite(lease.value)  # the term into the value, for leader()
            lease.renewed(sent)
        except (StoreUnavailableError, LeaseLostError) as exc:  # renewals write it (or tell)
            _log.debug("NATS KV: term of %s not written yet: %s", candidate_id, exc)
        await self._keep(lease)
        _log.info("%s leads with term %d", candidate_id, term)
        return NatsKvLeadership(lease, candidate_id, term)

    async def _undo(self, token: str, candidate_id: str) -> None:
        """A campaign that failed or was cancelled may have been applied: undo it if so."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.call_timeout):
            try:
                entry = await self._bucket.get(keys.LEADER)
                if entry is not None and entry.value.startswith(f"{token}:".encode()):
                    await self._bucket.delete(keys.LEADER, last=entry.revision)
            except ShoalError as exc:
                _log.warning("NATS KV: campaign of %s not undone: %s", candidate_id, exc)

    async def leader(self) -> LeaderInfo | None:
        entry = await self._bucket.get(keys.LEADER)
        if entry is None:
            return None
        try:
            return decode_leader(entry)[1]
        except ValueError as exc:
            _log.warning("NATS KV: ignoring the leader key: %s", exc)
            return None
