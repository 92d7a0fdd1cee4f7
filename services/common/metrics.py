"""Prometheus helpers: every service keeps its own registry (tests run several in one process)."""

from __future__ import annotations

from fastapi import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from core.ports import TableHealth


def metrics_response(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class TableMetrics:
    """The landing table's size and upkeep (``services.common.upkeep``): the gauges show
    the table as last read, the counters what this process did to it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, what: str) -> Gauge:
            return Gauge(name, what, registry=registry)

        def counter(name: str, what: str) -> Counter:
            return Counter(name, what, registry=registry)

        self.version = gauge("shoal_table_version", "The landing table's version")
        self.files = gauge("shoal_table_files", "Data files of the landing table")
        self.small_files = gauge(
            "shoal_table_small_files", "Data files of the landing table below the small size"
        )
        self.bytes = gauge("shoal_table_bytes", "Bytes of the landing table's data files")
        self.rows = gauge("shoal_table_rows", "Rows of the landing table")
        self.log_files = gauge("shoal_table_log_files", "Files in the landing table's log")
        self.log_bytes = gauge("shoal_table_log_bytes", "Bytes of the landing table's log")
        self.compactions = counter("shoal_table_compactions", "Compactions of the landing table")
        self.files_compacted = counter(
            "shoal_table_files_compacted", "Data files compaction rewrote into larger ones"
        )
        self.checkpoints = counter("shoal_table_checkpoints", "Checkpoints written")
        self.log_files_removed = counter(
            "shoal_table_log_files_removed", "Log files removed once a checkpoint covered them"
        )
        self.vacuumed_files = counter(
            "shoal_table_vacuumed_files", "Files no table version names, deleted by vacuum"
        )
        self.failures = counter("shoal_table_upkeep_failures", "Upkeep rounds that failed")
        self.last_compaction = gauge(
            "shoal_table_last_compaction_timestamp", "Unix time of the last compaction"
        )
        self.last_vacuum = gauge(
            "shoal_table_last_vacuum_timestamp", "Unix time of the last vacuum"
        )

    def observe(self, health: TableHealth) -> None:
        self.version.set(health.version)
        self.files.set(health.files)
        self.small_files.set(sum(day.small for day in health.days))
        self.bytes.set(health.bytes)
        self.rows.set(health.rows)
        self.log_files.set(health.log_files)
        self.log_bytes.set(health.log_bytes)
