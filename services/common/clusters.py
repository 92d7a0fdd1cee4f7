"""Entering what multi-datacenter routing needs (``core.routing``): one NATS transport per
cluster of ``SHOAL_CLUSTERS`` and the route file, shared by the gateway and the handler;
and the gateway's idempotency answers, one store per cluster (``ClusterIdempotency``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import anyio
from anyio.abc import TaskStatus

from adapters.routes import RouteFile
from core.errors import BrokerUnavailableError, PublishError, RouteError, StoreUnavailableError
from core.idempotency import IdempotentAnswer, first_answer
from core.messages import Envelope
from core.model import Partition
from core.ports import IdempotencyStore, RouteStore, Subscription, Transport, TransportFeatures
from core.retry import retry_delay
from core.routing import ClusterMap, RouteTable, default_table, validate_table
from services.common.backends import datacenter_backends
from services.common.logs import fields
from services.common.settings import RoutingSettings, load_settings

__all__ = [
    "Backlogs",
    "ClusterBacklogs",
    "ClusterIdempotency",
    "Datacenters",
    "LateCluster",
    "LateIdempotencyStore",
    "RouteView",
    "enter_datacenters",
]

log = logging.getLogger("shoal.routing")

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Datacenters:
    clusters: ClusterMap
    transports: Mapping[str, Transport]  # by cluster name, entered
    routes: RouteStore
    local: str | None  # SHOAL_CLUSTER
    idempotency: ClusterIdempotency | None = None  # a gateway's, in every cluster


async def enter_datacenters(
    stack: AsyncExitStack,
    transport: str,
    *,
    position: str | None = None,
    idempotency_window: float | None = None,
) -> Datacenters | None:
    """None when ``SHOAL_CLUSTERS`` is unset (one cluster, the usual transport settings).
    ``position``: a broadcast handler's own position, on every cluster.
    ``idempotency_window``: a gateway's; its ``Idempotency-Key`` answers are then kept in
    every cluster's own bucket (``ClusterIdempotency``).
    A cluster that does not answer at start is connected in the background (``LateCluster``,
    ``LateIdempotencyStore``): a process starts, and serves from the other clusters, while a
    datacenter is down."""
    routing = load_settings(RoutingSettings)
    clusters = routing.cluster_map
    if clusters is None:
        return None
    try:
        kinds = datacenter_backends(transport)
    except ValueError as exc:
        raise SystemExit(f"error: SHOAL_CLUSTERS: {exc}") from None
    base = load_settings(kinds.settings)
    settings = {name: base.for_cluster(name, clusters.addresses(name)) for name in clusters.names}
    transports = {
        name: LateCluster(
            name,
            functools.partial(kinds.transport, cluster, position=position),
            kinds.transport.features,
        )
        for name, cluster in settings.items()
    }
    stores: dict[str, LateIdempotencyStore] = {}
    if idempotency_window is not None:
        stores = {
            name: LateIdempotencyStore(
                name,
                functools.partial(kinds.idempotency_store, cluster, window=idempotency_window),
            )
            for name, cluster in settings.items()
        }
    await _connect_in_background(stack, [*transports.values(), *stores.values()])
    routes = await stack.enter_async_context(
        RouteFile(routing.routes_file, poll_interval=routing.routes_poll)
    )
    idempotency = ClusterIdempotency(stores, timeout=base.request_timeout) if stores else None
    return Datacenters(clusters, transports, routes, routing.cluster, idempotency)


async def _connect_in_background(stack: AsyncExitStack, lates: Sequence[Late[Any]]) -> None:
    """Make every first attempt at once and return when each one connected or failed (a
    datacenter that is down costs one connect timeout, whatever it serves); the ones that
    failed keep trying until ``stack`` closes."""
    connecting = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(connecting.cancel_scope.cancel)  # runs first on the way out
    async with anyio.create_task_group() as starting:
        for late in lates:
            starting.start_soon(connecting.start, late.run)


class Late(Generic[T]):
    """One cluster's adapter (entered by ``make``), for a process that must start while
    that datacenter is down: ``run`` enters it, retrying with backoff until it connects,
    and keeps it until cancelled (once connected, the adapter reconnects by itself). Until
    then ``_inner`` is None and every call refuses as a cluster that is down does."""

    adapter = "adapter"  # what the log lines name

    def __init__(self, name: str, make: Callable[[], AbstractAsyncContextManager[T]]) -> None:
        self.name = name
        self._make = make
        self._inner: T | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reports started after the first attempt, connected or not."""
        failures = 0
        started = False
        while True:
            try:
                async with self._make() as inner:
                    self._inner = inner
                    if failures:
                        log.info(
                            "cluster connected",
                            extra=fields(cluster=self.name, adapter=self.adapter),
                        )
                    if not started:
                        started = True
                        task_status.started()
                    await anyio.sleep_forever()
            except Exception as exc:  # not there yet: the other clusters serve meanwhile
                failures += 1
                delay = retry_delay(failures, base=0.5, cap=10.0)
                log.warning(
                    "cluster not reachable; connecting in the background",
                    extra=fields(
                        cluster=self.name, adapter=self.adapter, error=repr(exc), retry_in=delay
                    ),
                )
            finally:
                self._inner = None
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(delay)


