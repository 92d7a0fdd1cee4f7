"""How long Spark takes over 1,000,000 landed rows: start, audit, report, weights.

    .venv/bin/python -m tests.bench.spark_audit [--rows 1000000] [--files-per-partition 8]

Generates a landing directory with pyarrow (the sink's schema and layout: one file per
partition per time slice, named by one commit of the table's log), with planted gaps and
duplicates, then times each job over the committed files on one SparkSession
(``local[*]`` unless SHOAL_SPARK_MASTER says otherwise). Prints the figures; asserts only
that the audit found exactly what was planted. Not a unit test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from adapters.parquet import LANDED_SCHEMA, LocalLandingLog
from adapters.spark import SparkAnalytics
from core.partitioning import partition_for
from core.table import LandedFile
from services.common.table import LandingTable, read_table

BASE_US = 1_763_726_400_000_000  # 2025-11-21T12:00:00Z
PARTITIONS = 128
SERIES_LENGTH = 1000


def generate(data_dir: Path, rows: int, files: int) -> tuple[int, int, int]:
    """Write ``rows`` data rows (+ one announcement per series); returns (lost, dup, files)."""
    series = max(1, rows // SERIES_LENGTH)
    gateways = ("gw-1", "gw-2")
    columns: dict[str, list[object]] = {f.name: [] for f in LANDED_SCHEMA}
    lost = duplicated = 0

    def add(project: str, gateway: str, sequence: int, at_us: int, copy: int) -> None:
        partition = partition_for(project, PARTITIONS)
        columns["message_id"].append(f"{gateway}.{project}.{sequence}")
        columns["project_id"].append(project)
        columns["partition"].append(partition)
        columns["generation"].append(1 if at_us < BASE_US + 500_000_000 else 2)
        columns["handler_id"].append(f"h{partition % 4 + 1}")
        columns["gateway_id"].append(gateway)
        columns["sequence"].append(sequence)
        columns["received_at"].append(at_us)
        columns["handled_at"].append(at_us + 1000 + (sequence * 7919) % 200_000 + copy * 5_000_000)
        columns["kind"].append("announce" if sequence == 0 else "data")
        columns["payload"].append(b'{"t":21.5,"h":40}')

    for s in range(series):
        gateway, project = gateways[s % 2], f"dev-{s // 2}"
        add(project, gateway, 0, BASE_US, 0)
        for sequence in range(1, SERIES_LENGTH + 1):
            at_us = BASE_US + sequence * 1_000_000 + s * 100
            if s % 97 == 5 and sequence in {10, 11, 500}:  # planted gaps
                lost += 1
                continue
            add(project, gateway, sequence, at_us, 0)
            if s % 89 == 3 and sequence % 250 == 0:  # planted redeliveries
                add(project, gateway, sequence, at_us, 1)
                duplicated += 1
    table = pa.Table.from_pydict(
        {
            **{k: v for k, v in columns.items() if k not in {"received_at", "handled_at"}},
            "received_at": pa.array(columns["received_at"], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "handled_at": pa.array(columns["handled_at"], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
        },
        schema=LANDED_SCHEMA,
    )
    # The handlers' layout: one folder per day, each file holding many partitions.
    folder = data_dir / "date=2025-11-21"
    folder.mkdir(parents=True, exist_ok=True)
    chunk = -(-table.num_rows // files)
    written = []
    for start in range(0, table.num_rows, chunk):
        part = table.slice(start, chunk)
        path = folder / f"h1-{uuid.uuid4().hex}.parquet"
        pq.write_table(part, path, compression="zstd")
        written.append(LandedFile(path.relative_to(data_dir).as_posix(), part.num_rows))

    async def commit() -> None:
        async with LocalLandingLog(data_dir) as landing_log:
            landing = LandingTable(landing_log, "bench")
            await landing.refresh()
            assert await landing.commit(added=written)

    anyio.run(commit)
    return lost, duplicated, files


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
        landed = [data_dir / path for path in sorted(read_table(data_dir).files)]
        generated = time.perf_counter() - started
        timings: list[tuple[str, float]] = [("generate (pyarrow)", generated)]

        started = time.perf_counter()
        with SparkAnalytics() as analytics:
            timings.append(("start Spark session", time.perf_counter() - started))
            for label in ("audit, cold", "audit, warm"):
                started = time.perf_counter()
                result = analytics.audit(data_dir, landed, drained=True)
                timings.append((label, time.perf_counter() - started))
                assert (result.lost, result.duplicated) == (lost, duplicated), result
            started = time.perf_counter()
            report = analytics.report(data_dir, landed, partitions=PARTITIONS)
            timings.append(("report", time.perf_counter() - started))
            started = time.perf_counter()
            analytics.weights(data_dir, landed, partitions=PARTITIONS)
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
