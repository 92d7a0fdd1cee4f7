"""Entering what multi-datacenter routing needs (``core.routing``): one NATS transport per
cluster of ``SHOAL_CLUSTERS`` and the route file. Shared by the gateway and the handler."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

from adapters.nats import NatsSettings, NatsTransport
from adapters.routes import RouteFile
from core.errors import BrokerUnavailableError, RouteError
from core.model import Partition
from core.ports import RouteStore, Transport
from core.routing import ClusterMap, RouteTable, default_table, validate_table
from services.common.settings import RoutingSettings, load_settings

__all__ = ["Backlogs", "ClusterBacklogs", "Datacenters", "RouteView", "enter_datacenters"]

log = logging.getLogger("shoal.routing")


@dataclass(frozen=True)
class Datacenters:
    clusters: ClusterMap
    transports: Mapping[str, Transport]  # by cluster name, entered
    routes: RouteStore
    local: str | None  # SHOAL_CLUSTER


async def enter_datacenters(stack: AsyncExitStack, transport: str) -> Datacenters | None:
    """None when ``SHOAL_CLUSTERS`` is unset (one cluster, the usual transport settings).
    Every cluster must answer to start: a process starts where it can reach them all."""
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
    transports = {
        name: await stack.enter_async_context(
            NatsTransport(base.for_cluster(name, clusters.addresses(name)))
        )
        for name in clusters.names
    }
    routes = await stack.enter_async_context(
        RouteFile(routing.routes_file, poll_interval=routing.routes_poll)
    )
    return Datacenters(clusters, transports, routes, routing.cluster)


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
    """What the leader reads for lag (scaling, status): a ``Transport``, or the sum over
    every datacenter (``ClusterBacklogs``)."""

    async def backlog(self, partition: Partition) -> int: ...


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
