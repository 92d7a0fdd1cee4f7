"""Multi-datacenter routing: which cluster each project is produced to and consumed from,
and the plan that moves a project prefix from one cluster to another (NSQ's lookup idea).

A *cluster* is one broker cluster (one datacenter); ``ClusterMap`` names them with their
addresses (configuration). A ``RouteTable`` (kept in a ``RouteStore``, versioned) says,
per project prefix, where producers publish and which clusters handlers consume; a project
takes the route of its longest matching prefix, else the table's default: produce to the
gateway's own cluster (``LOCAL``), consume from every cluster.

Rules that keep every accepted message landed:

- a route consumes every cluster it may be produced to (its producing cluster and, for an
  unordered route, the clusters a gateway falls back to when that one is down);
- a migration only stops consuming a cluster after a drain step has waited until that
  cluster's consumers acked everything it stored up to the switch (``DrainStep``);
- an ordered route lands from one cluster at a time: while its old clusters drain, the
  target's messages are held back (not landed, redelivered later), then released.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from core.errors import RouteError

__all__ = [
    "LOCAL",
    "ClusterMap",
    "DrainStep",
    "MigrationStep",
    "Route",
    "RouteError",
    "RouteTable",
    "TableStep",
    "default_table",
    "held_back",
    "landing_clusters",
    "migrate_table",
    "parse_cluster_map",
    "plan_migration",
    "produce_targets",
    "route_for",
    "subscribed_clusters",
    "tables_of",
    "validate_table",
]

LOCAL = "@local"
"""The producing cluster "the gateway's own": each gateway publishes to its own cluster."""


@dataclass(frozen=True, slots=True)
class ClusterMap:
    """Cluster name -> its broker addresses (configuration, the same in every process)."""

    clusters: tuple[tuple[str, tuple[str, ...]], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.clusters]
        if not names:
            raise RouteError("the cluster map names no cluster")
        for name, addresses in self.clusters:
            if not name or not name.replace("-", "").replace("_", "").isalnum():
                raise RouteError(f"cluster name {name!r}: letters, digits, '-' and '_' only")
            if not addresses:
                raise RouteError(f"cluster {name!r} has no address")
        if len(set(names)) != len(names):
            raise RouteError(f"a cluster is named twice in {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(name for name, _ in self.clusters))

    def addresses(self, name: str) -> tuple[str, ...]:
        for cluster, addresses in self.clusters:
            if cluster == name:
                return addresses
        raise RouteError(f"unknown cluster {name!r} (known: {', '.join(self.names)})")


def parse_cluster_map(text: str) -> ClusterMap:
    """``east=nats://a:4222|nats://b:4222,west=nats://c:4222`` -> ``ClusterMap`` (the form
    of ``SHOAL_CLUSTERS``: clusters separated by ``,``, one cluster's addresses by ``|``)."""
    clusters: list[tuple[str, tuple[str, ...]]] = []
    for item in text.split(","):
        name, sep, addresses = item.strip().partition("=")
        if not sep:
            raise RouteError(f"cluster map entry {item!r} is not NAME=ADDRESS[|ADDRESS...]")
        clusters.append((name.strip(), tuple(a.strip() for a in addresses.split("|") if a.strip())))
    return ClusterMap(tuple(clusters))


@dataclass(frozen=True, slots=True)
class Route:
    """Where projects starting with ``prefix`` go.

    ``produce``: the cluster gateways publish to (``LOCAL``: each gateway's own).
    ``consume``: the clusters handlers land these projects from (sorted, no repeats).
    ``ordered``: per-project order matters: no fallback to another cluster when the
    producing one is down, and never landed from two clusters at once.
    ``draining``: clusters still consumed but no longer produced to (a migration's
    source); gateways never fall back to them. On an ordered route the producing
    cluster's messages are held back while any cluster drains.
    """

    prefix: str
    produce: str
    consume: tuple[str, ...]
    ordered: bool = False
    draining: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteTable:
    """The routes in force; ``version`` grows by one with every change (compare-and-set)."""

    version: int
    default: Route
    routes: tuple[Route, ...] = ()


