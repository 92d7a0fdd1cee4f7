"""Entering what multi-datacenter routing needs (``core.routing``): one NATS transport per
cluster of ``SHOAL_CLUSTERS`` and the route file. Shared by the gateway and the handler."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass

from adapters.nats import NatsSettings, NatsTransport
from adapters.routes import RouteFile
from core.ports import RouteStore, Transport
from core.routing import ClusterMap
from services.common.settings import RoutingSettings, load_settings

__all__ = ["Datacenters", "enter_datacenters"]


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
