"""How long Spark takes over 1,000,000 landed rows: start, audit, report, weights.

    .venv/bin/python -m tests.bench.spark_audit [--rows 1000000] [--files 50]

Generates a landing zone as handlers land it (the zone's sink writes ``--files`` files,
one Delta commit adds them all), with planted gaps and duplicates, then times each job over
the Delta table on one SparkSession (``local[*]`` unless SHOAL_SPARK_MASTER says
otherwise). Prints the figures; asserts only that the audit found exactly what was planted.
Not a unit test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import anyio

from adapters.spark import SparkAnalytics
from core.messages import Envelope, LandedRow, MessageKind
from core.partitioning import partition_for
from core.table import LandedFile, log_key
from services.common.landing_zone import open_landing_zone
from services.common.table import landed_summary

BASE = 1_763_726_400.0  # 2025-11-21T12:00:00Z
PARTITIONS = 128
SERIES_LENGTH = 1000
LOG_ID = "bench-stream"


def generate(data_dir: Path, rows: int, files: int) -> tuple[int, int, int]:
    """Land ``rows`` data rows (+ one announcement per series); returns (lost, dup, files)."""
    series = max(1, rows // SERIES_LENGTH)
    gateways = ("gw-1", "gw-2")
    landed: list[LandedRow] = []
    positions = [0] * PARTITIONS
    lost = duplicated = 0

    def add(project: str, gateway: str, sequence: int, at: float, copy: int) -> None:
        partition = partition_for(project, PARTITIONS)
        positions[partition] += 1
        envelope = Envelope(
            message_id=f"{gateway}.{project}.{sequence}",
            project_id=project,
            partition=partition,
            gateway_id=gateway,
            sequence=sequence,
            received_at=at,
            payload=b'{"t":21.5,"h":40}',
            kind=MessageKind.ANNOUNCE if sequence == 0 else MessageKind.DATA,
        )
        handled = at + 0.001 + (sequence * 7919) % 200_000 / 1e6 + copy * 5.0
        landed.append(
            LandedRow(
                envelope,
                1 if at < BASE + 500 else 2,
                f"h{partition % 4 + 1}",
                handled,
                log_id=LOG_ID,
                position=positions[partition],
            )
        )

    for s in range(series):
        gateway, project = gateways[s % 2], f"dev-{s // 2}"
        add(project, gateway, 0, BASE, 0)
        for sequence in range(1, SERIES_LENGTH + 1):
            at = BASE + sequence + s * 0.0001
            if s % 97 == 5 and sequence in {10, 11, 500}:  # planted gaps
                lost += 1
                continue
            add(project, gateway, sequence, at, 0)
            if s % 89 == 3 and sequence % 250 == 0:  # planted redeliveries
                add(project, gateway, sequence, at, 1)
                duplicated += 1

    async def land() -> int:
        chunk = -(-len(landed) // files)
        written: list[LandedFile] = []
        async with open_landing_zone(data_dir) as zone:
            await zone.table.refresh()
            for start in range(0, len(landed), chunk):
                written.extend(await zone.sink.write(landed[start : start + chunk]))
            logs = {log_key(LOG_ID, p) for p, n in enumerate(positions) if n}
            await zone.table.commit(written, dict.fromkeys(logs, 1))
        return len(written)

    return lost, duplicated, anyio.run(land)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=50, help="Parquet files to spread rows over")
    parser.add_argument("--keep", action="store_true", help="keep the generated directory")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="shoal-spark-bench-"))
    try:
        started = time.perf_counter()
        lost, duplicated, files = generate(data_dir, args.rows, args.files)
        assert len(landed_summary(data_dir).files) == files
        generated = time.perf_counter() - started
        timings: list[tuple[str, float]] = [("generate (sink, commit)", generated)]

        started = time.perf_counter()
        with SparkAnalytics() as analytics:
            timings.append(("start Spark session", time.perf_counter() - started))
            for label in ("audit, cold", "audit, warm"):
                started = time.perf_counter()
                result = analytics.audit(data_dir, drained=True)
                timings.append((label, time.perf_counter() - started))
                assert (result.lost, result.duplicated) == (lost, duplicated), result
            started = time.perf_counter()
            report = analytics.report(data_dir, partitions=PARTITIONS)
            timings.append(("report", time.perf_counter() - started))
            started = time.perf_counter()
            analytics.weights(data_dir, partitions=PARTITIONS)
            timings.append(("weights", time.perf_counter() - started))
            master = analytics.spark.sparkContext.master
            cores = analytics.spark.sparkContext.defaultParallelism
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(
        f"{result.landed:,} landed rows ({result.accepted:,} accepted, {lost} lost, "
        f"{duplicated} duplicated) in {files:,} files; Spark {master}, parallelism {cores}"
    )
    for label, seconds in timings:
        print(f"  {label:<22} {seconds:7.1f} s")
    print(
        json.dumps(
            {
                "rows": result.landed,
                "files": files,
                "seconds": dict(timings),
                "latency_p99_ms": report["latency_ms"]["p99"],
            }
        )
    )
    if args.keep:
        print(f"kept {data_dir}")


if __name__ == "__main__":
    main()
