"""The report on planted data: exact volumes and skew, percentiles within tolerance,
handler load per bucket, and the rows per handler around the generation change."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.spark import NoDataError, SparkAnalytics, render_report_html
from core.messages import LandedRow, MessageKind
from tests.spark._landing import PARTITIONS, Planted, empty_table

WINDOW = 30.0


def micros(seconds: float) -> int:
    return round(seconds * 1_000_000)  # as the sink stores it


def data_rows(planted: Planted) -> list[LandedRow]:
    return [r for r in planted.rows if r.envelope.kind is MessageKind.DATA]


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@pytest.fixture(scope="module")
def report(analytics: SparkAnalytics, planted_dir: Path) -> dict[str, Any]:
    return analytics.report(planted_dir, partitions=PARTITIONS, window_seconds=WINDOW)


def test_volume_and_skew(report: dict[str, Any], planted: Planted) -> None:
    rows = data_rows(planted)
    per_partition = Counter(r.envelope.partition for r in rows)
    per_project = Counter(r.envelope.project_id for r in rows)
    summary = report["summary"]
    assert summary["rows"] == len(rows) == 11_989
    assert summary["projects"] == 6
    assert summary["handlers"] == 3
    assert summary["generations"] == 2
    assert summary["bytes"] == sum(len(r.envelope.payload) for r in rows)
    loads = report["partitions_load"]
    assert [x["rows"] for x in loads["loads"]] == [per_partition[p] for p in range(PARTITIONS)]
    mean = len(rows) / PARTITIONS
    assert loads["skew_rows"] == pytest.approx(max(per_partition.values()) / mean)
    assert loads["empty_partitions"] == PARTITIONS - len(per_partition)
    top = report["projects"]["top"]
    assert [(p["project_id"], p["rows"]) for p in top] == sorted(
        per_project.items(), key=lambda kv: (-kv[1], kv[0])
    )


def test_latency_percentiles(report: dict[str, Any], planted: Planted) -> None:
    latencies = [
        (micros(r.handled_at) - micros(r.envelope.received_at)) / 1000 for r in data_rows(planted)
    ]
    latency = report["latency_ms"]
    assert latency["count"] == len(latencies)
    spread = max(latencies) - min(latencies)
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        assert latency[name] == pytest.approx(nearest_rank(latencies, q), abs=0.005 * spread)
    assert latency["max"] == pytest.approx(max(latencies), abs=1e-6)
    assert latency["min"] == pytest.approx(min(latencies), abs=1e-6)
    # the planted uniform 1..1000 ms (plus a few slow redeliveries)
    assert latency["p50"] == pytest.approx(500, abs=10)
    assert latency["p99"] == pytest.approx(990, abs=10)
    assert sum(b["count"] for b in latency["histogram"]) == len(latencies)
    assert latency["negative"] == 0


def test_handler_load_over_time(report: dict[str, Any], planted: Planted) -> None:
    handlers = report["handlers"]
    bucket = handlers["bucket_seconds"]
    assert bucket == 1  # ~101 s of data: the smallest round size giving <= 120 buckets
    expected: Counter[tuple[str, int]] = Counter()
    for r in data_rows(planted):
        expected[(r.handler_id, micros(r.handled_at) // 1_000_000)] += 1
    got = Counter(
        {(s["handler_id"], int(_epoch(t))): n for s in handlers["series"] for t, n in s["points"]}
    )
    assert got == expected
    totals = Counter(r.handler_id for r in data_rows(planted))
    assert {h["handler_id"]: h["rows"] for h in handlers["totals"]} == totals


def test_rebalance_windows(report: dict[str, Any], planted: Planted) -> None:
    rows = data_rows(planted)
    rebalances = report["rebalances"]
    assert [g["generation"] for g in rebalances["generations"]] == [1, 2]
    assert rebalances["generations"][1]["handlers"] == ["h1", "h2", "h3"]
    (change,) = rebalances["changes"]
    at = min(micros(r.handled_at) for r in rows if r.generation == 2)
    window = int(WINDOW * 1_000_000)
    before = Counter(r.handler_id for r in rows if at - window <= micros(r.handled_at) < at)
    after = Counter(r.handler_id for r in rows if at <= micros(r.handled_at) < at + window)
    assert (change["from"], change["to"]) == (1, 2)
    assert change["before"] == dict(before)
    assert change["after"] == dict(after)
    assert "h3" not in change["before"] and change["after"]["h3"] > 0


def test_html_is_static_with_inline_svg(report: dict[str, Any]) -> None:
    page = render_report_html(report)
    assert page.startswith("<!doctype html>")
    assert page.count("<svg") >= 5
    assert "<script" not in page.lower()
    assert "src=" not in page and "href=" not in page  # nothing to fetch: no internet
    assert "max/mean" in page and "p99" in page


def test_html_escapes_what_comes_from_the_data(report: dict[str, Any]) -> None:
    hostile = "<script>alert(1)</script>"
    page = render_report_html({**report, "data_dir": hostile})
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_no_data(analytics: SparkAnalytics, tmp_path: Path) -> None:
    empty_table(tmp_path)
    with pytest.raises(NoDataError, match="no data rows landed"):
        analytics.report(tmp_path, partitions=PARTITIONS)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
