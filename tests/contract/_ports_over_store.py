"""The coordination contract suites (``_coordination``) against the ports written once
(``adapters.coordination``), over any dialect's ``StoreHarness`` (``_kv``): one harness
class for every store, because the faults are the port's own (revoke a lease at the
store, stop renewing it, restart the server)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from adapters._store_settings import StoreTiming
from adapters.coordination import (
    StoreAdapter,
    StoreAssignmentStore,
    StoreElection,
    StoreHoldStore,
    StoreLeadership,
    StoreLoadReports,
    StoreMembership,
    StoreMembershipLease,
    StoreProjectRegistry,
)
from core.ports import AssignmentStore, CoordinationStore, Leadership, MembershipLease
from tests.contract._coordination import Features
from tests.contract._kv import StoreHarness

__all__ = ["PortsHarness"]

A = TypeVar("A", bound=StoreAdapter)

# Renewals well inside the contract's 1 s leases, and quick retries after a restart.
TIMING = StoreTiming.model_construct(max_renew_interval=5.0, retry_interval=0.1, close_timeout=5.0)


class _Shared:
    """A store the fixture opened and shares: the adapters neither open nor close it."""

    def __init__(self, store: CoordinationStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def __aenter__(self) -> _Shared:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None  # the fixture closes it


class PortsHarness:
    """Each port a fresh adapter on its own dialect instance (``stores.store()``), so a
    paused adapter's connection is its own; ``admin`` (open) ends leases at the store."""

    def __init__(
        self, stores: StoreHarness, admin: CoordinationStore, *, shared: bool = False
    ) -> None:
        self._stores = stores
        self._admin = admin
        self._shared = shared

    @property
    def features(self) -> Features:
        return self._stores.features

    @asynccontextmanager
    async def _open(self, kind: Callable[..., A]) -> AsyncIterator[A]:
        async with AsyncExitStack() as stack:
            dialect: Any
            if self._shared:
                dialect = _Shared(await stack.enter_async_context(self._stores.store()))
            else:
                dialect = self._stores.store()
            adapter: A = kind(dialect, TIMING)
            yield await stack.enter_async_context(adapter)  # type: ignore[arg-type]

    def membership(self) -> AbstractAsyncContextManager[StoreMembership]:
        return self._open(StoreMembership)

    def reports(self) -> AbstractAsyncContextManager[StoreLoadReports]:
        return self._open(StoreLoadReports)

    def election(self) -> AbstractAsyncContextManager[StoreElection]:
        return self._open(StoreElection)

    def store(self) -> AbstractAsyncContextManager[StoreAssignmentStore]:
        return self._open(StoreAssignmentStore)

    def hold_store(self) -> AbstractAsyncContextManager[StoreHoldStore]:
        return self._open(StoreHoldStore)

    def registry(self) -> AbstractAsyncContextManager[StoreProjectRegistry]:
        return self._open(StoreProjectRegistry)

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, StoreMembershipLease | StoreLeadership)
        await self._admin.revoke(lease.store_lease.id)

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, StoreMembershipLease | StoreLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        await self._stores.restart_store()

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        assert isinstance(store, StoreAssignmentStore)
        return store.store, "update"
