"""The handler's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class HandlerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.delivered = Counter(
            "shoal_handler_messages_delivered", "Deliveries fetched", registry=registry
        )
        self.acked = Counter("shoal_handler_messages_acked", "Deliveries acked", registry=registry)
        self.nakd = Counter("shoal_handler_messages_nakd", "Deliveries nak'd", registry=registry)
        self.redelivered = Counter(
            "shoal_handler_messages_redelivered", "Deliveries with attempt > 1", registry=registry
        )
        self.landed = Counter("shoal_handler_rows_landed", "Rows written", registry=registry)
        self.owned = Gauge("shoal_handler_partitions_owned", "Partitions owned", registry=registry)
        self.handoff_seconds = Histogram(
            "shoal_handler_handoff_seconds",
            "From grant to first fetch (waiting for the previous owner's release)",
            registry=registry,
        )
        self.lease_losses = Counter(
            "shoal_handler_lease_losses", "Times the lease was lost", registry=registry
        )
