"""Entering what multi-datacenter routing needs (``core.routing``): one NATS transport per
cluster of ``SHOAL_CLUSTERS`` and the route file. Shared by the gateway and the handler."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from adapters.nats import NatsSettings, NatsTransport
from adapters.routes import RouteFile
from core.errors import BrokerUnavailableError, PublishError, RouteError
from core.messages import Envelope
from core.model import Partition
from core.ports import RouteStore, Subscription, Transport
from core.retry import retry_delay
from core.routing import ClusterMap, RouteTable, default_table, validate_table
from services.common.logs import fields
from services.common.settings import RoutingSettings, load_settings

__all__ = [
    "Backlogs",
    "ClusterBacklogs",
    "Datacenters",
    "LateCluster",
    "RouteView",
    "enter_datacenters",
]

log = logging.getLogger("shoal.routing")


@dataclass(frozen=True)
class Datacenters:
    clusters: ClusterMap
    transports: Mapping[str, Transport]  # by cluster name, entered
    routes: RouteStore
    local: str | None  # SHOAL_CLUSTER


async def enter_datacenters(
    stack: AsyncExitStack, transport: str, *, position: str | None = None
) -> Datacenters | None:
    """None when ``SHOAL_CLUSTERS`` is unset (one cluster, the usual transport settings).
    ``position``: a broadcast handler's own position, on every cluster.
    A cluster that does not answer at start is connected in the background (``LateCluster``):
    a process starts, and serves from the other clusters, while a datacenter is down."""
    routing = load_settings(RoutingSettings)
    clusters = routing.cluster_map
    if clusters is None:
        return None
    if transport != "nats":
        raise SystemExit(
            "error: SHOAL_CLUSTERS: multi-datacenter routing is built for SHOAL_TRANSPORT=nats "
            "only (Kafka clusters are the same shape, not built yet)"
        )
    base = load_settings(NatsSettings)
    connecting = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(connecting.cancel_scope.cancel)  # runs first on the way out
    transports: dict[str, Transport] = {}
    for name in clusters.names:
        settings = base.for_cluster(name, clusters.addresses(name))
        late = LateCluster(name, functools.partial(NatsTransport, settings, position=position))
        await connecting.start(late.run)
        transports[name] = late
    routes = await stack.enter_async_context(
        RouteFile(routing.routes_file, poll_interval=routing.routes_poll)
    )
    return Datacenters(clusters, transports, routes, routing.cluster)


class LateCluster:
    """One cluster's transport, for a process that must start while that datacenter is
    down: ``run`` enters the transport, retrying with backoff until it connects, and keeps
    it until cancelled (once connected, the transport reconnects by itself). Until then
    every call refuses as a cluster that is down does, so the gateway falls back and the
    handler's reader for this cluster retries."""

    def __init__(
        self, name: str, make: Callable[[], AbstractAsyncContextManager[Transport]]
    ) -> None:
        self.name = name
        self._make = make
        self._inner: Transport | None = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reports started after the first attempt, connected or not."""
        failures = 0
        started = False
        while True:
            try:
                async with self._make() as transport:
                    self._inner = transport
                    if failures:
                        log.info("cluster connected", extra=fields(cluster=self.name))
                    if not started:
                        started = True
                        task_status.started()
                    await anyio.sleep_forever()
            except Exception as exc:  # not there yet: the other clusters serve meanwhile
                failures += 1
                delay = retry_delay(failures, base=0.5, cap=10.0)
                log.warning(
                    "cluster not reachable; connecting in the background",
                    extra=fields(cluster=self.name, error=repr(exc), retry_in=delay),
                )
            finally:
                self._inner = None
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(delay)

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
