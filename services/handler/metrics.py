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
        self.dead_lettered = Counter(
            "shoal_handler_messages_dead_lettered",
            "Deliveries that cannot be processed, sent to the dead-letter stream",
            registry=registry,
        )
        self.dropped = Counter(
            "shoal_handler_messages_dropped",
            "Buffered deliveries left unacked because the lease was lost (redelivered)",
            registry=registry,
        )
        self.registrations_refused = Counter(
            "shoal_handler_registrations_refused",
            "Project registrations refused: the partition holds max_projects_per_partition",
            registry=registry,
        )
        self.redelivered = Counter(
            "shoal_handler_messages_redelivered", "Deliveries with attempt > 1", registry=registry
        )
        self.landed = Counter("shoal_handler_rows_landed", "Rows written", registry=registry)
        self.files = Counter(
            "shoal_handler_files_landed", "Parquet files made visible", registry=registry
        )
        self.file_rows = Histogram(
            "shoal_handler_rows_per_landing",
            "Rows per landed batch (one file per date in it)",
            buckets=(10, 100, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000),
            registry=registry,
        )
        self.buffered_rows = Gauge(
            "shoal_handler_rows_buffered", "Rows waiting for the next roll", registry=registry
        )
        self.sink_failures = Counter(
            "shoal_handler_sink_failures",
            "Failed attempts to write a batch (retried with backoff; nothing nak'd)",
            registry=registry,
        )
        self.owned = Gauge("shoal_handler_partitions_owned", "Partitions owned", registry=registry)
        self.handoff_seconds = Histogram(
            "shoal_handler_handoff_seconds",
            "From grant to first fetch (waiting for the previous owner's release)",
            registry=registry,
        )
        self.lease_losses = Counter(
            "shoal_handler_lease_losses", "Times the lease was lost", registry=registry
        )