def default_table(clusters: ClusterMap) -> RouteTable:
    """The table before any change: every project produced locally, consumed everywhere."""
    return RouteTable(version=0, default=Route("", LOCAL, clusters.names))


def validate_table(table: RouteTable, clusters: ClusterMap) -> None:
    """Raise ``RouteError`` naming the first broken rule of ``table`` (see the module doc)."""
    if table.version < 0:
        raise RouteError(f"route table version {table.version} is negative")
    if table.default.prefix != "":
        raise RouteError(f"the default route has prefix {table.default.prefix!r}, not ''")
    prefixes = [route.prefix for route in table.routes]
    if len(set(prefixes)) != len(prefixes):
        raise RouteError(f"a prefix has two routes in {prefixes}")
    for route in (table.default, *table.routes):
        if route is not table.default and not route.prefix:
            raise RouteError("only the default route has the empty prefix")
        _validate_route(route, clusters)


def _validate_route(route: Route, clusters: ClusterMap) -> None:
    where = f"route {route.prefix!r}" if route.prefix else "the default route"
    known = set(clusters.names)
    if not route.consume:
        raise RouteError(f"{where} consumes no cluster")
    if list(route.consume) != sorted(set(route.consume)):
        raise RouteError(f"{where}: consume list {route.consume} is not sorted and unique")
    for name in (*route.consume, *route.draining, route.produce):
        if name != LOCAL and name not in known:
            raise RouteError(f"{where}: unknown cluster {name!r} (known: {sorted(known)})")
    if route.produce == LOCAL:
        if set(route.consume) != known:
            raise RouteError(f"{where} produces locally, so it must consume every cluster")
        if route.ordered or route.draining:
            raise RouteError(f"{where} produces locally: it can be neither ordered nor draining")
        return
    if route.produce not in route.consume:
        raise RouteError(
            f"{where} produces to {route.produce!r} but does not consume it: "
            "its messages would never land"
        )
    if list(route.draining) != sorted(set(route.draining)):
        raise RouteError(f"{where}: draining list {route.draining} is not sorted and unique")
    if not set(route.draining) <= set(route.consume) or route.produce in route.draining:
        raise RouteError(f"{where}: draining clusters must be consumed and not produced to")
    if route.ordered and set(route.consume) != {route.produce, *route.draining}:
        raise RouteError(
            f"{where} is ordered: it consumes only its producing cluster "
            "and the clusters still draining"
        )


def route_for(project_id: str, table: RouteTable) -> Route:
    """The route of ``project_id``: its longest matching prefix, else the default."""
    best = table.default
    for route in table.routes:
        if project_id.startswith(route.prefix) and len(route.prefix) > len(best.prefix):
            best = route
    return best


def produce_targets(route: Route, local: str) -> tuple[str, ...]:
    """The clusters a gateway of cluster ``local`` tries for ``route``, in order: the
    producing cluster, then (unordered routes only) the other consumed clusters that are
    not draining. Every one of them is consumed, so a publish confirmed by any is landed."""
    first = local if route.produce == LOCAL else route.produce
    if route.ordered:
        return (first,)
    others = sorted(set(route.consume) - set(route.draining) - {first})
    return (first, *others)


def landing_clusters(route: Route) -> tuple[str, ...]:
    """The clusters whose messages of ``route`` are landed now (not held back)."""
    if route.ordered and route.draining:
        return route.draining
    return route.consume


def held_back(project_id: str, cluster: str, table: RouteTable) -> bool:
    """True when a message of ``project_id`` read from ``cluster`` must not be landed yet:
    its ordered route is draining its old clusters and ``cluster`` is the new one. Any
    other message read is landed, even from a cluster its route no longer names (a late
    publish by a gateway on an older table): nothing accepted is dropped. (A handler
    reads the stored table again before it decides on such a message: see
    ``names_cluster``.)"""
    route = route_for(project_id, table)
    return cluster in route.consume and cluster not in landing_clusters(route)