class LateCluster(Late[Transport]):
    """One cluster's transport: until connected, the gateway falls back to another
    cluster and the handler's reader for this cluster retries."""

    adapter = "transport"

    def __init__(
        self,
        name: str,
        make: Callable[[], AbstractAsyncContextManager[Transport]],
        features: TransportFeatures,
    ) -> None:
        super().__init__(name, make)
        self.features = features  # the cluster's transport's, known before it connects

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        inner = self._inner
        if inner is None:
            raise PublishError(
                f"0 of {len(envelopes)} messages stored: cluster {self.name} not connected yet"
            )
        await inner.publish(envelopes)

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        inner = self._inner
        if inner is None:
            raise BrokerUnavailableError(f"cluster {self.name} not connected yet")
        return await inner.open(partition, consumer_id)

    async def backlog(self, partition: Partition) -> int:
        inner = self._inner
        if inner is None:
            raise BrokerUnavailableError(f"cluster {self.name} not connected yet")
        return await inner.backlog(partition)

    async def oldest_unacked(self, partition: Partition) -> float | None:
        inner = self._inner
        if inner is None:
            raise BrokerUnavailableError(f"cluster {self.name} not connected yet")
        return await inner.oldest_unacked(partition)

    async def trim_landed(self, partitions: int) -> int:
        inner = self._inner
        if inner is None:
            raise BrokerUnavailableError(f"cluster {self.name} not connected yet")
        return await inner.trim_landed(partitions)

    async def reply_registration(self, partition: Partition, project_id: str, by: str) -> None:
        inner = self._inner
        if inner is not None:  # best effort, as the port says
            await inner.reply_registration(partition, project_id, by)


class LateIdempotencyStore(Late[IdempotencyStore]):
    """One cluster's idempotency store: until connected it does not answer, and
    ``ClusterIdempotency`` goes by the other clusters' stores."""

    adapter = "idempotency store"

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        return await self._connected().recall(project_id, key_digest)

    async def remember(self, answer: IdempotentAnswer) -> None:
        await self._connected().remember(answer)

    def _connected(self) -> IdempotencyStore:
        inner = self._inner
        if inner is None:
            raise StoreUnavailableError(f"cluster {self.name} not connected yet")
        return inner


