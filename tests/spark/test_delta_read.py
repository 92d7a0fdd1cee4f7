"""Spark reads the table the handlers write: ``spark.read.format("delta")`` over a zone the
sink and ``DeltaLandedTable`` wrote (as a handler lands: files, then one commit each) gives
exactly the committed rows, every column as landed, and none of the files the sink wrote
that no commit added."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from adapters.spark import SparkAnalytics
from core.messages import LandedRow
from tests.spark._landing import BASE, Planted, land, write_uncommitted

MIDNIGHT = datetime.fromtimestamp(BASE, UTC).replace(hour=0).timestamp() + 86_400


def as_landed(row: LandedRow) -> tuple[Any, ...]:
    """A row as the table must hold it (timestamps in microseconds, ``date`` the UTC day
    it was received)."""
    e = row.envelope
    return (
        e.message_id,
        e.project_id,
        e.partition,
        row.generation,
        row.handler_id,
        e.gateway_id,
        e.sequence,
        round(e.received_at * 1_000_000),
        round(row.handled_at * 1_000_000),
        e.kind.value,
        e.payload.decode(),
        row.log_id,
        row.position,
        datetime.fromtimestamp(e.received_at, UTC).date().isoformat(),
    )


def test_spark_reads_exactly_the_committed_rows(
    analytics: SparkAnalytics, tmp_path: Path, planted: Planted
) -> None:
    two_series = [r for r in planted.rows if r.envelope.project_id in {"proj-0", "proj-1"}]
    # The last 300 received after midnight: the table gets a second ``date`` partition.
    late = [
        replace(r, envelope=replace(r.envelope, received_at=MIDNIGHT + i))
        for i, r in enumerate(two_series[-300:])
    ]
    rows = [*two_series[:-300], *late]
    land(tmp_path, rows, batch=700)
    unseen = [
        replace(r, envelope=replace(r.envelope, message_id=f"unseen-{i}"))
        for i, r in enumerate(rows[:500])
    ]
    write_uncommitted(tmp_path, unseen)

    table = analytics.spark.read.format("delta").load(str(tmp_path))
    columns = [
        F.unix_micros(c).alias(c) if c in {"received_at", "handled_at"} else F.col(c)
        for c in table.columns
    ]
    read = Counter(tuple(r) for r in table.select(*columns).collect())

    assert table.columns == [
        "message_id", "project_id", "partition", "generation", "handler_id", "gateway_id",
        "sequence", "received_at", "handled_at", "kind", "payload", "log_id", "position",
        "date",
    ]  # fmt: skip
    assert read == Counter(as_landed(r) for r in rows)
    assert sorted({day for *_, day in read}) == ["2026-11-21", "2026-11-22"]


def test_the_payload_is_json_text(analytics: SparkAnalytics, planted_dir: Path) -> None:
    """``payload`` is a string column: Spark parses it as JSON, no decoding first."""
    table = analytics.spark.read.format("delta").load(str(planted_dir))
    parsed = table.select("sequence", F.from_json("payload", "v long").alias("body"))
    mismatched = parsed.filter(F.col("body.v") != F.col("sequence")).count()
    assert mismatched == 0
    assert parsed.filter(F.col("body.v").isNull()).count() == 0
