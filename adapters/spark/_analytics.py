"""``SparkAnalytics``: audit, report and partition weights over a landing zone's Delta table."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from adapters.spark._errors import LandingDirError, NoDataError, SparkJobError
from adapters.spark._model import (
    DEFAULT_SETTLE_SECONDS,
    AuditResult,
    LostRange,
    PartitionWeights,
    SeriesAudit,
)
from adapters.spark._s3a import s3a_url
from adapters.spark._session import RunningSpark, start_spark
from adapters.spark._settings import SparkSettings
from adapters.spark._zone import Zone, check_local_zone, is_s3, not_a_table

__all__ = ["JobProgress", "SparkAnalytics"]

SERIES = ("gateway_id", "project_id")

# Spark's error conditions for a path with no Delta table (nothing there, or no log).
_NO_TABLE = frozenset({"PATH_NOT_FOUND", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE"})

DeadLetterKey: TypeAlias = tuple[str, str, int, float]
"""A dead letter as the audit matches it: gateway_id, project_id, sequence, received_at."""

DEAD_LETTER_SCHEMA = StructType(
    [
        StructField("gateway_id", StringType()),
        StructField("project_id", StringType()),
        StructField("sequence", LongType()),
        StructField("dead_received_at", TimestampType()),
    ]
)

LEDGER_READ_SCHEMA = StructType(
    [
        StructField("v", LongType()),
        StructField("gateway_id", StringType()),
        StructField("project_id", StringType()),
        StructField("first_sequence", LongType()),
        StructField("last_sequence", LongType()),
        StructField("outcome", StringType()),
        StructField("received_at", DoubleType()),
        StructField("decided_at", DoubleType()),
    ]
)

NICE_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)

LIMITS_SEQUENCES = (
    "accepted is inferred from sequence numbers (no gateway ledger): a series counts "
    "sequences 1..N, N its highest landed sequence received by the cutoff",
    "losses after a series' last landed sequence (its tail) cannot be seen without a ledger",
    "sequences burnt by a refused request (503) count as lost: a ledger tells them apart",
)


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A snapshot of Spark's active stages (for a progress display)."""

    active_stages: int
    tasks_done: int
    tasks_total: int


