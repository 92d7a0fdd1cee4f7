"""What every etcd adapter shares: a client, a task group for keepalives, bounded exit."""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskStatus

from adapters._lifecycle import Lifecycle
from adapters.etcd._client import EtcdClient
from adapters.etcd._keys import Keys
from adapters.etcd._lease import Lease
from adapters.etcd._settings import EtcdSettings
from core.errors import IncompatibleServerError, ShoalError
from core.server_floors import ETCD, refusal

_log = logging.getLogger(__name__)


class EtcdAdapter(Lifecycle):
    """Base of the etcd adapters: ``async with`` connects and owns the background tasks.

    Leaving cancels every keepalive, revokes the leases still held (so others see the
    member or leader go at once) and closes the client, all within
    ``settings.close_timeout`` seconds.
    """

    def __init__(self, settings: EtcdSettings | None = None) -> None:
        self.settings = settings if settings is not None else EtcdSettings()
        self._keys = Keys(self.settings.prefix)
        self._client = EtcdClient(self.settings)
        self._leases: set[Lease] = set()

    async def _connect(self) -> None:
        await self._client.connect()
        problem = refusal(
            f"etcd at {self._client.where}", await self._client.server_version(), (ETCD,)
        )
        if problem is not None:
            raise IncompatibleServerError(problem)

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            for lease in list(self._leases):
                lease.stop()
                try:
                    await lease.revoke()
                except ShoalError as exc:
                    _log.warning("etcd lease %x not revoked on exit: %s", lease.id, exc)
            self._leases.clear()

    async def _disconnect(self) -> None:
        await self._client.aclose()

    async def _new_lease(self, ttl: float) -> Lease:
        """Grant a lease and keep it alive in this adapter's task group until it is lost."""
        tasks = self._tasks
        self._leases = {held for held in self._leases if not held.is_lost()}
        lease = await Lease.grant(self._client, ttl)
        self._leases.add(lease)
        await tasks.start(self._keep, lease)
        return lease

    async def _keep(self, lease: Lease, *, task_status: TaskStatus[None]) -> None:
        try:
            await lease.keep_alive(task_status=task_status)
        finally:
            if lease.is_lost():
                self._leases.discard(lease)

    async def _drop_lease(self, lease: Lease) -> None:
        """Revoke ``lease`` (best effort, bounded) and forget it."""
        self._leases.discard(lease)
        with anyio.CancelScope(shield=True):
            try:
                await lease.revoke()
            except ShoalError as exc:
                _log.warning("etcd lease %x not revoked (it will expire): %s", lease.id, exc)
