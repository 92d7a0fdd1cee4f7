"""An etcd lease with our own keepalive (etcd3aio's election and lock never renew theirs):
``adapters._lease.RenewedLease`` renewing by etcd's LeaseKeepAlive."""

from __future__ import annotations

import time

from adapters._lease import RenewedLease, check_ttl
from adapters.etcd._client import EtcdClient
from core.errors import LeaseLostError

__all__ = ["Lease"]


class Lease(RenewedLease):
    """One granted lease. Run ``keep_alive`` in a task group; ``revoke`` or ``stop`` it."""

    def __init__(self, client: EtcdClient, lease_id: int, ttl: float, granted_at: float) -> None:
        super().__init__(
            ttl=ttl,
            granted_at=granted_at,
            max_renew_interval=client.settings.max_renew_interval,
            retry_interval=client.settings.retry_interval,
            what=f"etcd lease {lease_id:x}",
        )
        self._client = client
        self.id = lease_id

    @classmethod
    async def grant(cls, client: EtcdClient, ttl: float) -> Lease:
        """Grant a lease of ``ttl`` seconds. Raises ``StoreUnavailableError``."""
        check_ttl(ttl)
        started = time.monotonic()
        return cls(client, await client.grant(ttl), ttl, started)

    async def revoke(self) -> None:
        """Mark the lease lost, stop renewing, and revoke it so its keys vanish at once.

        Raises ``StoreUnavailableError`` if etcd did not confirm (the lease then expires
        at its TTL). Revoking a lease etcd no longer knows succeeds.
        """
        self.lose("revoked")
        await self._client.revoke(self.id)

    async def _renew(self, timeout: float) -> None:  # noqa: ASYNC109 (the time left)
        if await self._client.keep_alive_once(self.id, timeout) <= 0:
            raise LeaseLostError("etcd reports it expired or was revoked")

    async def _end_expired(self) -> None:
        await self._client.revoke(self.id)