class SparkAnalytics:
    """Spark jobs over landed data (the DESIGN's Analytics port, synchronous).

    Entering starts (or joins) the process's one SparkSession; leaving does not stop it
    (it stops at interpreter exit), so several ``SparkAnalytics`` in one process share it.
    Every method reads the zone's Delta table at its newest version and raises
    ``LandingDirError`` for a missing directory or a zone with no Delta table,
    ``SparkJobError`` when Spark fails (with the JVM's stderr tail when the JVM died), and
    ``SparkStartError`` (from entering) when Spark cannot start. ``on_step`` is told what
    each job is doing.
    """

    def __init__(
        self,
        settings: SparkSettings | None = None,
        *,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings or SparkSettings()
        self._on_step = on_step
        self._running: RunningSpark | None = None

    def __enter__(self) -> Self:
        self._step(f"starting Spark ({self.settings.master})")
        self._running = start_spark(self.settings)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._running = None

    @property
    def spark(self) -> SparkSession:
        if self._running is None:
            raise RuntimeError("use SparkAnalytics as a context manager (with ...:)")
        return self._running.session

    def progress(self) -> JobProgress:
        """Tasks done / total over the active stages (safe to call from another thread)."""
        running = self._running
        if running is None:
            return JobProgress(0, 0, 0)
        try:
            tracker = running.session.sparkContext.statusTracker()
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        except Exception:  # the context is stopping: no progress to show
            return JobProgress(0, 0, 0)
        live = [s for s in stages if s is not None]
        return JobProgress(
            active_stages=len(live),
            tasks_done=sum(s.numCompletedTasks for s in live),
            tasks_total=sum(s.numTasks for s in live),
        )

    # --- audit -------------------------------------------------------------------------

    def audit(
        self,
        data_dir: Zone,
        *,
        as_of: datetime | None = None,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        drained: bool = False,
        ledger_dir: Path | None = None,
        dead_letters: Sequence[DeadLetterKey] = (),
        worst: int = 20,
        max_ranges: int = 100,
    ) -> AuditResult:
        """Accepted sequences per (gateway_id, project_id) against what landed.

        Due: ``drained`` -> every accepted sequence (the pipeline is drained: nothing is in
        flight); otherwise those accepted at or before ``cutoff = as_of - settle_seconds``
        (``as_of`` defaults to now). Accepted: from ``ledger_dir`` (the gateway's ledger)
        when given, else inferred from the landed sequences. See the package docstring.
        ``dead_letters``: the transport's dead letters as ``(gateway_id, project_id,
        sequence, received_at)``; a due sequence among them that did not land is
        dead-lettered, not lost.
        """
        with self._spark_errors():
            return self._audit(
                data_dir,
                as_of=as_of,
                settle_seconds=settle_seconds,
                drained=drained,
                ledger_dir=ledger_dir,
                dead_letters=dead_letters,
                worst=worst,
                max_ranges=max_ranges,
            )

    def _audit(
        self,
        data_dir: Zone,
        *,
        as_of: datetime | None,
        settle_seconds: float,
        drained: bool,
        ledger_dir: Path | None,
        dead_letters: Sequence[DeadLetterKey],
        worst: int,
        max_ranges: int,
    ) -> AuditResult:
        if drained:
            as_of, cutoff = None, None
        else:
            as_of = (as_of or datetime.now(UTC)).astimezone(UTC)
            cutoff = as_of - timedelta(seconds=settle_seconds)
        landed = self._landed(data_dir)
        ledger = self._ledger(ledger_dir) if ledger_dir is not None else None

        self._step("audit: counting landed sequences")
        is_data = (F.col("kind") != "announce") & (F.col("sequence") >= 1)
        message_hash = F.xxhash64("message_id")
        per_seq = (
            landed.groupBy(*SERIES, "sequence")
            .agg(
                F.sum(F.when(is_data, 1).otherwise(0)).alias("n"),
                F.sum(F.when(is_data, 0).otherwise(1)).alias("announcements"),
                # two message ids on one sequence (hashes compare faster than strings)
                (F.min(message_hash) != F.max(message_hash)).alias("conflict"),
                F.min("received_at").alias("received_at"),
            )
            .cache()
        )
        try:
            first = per_seq.agg(F.coalesce(F.sum("announcements"), F.lit(0))).first()
            announcements = int(first[0]) if first is not None else 0
            data_seq = self._with_dead(per_seq.filter(F.col("n") > 0), dead_letters)
            if ledger is None:
                per_series, missing = self._due_from_sequences(data_seq, cutoff)
                refused = None
            else:
                per_series, missing = self._due_from_ledger(data_seq, ledger, cutoff)
                self._step("audit: counting refused ranges")
                row = (
                    ledger.filter(F.col("outcome") == "refused")
                    .agg(F.sum(F.col("last_sequence") - F.col("first_sequence") + 1))
                    .first()
                )
                refused = int(row[0] or 0) if row is not None else 0
            totals, worst_rows = self._audit_totals(per_series, worst, ledger is not None)
            lost_ranges: tuple[LostRange, ...] = ()
            if totals["lost"]:
                self._step("audit: listing lost sequence ranges")
                lost_ranges = tuple(
                    LostRange(r["gateway_id"], r["project_id"], int(r["first"]), int(r["last"]))
                    for r in missing.orderBy(*SERIES, "first").limit(max_ranges).collect()
                )
        finally:
            per_seq.unpersist()
        with_ledger = ledger is not None
        return AuditResult(
            data_dir=str(data_dir),
            mode="drained" if drained else "as-of",
            accepted_from="ledger" if with_ledger else "sequences",
            as_of=as_of,
            settle_seconds=0.0 if drained else settle_seconds,
            cutoff=cutoff,
            series=totals["series"],
            accepted=totals["accepted"],
            landed=totals["landed"],
            lost=totals["lost"],
            dead_lettered=totals["dead_lettered"],
            duplicated=totals["duplicated"],
            conflicting=totals["conflicting"],
            after_cutoff=totals["after"] + (0 if with_ledger else totals["outside"]),
            announcements=announcements,
            in_flight=totals["in_flight"] if with_ledger else None,
            refused=refused,
            unacknowledged=totals["outside"] if with_ledger else None,
            worst=worst_rows,
            lost_ranges=lost_ranges,
            limits=() if with_ledger else LIMITS_SEQUENCES,
        )

    @staticmethod
    def _due_from_sequences(
        data_seq: DataFrame, cutoff: datetime | None
    ) -> tuple[DataFrame, DataFrame]:
        """Per-series counts and lost ranges when accepted = 1..N, N the last landed and due.

        No expansion: a series' sequences 1..N are due, so lost = N - distinct landed <= N,
        and the lost ranges are the gaps between consecutive landed sequences.
        """
        eligible = (
            data_seq if cutoff is None else data_seq.filter(F.col("received_at") <= F.lit(cutoff))
        )
        last = eligible.groupBy(*SERIES).agg(F.max("sequence").alias("last"))
        rows = data_seq.join(last, list(SERIES), "left").withColumn(
            "is_due", F.coalesce(F.col("sequence") <= F.col("last"), F.lit(False))
        )
        due = F.col("is_due")
        landed = F.col("n") > 0
        per_series = (
            rows.groupBy(*SERIES)
            .agg(
                F.coalesce(F.max("last"), F.lit(0)).alias("accepted"),
                _total(due, F.col("n")).alias("landed"),
                _total(due & landed).alias("unique"),
                _total(due & ~landed & F.col("dead")).alias("dead_lettered"),
                _total(due & F.col("conflict")).alias("conflicting"),
                _total(~due, F.col("n")).alias("outside"),
            )
            .withColumn("after", F.lit(0))
            .withColumn("in_flight", F.lit(0))
        )
        order = Window.partitionBy(*SERIES).orderBy("sequence")
        missing = (
            rows.filter(due)
            .withColumn("previous", F.lag("sequence", 1, 0).over(order))
            .filter(F.col("sequence") - F.col("previous") > 1)
            .select(
                *SERIES,
                (F.col("previous") + 1).alias("first"),
                (F.col("sequence") - 1).alias("last"),
            )
        )
        return per_series, missing

    @staticmethod
    def _due_from_ledger(
        data_seq: DataFrame, ledger: DataFrame, cutoff: datetime | None
    ) -> tuple[DataFrame, DataFrame]:
        """Per-series counts and lost ranges against the ledger's accepted ranges.

        Each accepted range is expanded to its sequences (due when answered by the cutoff)
        and full-outer-joined with the landed sequences.
        """
        due_when = (
            F.lit(True) if cutoff is None else F.col("decided_at") <= F.lit(cutoff.timestamp())
        )
        key = [*SERIES, "sequence"]
        accepted = (
            ledger.filter(F.col("outcome") == "accepted")
            .select(
                *SERIES,
                F.explode(F.sequence("first_sequence", "last_sequence")).alias("sequence"),
                due_when.alias("due"),
            )
            .groupBy(*key)  # a ledger line written twice must not count twice
            .agg(F.max("due").alias("due"))
        )
        rows = accepted.join(data_seq.select(*key, "n", "conflict", "dead"), key, "full_outer")
        due = F.col("due") == F.lit(True)
        not_due = F.col("due") == F.lit(False)
        landed = F.coalesce(F.col("n"), F.lit(0)) > 0
        dead = F.coalesce(F.col("dead"), F.lit(False))
        per_series = rows.groupBy(*SERIES).agg(
            _total(due).alias("accepted"),
            _total(due & landed, F.col("n")).alias("landed"),
            _total(due & landed).alias("unique"),
            _total(due & ~landed & dead).alias("dead_lettered"),
            _total(due & F.col("conflict")).alias("conflicting"),
            _total(not_due & landed, F.col("n")).alias("after"),
            _total(not_due & ~landed & ~dead).alias("in_flight"),
            _total(F.col("due").isNull() & landed, F.col("n")).alias("outside"),
        )
        order = Window.partitionBy(*SERIES).orderBy("sequence")
        missing = (
            rows.filter(due & ~landed & ~dead)
            .withColumn("run", F.col("sequence") - F.row_number().over(order))
            .groupBy(*SERIES, "run")
            .agg(F.min("sequence").alias("first"), F.max("sequence").alias("last"))
            .drop("run")
        )
        return per_series, missing

    def _with_dead(self, data_seq: DataFrame, dead_letters: Sequence[DeadLetterKey]) -> DataFrame:
        """``data_seq`` (landed sequences) with ``dead``: the sequence is a dead letter. A
        dead letter that never landed is a row of its own (``n`` 0), so a gap it explains
        is no loss and a tail it ends is accepted."""
        key = [*SERIES, "sequence"]
        if not dead_letters:
            return data_seq.withColumn("dead", F.lit(False))
        dead = (
            self.spark.createDataFrame(
                [(g, p, int(s), datetime.fromtimestamp(t, UTC)) for g, p, s, t in dead_letters],
                DEAD_LETTER_SCHEMA,
            )
            .groupBy(*key)
            .agg(F.min("dead_received_at").alias("dead_received_at"))
        )
        return data_seq.join(dead, key, "full_outer").select(
            *key,
            F.coalesce(F.col("n"), F.lit(0)).alias("n"),
            F.coalesce(F.col("conflict"), F.lit(False)).alias("conflict"),
            F.coalesce(F.col("received_at"), F.col("dead_received_at")).alias("received_at"),
            F.col("dead_received_at").isNotNull().alias("dead"),
        )

    def _audit_totals(
        self, per_series: DataFrame, worst: int, ledger: bool
    ) -> tuple[dict[str, int], tuple[SeriesAudit, ...]]:
        self._step("audit: matching accepted against landed")
        per_series = (
            per_series.withColumn(
                "lost", F.col("accepted") - F.col("unique") - F.col("dead_lettered")
            )
            .withColumn("duplicated", F.col("landed") - F.col("unique"))
            .cache()
        )
        names = (
            "accepted", "landed", "lost", "dead_lettered", "duplicated", "conflicting", "after",
            "in_flight", "outside",
        )  # fmt: skip
        try:
            row = per_series.agg(
                F.count(F.lit(1)).alias("series"),
                *(F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in names),
            ).first()
            assert row is not None
            totals = {name: int(row[name]) for name in ("series", *names)}
            if totals["lost"] or totals["duplicated"] or totals["conflicting"]:
                self._step("audit: picking the worst series")
                rows = (
                    per_series.filter(
                        (F.col("lost") > 0) | (F.col("duplicated") > 0) | (F.col("conflicting") > 0)
                    )
                    .orderBy(F.desc("lost"), F.desc("duplicated"), *SERIES)
                    .limit(worst)
                    .collect()
                )
            else:
                rows = []
        finally:
            per_series.unpersist()
        worst_rows = tuple(
            SeriesAudit(
                gateway_id=r["gateway_id"],
                project_id=r["project_id"],
                accepted=int(r["accepted"]),
                landed=int(r["landed"]),
                lost=int(r["lost"]),
                duplicated=int(r["duplicated"]),
                conflicting=int(r["conflicting"]),
                after_cutoff=int(r["after"]) + (0 if ledger else int(r["outside"])),
            )
            for r in rows
        )
        return totals, worst_rows

    # --- report ------------------------------------------------------------------------

    def report(
        self,
        data_dir: Zone,
        *,
        partitions: int,
        bucket_seconds: int | None = None,
        window_seconds: float = 30.0,
        top_projects: int = 30,
    ) -> dict[str, Any]:
        """Volume, skew, handler load over time, latency and rebalances, as a JSON object.

        Data rows only (announcements excluded). ``bucket_seconds`` defaults to a round
        size giving at most ~120 buckets. Raises ``NoDataError`` when nothing landed.
        """
        with self._spark_errors():
            return self._report(
                data_dir,
                partitions=partitions,
                bucket_seconds=bucket_seconds,
                window_seconds=window_seconds,
                top_projects=top_projects,
            )

    def _report(
        self,
        data_dir: Zone,
        *,
        partitions: int,
        bucket_seconds: int | None,
        window_seconds: float,
        top_projects: int,
    ) -> dict[str, Any]:
        rows = (
            self._landed(data_dir)
            .filter(F.col("kind") != "announce")
            .select(
                "project_id",
                "partition",
                "generation",
                "handler_id",
                "received_at",
                "handled_at",
                F.octet_length("payload").alias("bytes"),
                ((F.unix_micros("handled_at") - F.unix_micros("received_at")) / 1000.0).alias(
                    "latency_ms"
                ),
            )
            .cache()
        )
        try:
            self._step("report: summary")
            summary = self._summary(rows)
            if summary["rows"] == 0:
                raise NoDataError(f"no data rows landed under {data_dir}")
            self._check_partitions(summary["max_partition"], partitions)
            span = (summary["_last_handled"] - summary["_first_handled"]).total_seconds()
            bucket = bucket_seconds or _nice_bucket(span)
            report: dict[str, Any] = {
                "version": 1,
                "generated_at": _iso(datetime.now(UTC)),
                "data_dir": str(data_dir),
                "partitions": partitions,
                "summary": {k: v for k, v in summary.items() if not k.startswith("_")},
            }
            self._step("report: projects by volume")
            report["projects"] = self._projects(rows, summary["rows"], top_projects)
            self._step("report: partition skew")
            report["partitions_load"] = self._partitions(rows, partitions)
            self._step("report: handler load over time")
            report["handlers"] = self._handlers(rows, bucket, summary["_first_handled"])
            self._step("report: latency percentiles")
            report["latency_ms"] = self._latency(rows)
            self._step("report: rebalances")
            report["rebalances"] = self._rebalances(rows, window_seconds)
        finally:
            rows.unpersist()
        # distinct counts come from the breakdowns (countDistinct would cost a pass each)
        report["summary"].update(
            projects=report["projects"]["count"],
            handlers=len(report["handlers"]["totals"]),
            partitions_with_data=partitions - report["partitions_load"]["empty_partitions"],
            generations=len(report["rebalances"]["generations"]),
        )
        return report

    @staticmethod
    def _summary(rows: DataFrame) -> dict[str, Any]:
        r = rows.agg(
            F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
            F.max("partition").alias("max_partition"),
            F.min(F.unix_micros("received_at")).alias("first_received_at"),
            F.max(F.unix_micros("received_at")).alias("last_received_at"),
            F.min(F.unix_micros("handled_at")).alias("first_handled_at"),
            F.max(F.unix_micros("handled_at")).alias("last_handled_at"),
        ).first()
        assert r is not None
        if not r["rows"]:
            return {"rows": 0}
        return {
            "rows": int(r["rows"]),
            "bytes": int(r["bytes"]),
            "max_partition": r["max_partition"],
            "first_received_at": _iso(_at(r["first_received_at"])),
            "last_received_at": _iso(_at(r["last_received_at"])),
            "first_handled_at": _iso(_at(r["first_handled_at"])),
            "last_handled_at": _iso(_at(r["last_handled_at"])),
            "_first_handled": _at(r["first_handled_at"]),
            "_last_handled": _at(r["last_handled_at"]),
        }

    @staticmethod
    def _projects(rows: DataFrame, total: int, top: int) -> dict[str, Any]:
        projects = (
            rows.groupBy("project_id", "partition")
            .agg(F.count(F.lit(1)).alias("rows"), F.sum("bytes").alias("bytes"))
            .cache()
        )
        try:
            count = projects.count()
            ranked = projects.orderBy(F.desc("rows"), "project_id").limit(top).collect()
        finally:
            projects.unpersist()
        return {
            "count": count,
            "top": [
                {
                    "project_id": r["project_id"],
                    "partition": int(r["partition"]),
                    "rows": int(r["rows"]),
                    "bytes": int(r["bytes"]),
                    "share": int(r["rows"]) / total,
                }
                for r in ranked
            ],
        }

    @staticmethod
    def _partitions(rows: DataFrame, partitions: int) -> dict[str, Any]:
        found = {
            int(r["partition"]): r
            for r in rows.groupBy("partition")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.sum("bytes").alias("bytes"),
                F.countDistinct("project_id").alias("projects"),
            )
            .collect()
        }
        loads = [
            {
                "partition": p,
                "rows": int(found[p]["rows"]) if p in found else 0,
                "bytes": int(found[p]["bytes"]) if p in found else 0,
                "projects": int(found[p]["projects"]) if p in found else 0,
            }
            for p in range(partitions)
        ]
        by_rows = [x["rows"] for x in loads]
        by_bytes = [x["bytes"] for x in loads]
        return {
            "mean_rows": sum(by_rows) / partitions,
            "max_rows": max(by_rows),
            "max_partition": max(range(partitions), key=lambda p: (by_rows[p], -p)),
            "skew_rows": _skew(by_rows),
            "skew_bytes": _skew(by_bytes),
            "empty_partitions": sum(1 for v in by_rows if v == 0),
            "loads": loads,
        }

    @staticmethod
    def _handlers(rows: DataFrame, bucket: int, start: datetime) -> dict[str, Any]:
        origin = int(start.timestamp()) // bucket * bucket
        bucketed = rows.withColumn(
            "bucket",
            F.floor((F.unix_micros("handled_at") / 1_000_000 - origin) / bucket).cast("long"),
        )
        points = bucketed.groupBy("handler_id", "bucket").agg(F.count(F.lit(1)).alias("rows"))
        series: dict[str, list[list[Any]]] = {}
        totals: dict[str, int] = {}
        for r in points.orderBy("handler_id", "bucket").collect():
            at = datetime.fromtimestamp(origin + int(r["bucket"]) * bucket, UTC)
            series.setdefault(r["handler_id"], []).append([_iso(at), int(r["rows"])])
            totals[r["handler_id"]] = totals.get(r["handler_id"], 0) + int(r["rows"])
        return {
            "bucket_seconds": bucket,
            "totals": [
                {"handler_id": h, "rows": n}
                for h, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "skew_rows": _skew(list(totals.values())),
            "series": [{"handler_id": h, "points": p} for h, p in sorted(series.items())],
        }

    @staticmethod
    def _latency(rows: DataFrame) -> dict[str, Any]:
        """Percentiles overall and per handler in one pass (a rollup), then a histogram."""
        latency = F.col("latency_ms")
        stats = {
            (r["handler_id"] if r["level"] == 0 else None): r
            for r in rows.rollup("handler_id")
            .agg(
                F.grouping_id().alias("level"),
                F.percentile_approx(latency, [0.5, 0.95, 0.99], 10_000).alias("q"),
                F.min(latency).alias("min"),
                F.max(latency).alias("max"),
                F.avg(latency).alias("mean"),
                F.count(F.lit(1)).alias("count"),
                F.sum(F.when(latency < 0, 1).otherwise(0)).alias("negative"),
            )
            .collect()
        }
        overall = stats.pop(None)
        # 10 bins per decade from 0.01 ms; <= 0 (clock skew between hosts) in bin -1000.
        binned = rows.select(
            F.when(latency > 0, F.floor(F.log10(F.greatest(latency, F.lit(0.01))) * 10))
            .otherwise(F.lit(-1000))
            .alias("bin")
        )
        histogram = [
            {
                "lo": 0.0 if b["bin"] == -1000 else 10 ** (int(b["bin"]) / 10),
                "hi": 0.0 if b["bin"] == -1000 else 10 ** ((int(b["bin"]) + 1) / 10),
                "count": int(b["count"]),
            }
            for b in binned.groupBy("bin").count().orderBy("bin").collect()
        ]
        q = overall["q"]
        return {
            "count": int(overall["count"]),
            "p50": float(q[0]),
            "p95": float(q[1]),
            "p99": float(q[2]),
            "max": float(overall["max"]),
            "min": float(overall["min"]),
            "mean": float(overall["mean"]),
            "negative": int(overall["negative"]),
            "histogram": histogram,
            "by_handler": [
                {
                    "handler_id": handler,
                    "p50": float(h["q"][0]),
                    "p95": float(h["q"][1]),
                    "p99": float(h["q"][2]),
                    "max": float(h["max"]),
                    "rows": int(h["count"]),
                }
                for handler, h in sorted(stats.items())
            ],
        }

    def _rebalances(self, rows: DataFrame, window_seconds: float) -> dict[str, Any]:
        generations = [
            {
                "generation": int(g["generation"]),
                "first_handled_at": _at(g["first"]),
                "last_handled_at": _at(g["last"]),
                "rows": int(g["rows"]),
                "handlers": sorted(g["handlers"]),
            }
            for g in rows.groupBy("generation")
            .agg(
                F.min(F.unix_micros("handled_at")).alias("first"),
                F.max(F.unix_micros("handled_at")).alias("last"),
                F.count(F.lit(1)).alias("rows"),
                F.collect_set("handler_id").alias("handlers"),
            )
            .orderBy("generation")
            .collect()
        ]
        changes: list[dict[str, Any]] = []
        for before, after in itertools.pairwise(generations):
            changes.append(
                {
                    "from": before["generation"],
                    "to": after["generation"],
                    "at": after["first_handled_at"],
                }
            )
        changes = changes[-50:]
        if changes:
            window = timedelta(seconds=window_seconds)
            marks = self.spark.createDataFrame(
                [(c["to"], c["at"] - window, c["at"], c["at"] + window) for c in changes],
                "to long, lo timestamp, at timestamp, hi timestamp",
            )
            counted = (
                rows.join(
                    F.broadcast(marks),
                    (F.col("handled_at") >= F.col("lo")) & (F.col("handled_at") < F.col("hi")),
                )
                .withColumn(
                    "side", F.when(F.col("handled_at") < F.col("at"), "before").otherwise("after")
                )
                .groupBy("to", "side", "handler_id")
                .agg(F.count(F.lit(1)).alias("rows"))
                .collect()
            )
            for change in changes:
                change["before"] = {}
                change["after"] = {}
            by_to = {c["to"]: c for c in changes}
            for r in counted:
                by_to[int(r["to"])][r["side"]][r["handler_id"]] = int(r["rows"])
        for item in (*generations, *changes):
            for name in ("first_handled_at", "last_handled_at", "at"):
                if name in item:
                    item[name] = _iso(item[name])
        return {"window_seconds": window_seconds, "generations": generations, "changes": changes}

    # --- weights -----------------------------------------------------------------------

    def weights(
        self,
        data_dir: Zone,
        *,
        partitions: int,
        metric: Literal["rows", "bytes"] = "rows",
        floor: float = 0.05,
        since: datetime | None = None,
    ) -> PartitionWeights:
        """Partition weights from measured load (see ``PartitionWeights``).

        ``since`` limits the measurement to rows received from then on. Raises
        ``NoDataError`` when no data row is in range.
        """
        with self._spark_errors():
            rows = self._landed(data_dir).filter(F.col("kind") != "announce")
            if since is not None:
                rows = rows.filter(F.col("received_at") >= F.lit(since.astimezone(UTC)))
            self._step("weights: load per partition")
            measured = (
                rows.groupBy("partition")
                .agg(
                    F.count(F.lit(1)).alias("rows"),
                    F.sum(F.octet_length("payload")).alias("bytes"),
                    F.min(F.unix_micros("received_at")).alias("first"),
                    F.max(F.unix_micros("received_at")).alias("last"),
                )
                .collect()
            )
        if not measured:
            raise NoDataError(
                f"no data rows landed under {data_dir}"
                + (f" since {_iso(since)}" if since is not None else "")
            )
        self._check_partitions(max(int(r["partition"]) for r in measured), partitions)
        loads = {int(r["partition"]): int(r[metric]) for r in measured}
        mean = sum(loads.values()) / partitions
        if mean == 0:
            raise NoDataError(f"every landed payload under {data_dir} is empty: no {metric} load")
        weights = {p: round(max(loads.get(p, 0) / mean, floor), 6) for p in range(partitions)}
        return PartitionWeights(
            partitions=partitions,
            metric=metric,
            floor=floor,
            weights=weights,
            loads=loads,
            measured_from={
                "data_dir": str(data_dir) if is_s3(data_dir) else str(Path(data_dir).resolve()),
                "since": _iso(since),
                "first_received_at": _iso(_at(min(int(r["first"]) for r in measured))),
                "last_received_at": _iso(_at(max(int(r["last"]) for r in measured))),
                "rows": sum(int(r["rows"]) for r in measured),
                "bytes": sum(int(r["bytes"] or 0) for r in measured),
            },
            generated_at=datetime.now(UTC),
        )

    # --- helpers -----------------------------------------------------------------------

    def _landed(self, data_dir: Zone) -> DataFrame:
        """The rows of the Delta table at ``data_dir`` (a directory, or ``s3://`` read
        through ``s3a``: ``s3a_conf``), at its newest version: only the files that version
        names, never a glob of the folder, which also holds files no version names (a
        crashed writer's, files compacted away and not yet vacuumed). ``LandingDirError``
        when the directory is missing or holds no Delta table."""
        if is_s3(data_dir):
            where = s3a_url(str(data_dir))
        else:
            check_local_zone(Path(data_dir))
            where = str(Path(data_dir).resolve())
        self._step(f"reading the Delta table at {data_dir}")
        try:
            return self.spark.read.format("delta").load(where)
        except AnalysisException as exc:
            if exc.getCondition() in _NO_TABLE:
                raise LandingDirError(not_a_table(data_dir, holds_parquet=False)) from exc
            raise

    def _ledger(self, ledger_dir: Path) -> DataFrame:
        if not ledger_dir.is_dir():
            raise LandingDirError(f"ledger directory {ledger_dir} does not exist")
        return (
            self.spark.read.schema(LEDGER_READ_SCHEMA)
            .option("mode", "DROPMALFORMED")  # a line cut short by a crash is skipped
            .option("recursiveFileLookup", "true")
            .option("pathGlobFilter", "*.jsonl")
            .json(str(ledger_dir))
            .filter(
                F.col("gateway_id").isNotNull()
                & F.col("project_id").isNotNull()
                & (F.col("first_sequence") >= 1)
                & (F.col("last_sequence") >= F.col("first_sequence"))
                & F.col("decided_at").isNotNull()
            )
        )

    @staticmethod
    def _check_partitions(max_partition: int | None, partitions: int) -> None:
        if max_partition is not None and max_partition >= partitions:
            raise LandingDirError(
                f"landed data has partition {max_partition}, but partitions is {partitions} "
                f"(pass the stream's P)"
            )

    def _step(self, description: str) -> None:
        if self._running is not None:
            self._running.session.sparkContext.setJobDescription(description)
        if self._on_step is not None:
            self._on_step(description)

    @contextmanager
    def _spark_errors(self) -> Iterator[None]:
        """Turn Spark and Py4J failures into ``SparkJobError`` with the JVM's stderr tail."""
        try:
            yield
        except Exception as exc:
            py4j = type(exc).__module__.startswith("py4j")  # the JVM side failed, or is gone
            if not (py4j or isinstance(exc, PySparkException)):
                raise
            tail = self._running.stderr.tail() if self._running is not None else ""
            message = f"Spark job failed: {_short(exc)}"
            if py4j and tail:
                message += f"\n--- the JVM's stderr (last lines) ---\n{tail}"
            raise SparkJobError(message, jvm_stderr=tail) from exc


def _total(condition: Column, value: Column | None = None) -> Column:
    """Sum of ``value`` (default 1) over the rows where ``condition`` holds; 0 when none."""
    return F.coalesce(F.sum(F.when(condition, value if value is not None else F.lit(1))), F.lit(0))


def _skew(values: list[int]) -> float:
    """max / mean (1.0 is perfectly even; 0.0 when everything is 0)."""
    if not values or sum(values) == 0:
        return 0.0
    return max(values) / (sum(values) / len(values))


def _nice_bucket(span_seconds: float) -> int:
    for size in NICE_BUCKETS:
        if span_seconds / size <= 120:
            return size
    return math.ceil(span_seconds / 120 / 86400) * 86400


def _at(micros: int) -> datetime:
    """A ``unix_micros`` value as an aware UTC datetime.

    Timestamps are collected as ``unix_micros``: PySpark turns a collected timestamp into a
    naive datetime in the *Python process's* local zone, whatever the session zone is.
    """
    return datetime.fromtimestamp(micros / 1_000_000, UTC)


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:6]) if lines else type(exc).__name__
