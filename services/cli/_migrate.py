"""``shoal migrate``: move a project prefix to another datacenter, step by step
(``core.routing.plan_migration``), against the route file every gateway and handler reads.

Each table step is stored, then given ``settle`` seconds to be applied (gateways read the
file on every request, handlers poll it every ``SHOAL_ROUTES_POLL``). The drain step marks
every source cluster's stream (its last sequence) and waits until each partition's
consumer has acked past the mark (``NatsTransport.drained``). Every step prints its
duration and counts. NATS JetStream clusters only (Kafka: same shape, not built yet).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

import anyio

from core.errors import RouteError
from core.model import Partition
from core.ports import RouteStore
from core.routing import (
    ClusterMap,
    DrainStep,
    TableStep,
    default_table,
    plan_migration,
    route_for,
)

__all__ = ["Drainable", "MigrationError", "StepDone", "migrate", "open_datacenters"]

_POLL = 0.1  # seconds between two rounds of drain checks


class MigrationError(Exception):
    """A step did not finish (a drain timed out): the table stays at the last step stored;
    running the same migration again resumes from there."""


class Drainable(Protocol):
    """What the drain step asks of a source cluster's transport (``NatsTransport``)."""

    async def drain_mark(self, partition: Partition) -> int: ...

    async def drained(self, partition: Partition, mark: int) -> tuple[bool, int]: ...


@dataclass(frozen=True)
class StepDone:
    number: int
    of: int
    why: str
    seconds: float
    detail: str


async def migrate(
    *,
    prefix: str,
    target: str,
    ordered: bool,
    routes: RouteStore,
    clusters: ClusterMap,
    transports: Mapping[str, Drainable],
    partitions: int,
    settle: float,
    drain_timeout: float,
    report: Callable[[StepDone], None],
) -> None:
    """Run the plan. ``RouteError`` before anything is stored when the request is bad;
    ``RouteConflictError`` when another change came first; ``MigrationError`` when a
    drain does not finish within ``drain_timeout``."""
    table = await routes.current() or default_table(clusters)
    plan = plan_migration(table, clusters, prefix, target, ordered=ordered)
    for number, step in enumerate(plan, start=1):
        started = time.monotonic()
        if isinstance(step, TableStep):
            await routes.put(step.table)
            await anyio.sleep(settle)  # the gateways' and handlers' time to apply it
            route = route_for(prefix, step.table)
            detail = (
                f"table v{step.table.version}: produce {route.produce}, consume "
                f"{','.join(route.consume)}"
                + (f", draining {','.join(route.draining)}" if route.draining else "")
                + (" (target held back)" if route.ordered and route.draining else "")
            )
        else:
            detail = await _drain(step, transports, partitions, drain_timeout)
        report(StepDone(number, len(plan), step.why, time.monotonic() - started, detail))


async def _drain(
    step: DrainStep, transports: Mapping[str, Drainable], partitions: int, patience: float
) -> str:
    parts: list[str] = []
    for cluster in step.clusters:
        source = transports[cluster]
        marks = {p: await source.drain_mark(p) for p in range(partitions)}
        waiting_at_mark = 0
        left = set(marks)
        first = True
        with anyio.move_on_after(patience) as scope:
            while left:
                for partition in sorted(left):
                    done, waiting = await source.drained(partition, marks[partition])
                    if first:
                        waiting_at_mark += waiting
                    if done:
                        left.discard(partition)
                first = False
                if left:
                    await anyio.sleep(_POLL)  # consumer ack floors: polled, no event
        if scope.cancelled_caught:
            raise MigrationError(
                f"{cluster}: {len(left)} partitions not drained within {patience} s "
                f"(e.g. {sorted(left)[:5]}); the route stays draining: run again to resume"
            )
        parts.append(f"{cluster}: {waiting_at_mark} messages waiting at the mark, all acked")
    return "; ".join(parts)


async def open_datacenters(
    stack: AsyncExitStack, *, prefix: str, target: str, ordered: bool
) -> tuple[ClusterMap, RouteStore, dict[str, Drainable]]:
    """The cluster map, the route file and the transport of each cluster, entered. The
    request is checked against the stored table first (``RouteError``), so a bad one is
    refused without connecting to any cluster, as is a transport without multi-datacenter
    routing."""
    # imported here: `shoal --help` loads no broker client
    from adapters.routes import RouteFile  # noqa: PLC0415
    from services.common.backends import datacenter_backends  # noqa: PLC0415
    from services.common.settings import (  # noqa: PLC0415
        RoutingSettings,
        ShoalSettings,
        load_settings,
    )

    try:
        kinds = datacenter_backends(load_settings(ShoalSettings).transport)
    except ValueError as exc:
        raise RouteError(f"SHOAL_CLUSTERS: {exc}") from None
    routing = load_settings(RoutingSettings)
    clusters = routing.cluster_map
    if clusters is None:
        raise RouteError("SHOAL_CLUSTERS is not set: there is nothing to migrate between")
    routes = await stack.enter_async_context(
        RouteFile(routing.routes_file, poll_interval=routing.routes_poll)
    )
    table = await routes.current() or default_table(clusters)
    plan_migration(table, clusters, prefix, target, ordered=ordered)
    base = load_settings(kinds.settings)
    transports: dict[str, Drainable] = {
        name: await stack.enter_async_context(
            kinds.transport(base.for_cluster(name, clusters.addresses(name)))
        )
        for name in clusters.names
    }
    return clusters, routes, transports