@dataclass(frozen=True)
class ClusterIdempotency:
    """The ``IdempotencyStore`` port over every cluster's own store, so that a keyed retry
    through any datacenter's gateway is answered from the first answer, and a keyed
    request is served while a datacenter is down. ``remember`` writes to every cluster at
    once and succeeds once one confirmed (the others are logged); ``recall`` asks every
    cluster at once and takes the first answer (``core.idempotency.first_answer``) of the
    ones that answered: None when those hold none, ``StoreUnavailableError`` only when no
    cluster answered. A cluster gets ``timeout`` seconds; a disconnected one refuses at
    once (``refuse_while_disconnected``), so a datacenter that is down costs no wait."""

    stores: Mapping[str, IdempotencyStore]  # by cluster name, entered
    timeout: float

    async def recall(self, project_id: str, key_digest: str) -> IdempotentAnswer | None:
        answered, failures = await self._each(lambda store: store.recall(project_id, key_digest))
        if not answered:
            raise StoreUnavailableError(f"no cluster answered: {_reasons(failures)}")
        return first_answer(found for found in answered.values() if found is not None)

    async def remember(self, answer: IdempotentAnswer) -> None:
        confirmed, failures = await self._each(lambda store: store.remember(answer))
        if not confirmed:
            raise StoreUnavailableError(f"no cluster confirmed: {_reasons(failures)}")
        if failures:
            log.warning(
                "idempotency answer not remembered in every cluster: a retry that reaches "
                "only those is published again",
                extra=fields(
                    project=answer.project_id,
                    series=answer.series_id,
                    clusters=sorted(failures),
                    error=_reasons(failures),
                ),
            )

    async def _each(
        self, call: Callable[[IdempotencyStore], Awaitable[R]]
    ) -> tuple[dict[str, R], dict[str, str]]:
        """``call`` on every cluster's store at once: what each one answered within
        ``timeout``, and why each other one did not."""
        answered: dict[str, R] = {}
        failures: dict[str, str] = {}

        async def ask(name: str, store: IdempotencyStore) -> None:
            try:
                answered[name] = await call(store)
            except StoreUnavailableError as exc:
                failures[name] = str(exc)

        with anyio.move_on_after(self.timeout):
            async with anyio.create_task_group() as tg:
                for name, store in self.stores.items():
                    tg.start_soon(ask, name, store)
        for name in self.stores.keys() - answered.keys() - failures.keys():
            failures[name] = f"no answer within {self.timeout:g} s"
        return answered, failures


def _reasons(failures: Mapping[str, str]) -> str:
    return "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items()))


class RouteView:
    """The table a process acts on: each newly read table is checked against the cluster
    map (``validate_table``); one that breaks a rule (a hand-edited file naming an unknown
    cluster) is logged once and the last good table stays in force."""

    def __init__(self, clusters: ClusterMap) -> None:
        self.clusters = clusters
        self.table = default_table(clusters)
        self._refused: RouteTable | None = None

    def apply(self, table: RouteTable | None) -> RouteTable:
        if table is None or table in (self.table, self._refused):
            return self.table
        try:
            validate_table(table, self.clusters)
        except RouteError as exc:
            self._refused = table
            log.error(
                "route table v%d refused, keeping v%d: %s", table.version, self.table.version, exc
            )
            return self.table
        self.table = table
        return table


class Backlogs(Protocol):
    """What the leader reads for lag and the oldest unacked message (scaling, status,
    backlog alerts): a ``Transport``, or every datacenter's (``ClusterBacklogs``)."""

    async def backlog(self, partition: Partition) -> int: ...

    async def oldest_unacked(self, partition: Partition) -> float | None: ...


@dataclass(frozen=True)
class ClusterBacklogs:
    """A partition's backlog summed over every cluster. Unknown (``BrokerUnavailableError``)
    when any cluster does not answer: the scaling rules then hold instead of acting on a
    backlog that leaves a datacenter out."""

    transports: Mapping[str, Transport]

    async def backlog(self, partition: Partition) -> int:
        total = 0
        for name, transport in self.transports.items():
            try:
                total += await transport.backlog(partition)
            except BrokerUnavailableError as exc:
                raise BrokerUnavailableError(f"cluster {name}: {exc}") from exc
        return total

    async def oldest_unacked(self, partition: Partition) -> float | None:
        """The oldest of the clusters' oldest unacked messages (None: every one acked
        everywhere); unknown when any cluster does not answer, like ``backlog``."""
        oldest: float | None = None
        for name, transport in self.transports.items():
            try:
                stored = await transport.oldest_unacked(partition)
            except BrokerUnavailableError as exc:
                raise BrokerUnavailableError(f"cluster {name}: {exc}") from exc
            if stored is not None and (oldest is None or stored < oldest):
                oldest = stored
        return oldest
