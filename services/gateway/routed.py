"""``RoutedPublisher``: the gateway's publisher across datacenters (``core.routing``).

Each project's messages go to its route's producing cluster (``LOCAL``: this gateway's
own); when that cluster does not confirm, an unordered route's messages go to its other
consumed clusters in turn, so production continues while a datacenter is down. The
answer is 202 only once some cluster confirmed every message of the request. A failover
after a publish that timed out (rather than being refused) may store a message in two
clusters: it is then landed twice under one message id (never lost); a transport that
refuses at once while disconnected (``NatsSettings.refuse_while_disconnected``) keeps that
to publishes cut off mid-way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.errors import BrokerUnavailableError, PublishError
from core.messages import Envelope
from core.ports import RouteStore, Transport
from core.routing import ClusterMap, produce_targets, route_for
from services.common.clusters import RouteView
from services.common.logs import fields

__all__ = ["RoutedPublisher"]

log = logging.getLogger("shoal.gateway")


@dataclass(frozen=True)
class RoutedPublisher:
    transports: Mapping[str, Transport]  # one per cluster of ``clusters``, entered
    routes: RouteStore
    clusters: ClusterMap
    local: str  # this gateway's own cluster (SHOAL_CLUSTER)
    view: RouteView = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "view", RouteView(self.clusters))

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Publish each project's envelopes (in order) to the first of its route's
        clusters that confirms them. ``PublishError`` naming every cluster tried when
        none did (some of them may have stored some messages: a retry is a no-op there)."""
        table = self.view.apply(await self.routes.current())
        groups: dict[str, list[Envelope]] = {}
        for envelope in envelopes:
            groups.setdefault(envelope.project_id, []).append(envelope)
        for project_id, group in groups.items():
            route = route_for(project_id, table)
            errors: list[str] = []
            for cluster in produce_targets(route, self.local):
                try:
                    await self.transports[cluster].publish(group)
                except (PublishError, BrokerUnavailableError) as exc:
                    errors.append(f"{cluster}: {exc}")
                    log.warning(
                        "cluster did not confirm; trying the next",
                        extra=fields(project=project_id, cluster=cluster, error=str(exc)),
                    )
                    continue
                if errors:
                    log.info(
                        "published to a fallback cluster",
                        extra=fields(project=project_id, cluster=cluster, messages=len(group)),
                    )
                break
            else:
                raise PublishError(
                    f"{len(group)} of {len(envelopes)} messages not confirmed by any cluster "
                    f"of route {route.prefix or '(default)'!r}: " + "; ".join(errors)
                )

    async def backlog(self, partition: int) -> int:
        """The local cluster's backlog, else the first other cluster's that answers (the
        gateway is ready while any cluster it may publish to answers)."""
        failures: list[Exception] = []
        for cluster in (self.local, *(c for c in self.clusters.names if c != self.local)):
            try:
                return await self.transports[cluster].backlog(partition)
            except (BrokerUnavailableError, TimeoutError) as exc:
                failures.append(exc)
        raise BrokerUnavailableError(f"no cluster answered: {failures}")
