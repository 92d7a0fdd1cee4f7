"""Analytics over landed data on PySpark 4.2 (the DESIGN's Analytics port, synchronous).

``SparkAnalytics`` runs three jobs over a landing zone's Delta table (layout and schema:
``adapters._parquet_format``): ``audit`` (accepted vs landed), ``report``
(volume, skew, handler load over time, latency, rebalances) and ``weights`` (partition
weights from measured load, for the leader's ``weighted`` strategy).
``render_report_html`` draws a report as one static page.

Importing this package imports neither pyspark nor pydantic: ``SparkAnalytics``,
``SparkSettings``, ``start_spark`` and ``stop_spark`` load on first use, as does
``render_report_html`` (jinja2), so the CLI and the leader (which only reads weights files)
stay light.

Spark
    One SparkSession per process, started on first use with ``SparkSettings`` (``local[*]``
    by default; a cluster with ``master="spark://host:7077"``) and stopped at interpreter
    exit. Start-up: Delta Lake's extension and catalog, its jars from a cache
    (``adapters.spark._jars``: fetched once by ``python -m infra.local.delta_jars``; a
    session never resolves packages over the network), UI off, console progress off,
    in-memory catalog (no Hive), ``spark.sql.shuffle.partitions`` 4, driver memory 1g;
    when local, the driver binds to 127.0.0.1 and its JVM runs the C1 JIT only
    (``-XX:TieredStopAtLevel=1``: a command's few short jobs finish sooner cold).
    ``SHOAL_SPARK_EXTRA_CONF`` (JSON) overrides any of it. Timestamps are collected as
    ``unix_micros`` (PySpark would turn them into naive datetimes in the Python process's
    local zone). The JVM's stderr is a pipe drained by a thread: ``SparkStartError`` (and
    a ``SparkJobError`` when the JVM dies) end with its last lines, because PySpark's own
    error is only ``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its
    port number``.

Reading
    The landing zone (a directory, or ``s3://bucket/prefix`` read through ``s3a``) is a
    Delta Lake table: its data are the files its newest version names, not whatever lies
    in the folder (a crashed writer's files, files compacted away and not yet vacuumed).
    Every job reads it with ``spark.read.format("delta")``; ``date`` is its partition
    column, ``payload`` the message body as a JSON string. A directory without a
    ``_delta_log`` is refused (``LandingDirError``), Parquet files in it or not.
    Announcements (``kind == "announce"``, sequence 0) are not data: the audit counts them
    apart, the report and weights leave them out.

Audit: accepted, landed, lost, duplicated
    Per series (gateway_id, project_id), *due* sequences are the accepted ones that should
    have landed by now. A due sequence with no row is **lost**; rows beyond the first for a
    due sequence are **duplicates** (redeliveries: at-least-once allows them).

    *In flight vs lost.* A message accepted a moment ago may still be in the broker, so the
    audit never counts it: with ``as_of`` (default now) and ``settle_seconds`` (default
    120 s, above the worst redelivery-plus-handoff delay), only sequences accepted at or
    before ``cutoff = as_of - settle`` are due; later ones are in flight (rows already
    landed for them are reported as ``after_cutoff``, not counted). ``drained=True`` says
    the pipeline was drained (load stopped, backlog 0): every accepted sequence is due.

    *Where "accepted" comes from.*
    - Without a ledger (default): from the sequences themselves. The gateway numbers each
      series 1, 2, 3 ... in receive order, so a series' due range is 1..N, N its highest
      landed sequence received at or before the cutoff; every gap below N is lost. Limits:
      a loss after N (the series' tail) is invisible, and sequences burnt by a 503 (never
      accepted) count as lost. ``AuditResult.limits`` says so in the output.
    - With the gateway's ledger (``ledger_dir``): exactly the ranges the gateway answered
      202 for, due when answered at or before the cutoff. Tail losses are found, 503 ranges
      are ``refused`` (not lost), accepted-after-cutoff ranges not landed are ``in_flight``,
      and landed sequences no 202 covered are ``unacknowledged``.

    *Ledger format* (written by the gateway; JSON Lines, UTF-8, one file per gateway
    process ``{ledger_dir}/{gateway_id}.jsonl``, default ``{data_dir}/_ledger``): one object
    per request that reserved sequences, appended (and flushed to the OS) *before* the
    answer is sent, fsynced at least every second and at shutdown::

        {"v": 1, "gateway_id": "gw-a1", "project_id": "dev-1", "first_sequence": 41,
         "last_sequence": 50, "outcome": "accepted", "received_at": 1763773200.123456,
         "decided_at": 1763773200.131002}

    ``outcome`` is ``accepted`` (answered 202) or ``refused`` (answered 503); times are
    seconds since the epoch. A line cut short by a crash is skipped.

Weights file (``PartitionWeights.to_json``; read with ``read_weights_file``)::

    {"version": 1, "partitions": 128, "metric": "rows", "floor": 0.05,
     "weights": {"0": 1.73, "1": 0.05, ...every partition...},
     "loads": {"0": 17300, "1": 0, ...}, "measured_from": {...}, "generated_at": "...Z"}

    ``weights[p] = max(load_p / mean load over all P partitions, floor)``: mean ~1.0.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from adapters.spark._errors import (
    AnalyticsError,
    LandingDirError,
    NoDataError,
    SparkJobError,
    SparkStartError,
)
from adapters.spark._jars import DELTA_JARS, delta_jars_dir, fetch_delta_jars
from adapters.spark._model import (
    DEFAULT_SETTLE_SECONDS,
    AuditResult,
    LostRange,
    PartitionWeights,
    SeriesAudit,
    WeightsFileError,
    load_skew,
    nines,
    nines_text,
    per_million,
    read_weights_file,
)
from adapters.spark._zone import check_local_zone, not_a_table

if TYPE_CHECKING:
    from adapters.spark._analytics import JobProgress, SparkAnalytics
    from adapters.spark._html import render_report_html
    from adapters.spark._s3a import S3aSettings, s3a_conf
    from adapters.spark._session import start_spark, stop_spark
    from adapters.spark._settings import SparkSettings

__all__ = [
    "DEFAULT_SETTLE_SECONDS",
    "DELTA_JARS",
    "AnalyticsError",
    "AuditResult",
    "JobProgress",
    "LandingDirError",
    "LostRange",
    "NoDataError",
    "PartitionWeights",
    "S3aSettings",
    "SeriesAudit",
    "SparkAnalytics",
    "SparkJobError",
    "SparkSettings",
    "SparkStartError",
    "WeightsFileError",
    "check_local_zone",
    "delta_jars_dir",
    "fetch_delta_jars",
    "load_skew",
    "nines",
    "nines_text",
    "not_a_table",
    "per_million",
    "read_weights_file",
    "render_report_html",
    "s3a_conf",
    "start_spark",
    "stop_spark",
]

_LAZY = {
    "SparkSettings": "adapters.spark._settings",
    "S3aSettings": "adapters.spark._s3a",
    "s3a_conf": "adapters.spark._s3a",
    "JobProgress": "adapters.spark._analytics",
    "SparkAnalytics": "adapters.spark._analytics",
    "start_spark": "adapters.spark._session",
    "stop_spark": "adapters.spark._session",
    "render_report_html": "adapters.spark._html",  # jinja2: 2 MB the leader does without
}


def __getattr__(name: str) -> Any:
    """Load the pyspark-backed names (and the report's page, jinja2) on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
