"""The landing table is readable by any Delta reader, not only by shoal: the handlers' own
write path (sink + commit), with a file that was stored but never committed and a
compaction in its history, read back exactly by deltalake/pyarrow, polars and DuckDB's
``delta_scan`` (the snippets docs/operations.md's "Reading the landed data" shows). Spark's
reader is tested in ``tests/spark``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import duckdb_ext
import polars as pl
import pytest
from deltalake import DeltaTable

from core.messages import Envelope, LandedRow
from core.table import log_key
from services.common.landing_zone import open_landing_zone

pytestmark = pytest.mark.anyio

DAY = 1_795_000_000.0  # 2026-11-18 UTC


def _rows(first: int, count: int) -> list[LandedRow]:
    return [
        LandedRow(
            Envelope(
                message_id=f"m{n}",
                project_id=f"proj{n % 3}",
                partition=n % 4,
                gateway_id="gw-1",
                sequence=n + 1,
                received_at=DAY + n,
                payload=json.dumps({"temp": n, "unit": "°C"}).encode(),
            ),
            generation=1,
            handler_id="h1",
            handled_at=DAY + n + 0.5,
            log_id="stream-1",
            position=1000 + n,
        )
        for n in range(first, first + count)
    ]


@pytest.fixture
async def table(tmp_path: Path) -> Path:
    """Three commits of 10 rows each, compacted into one file, and 10 rows stored but never
    committed (a handler killed before its commit)."""
    async with open_landing_zone(tmp_path) as zone:
        for batch in range(3):
            files = await zone.sink.write(_rows(batch * 10, 10))
            await zone.table.refresh()
            await zone.table.commit(files, {log_key("stream-1", p): batch + 1 for p in range(4)})
        await zone.sink.write(_rows(30, 10))
        removed, added = await zone.upkeep.compact(["2026-11-18"], 1 << 27)
    assert (removed, added) == (3, 1)
    return tmp_path


def _delta_extension() -> Iterator[Path]:
    return Path(next(iter(duckdb_ext.__path__))).rglob("delta.duckdb_extension")


def _expected() -> dict[str, Any]:
    return {f"m{n}": n for n in range(30)}


async def test_deltalake_reads_exactly_the_committed_rows(table: Path) -> None:
    rows = DeltaTable(str(table)).to_pyarrow_dataset().to_table(columns=["message_id", "payload"])
    got = {m: json.loads(p)["temp"] for m, p in zip(*rows.to_pydict().values(), strict=True)}
    assert got == _expected()


async def test_polars_reads_exactly_the_committed_rows(table: Path) -> None:
    frame = (
        pl.scan_delta(str(table))
        .select("message_id", pl.col("payload").str.json_path_match("$.temp").cast(pl.Int64))
        .collect()
    )
    assert dict(frame.iter_rows()) == _expected()


async def test_duckdb_delta_scan_reads_exactly_the_committed_rows(table: Path) -> None:
    extension = next(_delta_extension())
    with duckdb.connect() as con:
        con.execute(f"LOAD '{extension}'")
        found = con.sql(
            "SELECT message_id, CAST(json_extract(payload, '$.temp') AS BIGINT), date "
            f"FROM delta_scan('{table}')"
        ).fetchall()
    assert {m: t for m, t, _ in found} == _expected()
    assert len(found) == 30
    assert {d for _, _, d in found} == {"2026-11-18"}