def names_cluster(project_id: str, cluster: str, table: RouteTable) -> bool:
    """Whether ``project_id``'s route consumes ``cluster``. A message read from a cluster
    its route does not name was published on another table: an older one, or a newer one
    the reader has not seen yet (a gateway polled the route store first), whose ordered
    switch would hold the message back."""
    return cluster in route_for(project_id, table).consume


def subscribed_clusters(table: RouteTable) -> tuple[str, ...]:
    """The clusters a handler reads every owned partition from: all that any route consumes."""
    names: set[str] = set()
    for route in (table.default, *table.routes):
        names.update(route.consume)
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True)
class TableStep:
    """Store ``table`` (its version is the previous one's plus one)."""

    why: str
    table: RouteTable


@dataclass(frozen=True, slots=True)
class DrainStep:
    """Wait until every cluster of ``clusters`` has landed everything it stored (up to
    now) on the partitions of projects starting with ``prefix``."""

    why: str
    prefix: str
    clusters: tuple[str, ...]


MigrationStep = TableStep | DrainStep


def migrate_table(table: RouteTable, prefix: str, route: Route) -> RouteTable:
    """``table`` with ``route`` as the route of ``prefix`` (replacing any), version + 1."""
    others = tuple(r for r in table.routes if r.prefix != prefix)
    routes = tuple(sorted((*others, route), key=lambda r: r.prefix))
    return replace(table, version=table.version + 1, routes=routes)


def plan_migration(
    table: RouteTable, clusters: ClusterMap, prefix: str, target: str, *, ordered: bool
) -> tuple[MigrationStep, ...]:
    """The steps that move projects starting with ``prefix`` to cluster ``target``.

    Longer prefixes with routes of their own keep them. ``ordered`` (or a route already
    ordered) gives the ordered plan. Raises ``RouteError`` when ``prefix`` is empty or
    not a project-id prefix, ``target`` is unknown, or the prefix already produces to
    and consumes only ``target``.

    Unordered: consume the target too; produce to the target (the sources drain); wait
    until the sources drained; consume the target only. Ordered: produce to the target
    with its messages held back while the sources drain; wait; consume the target only
    (which releases them). Either way no step leaves a cluster that may still be
    produced to unconsumed.
    """
    validate_table(table, clusters)
    if not prefix or not all(c.isalnum() or c in "-_" for c in prefix):
        raise RouteError(f"project prefix {prefix!r}: letters, digits, '-' and '_', not empty")
    if target not in clusters.names:
        raise RouteError(f"unknown cluster {target!r} (known: {', '.join(clusters.names)})")
    current = route_for(prefix, table)
    ordered = ordered or current.ordered
    if current.produce == target and current.consume == (target,):
        raise RouteError(f"projects {prefix!r}* already go to {target!r} only")
    sources = tuple(sorted((set(current.consume) | set(current.draining)) - {target}))
    both = tuple(sorted({*current.consume, target}))
    steps: list[MigrationStep] = []
    latest = table

    def store(why: str, route: Route) -> None:
        nonlocal latest
        latest = migrate_table(latest, prefix, route)
        steps.append(TableStep(why, latest))

    if not ordered and target not in current.consume:
        store("consume the target too", replace(current, prefix=prefix, consume=both))
    producing = Route(prefix, target, both, ordered=ordered, draining=sources)
    store(
        "produce to the target; hold its messages back while the sources drain"
        if ordered
        else "produce to the target; the sources drain",
        producing,
    )
    if sources:
        steps.append(DrainStep("wait until the sources drained", prefix, sources))
    store("consume the target only", Route(prefix, target, (target,), ordered=ordered))
    return tuple(steps)


def tables_of(steps: Iterable[MigrationStep]) -> tuple[RouteTable, ...]:
    """The tables a plan stores, in order."""
    return tuple(step.table for step in steps if isinstance(step, TableStep))
