"""The landed data as Parquet, for every sink (a file system's, an object store's): the
schema, the file layout, the encoding and its settings.

Layout: ``{data_dir}/date=YYYY-MM-DD/{handler_id}-{uuid}.parquet``, one file per roll of
a handler's buffer (and per date within it): many partitions in one file, sorted by
partition, project and sequence, so files are large (thousands of rows, not one per
fetched batch and partition) while a reader filtering on ``partition`` still skips most
of each file by its row-group statistics. ``date`` is the UTC date of ``received_at``
(the gateway's clock), so every copy of a message, redelivered or not, lands under the
same date. A file is encoded in memory (at most a roll's size), then stored under its
final name; it is part of the table only once a Delta commit adds it, so a file a
killed writer left half-written is never read (``TableUpkeep.vacuum`` removes it).

=============  ======================  =====================================================
column         type                    meaning
=============  ======================  =====================================================
message_id     string                  the gateway's unique id; duplicates are redeliveries
project_id     string                  the device project
partition      int32                   partition of project_id
generation     int64                   assignment generation the handler worked under
handler_id     string                  the handler that landed the row
gateway_id     string                  the gateway that accepted the message
sequence       int64                   per (gateway_id, project_id), from 1 without gaps
received_at    timestamp[us, UTC]      when the gateway accepted it
handled_at     timestamp[us, UTC]      when the handler landed it
kind           string                  ``announce`` or ``data``
payload        string                  the message body as received (JSON, UTF-8 text)
log_id         string                  the broker log it was delivered from
position       int64                   its place in that log (stream sequence, offset)
=============  ======================  =====================================================

No column is nullable. ``date`` (string, YYYY-MM-DD) is the table's partition column: in
the path and the Delta log, not in the files. Read the table through Delta (Spark with
delta-spark, ``deltalake``, polars, DuckDB's ``delta_scan``): a glob of the folder also
finds files no version names.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.messages import LandedRow
from core.table import LandedFile

__all__ = [
    "FILE_ORDER",
    "LANDED_SCHEMA",
    "EncodedFile",
    "ParquetSettings",
    "delta_stats",
    "encode_files",
    "sorted_table",
    "to_table",
    "use_memory_pool",
    "write_parquet",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

LANDED_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("handler_id", pa.string(), nullable=False),
        pa.field("gateway_id", pa.string(), nullable=False),
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("handled_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
        pa.field("log_id", pa.string(), nullable=False),
        pa.field("position", pa.int64(), nullable=False),
    ]
)


class ParquetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_PARQUET_", extra="ignore")

    data_dir: Path = Field(
        default=Path("var/data"),
        description="where the sink writes; the handler passes `SHOAL_HANDLER_DATA_DIR`, "
        "which wins",
    )
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field(
        default="zstd", description="the Parquet compression codec"
    )
    row_group_rows: int = Field(default=128 * 1024, ge=1, description="rows per Parquet row group")
    memory_pool: Literal["jemalloc", "mimalloc", "system"] = Field(
        default="jemalloc",
        description="the allocator pyarrow encodes with, for the whole process; pyarrow's "
        "own default, mimalloc, kept 25-30 MB more of a handler's memory in the pipeline "
        "benchmark at the same speed",
    )


def use_memory_pool(name: str) -> None:
    """Make ``name``'s pool pyarrow's default in this process; where pyarrow was built
    without it (jemalloc on Windows), its default stays."""
    pools = {
        "jemalloc": pa.jemalloc_memory_pool,
        "mimalloc": pa.mimalloc_memory_pool,
        "system": pa.system_memory_pool,
    }
    try:
        pool = pools[name]()
    except NotImplementedError:
        return
    pa.set_memory_pool(pool)


@functools.lru_cache(maxsize=4_096)  # a request's messages share their receive time
def _day(received_at: float) -> str:
    return datetime.fromtimestamp(received_at, UTC).date().isoformat()


@dataclass(frozen=True, slots=True)
class EncodedFile:
    """One file of a batch, encoded: where it goes and what a commit says of it."""

    data: pa.Buffer
    landed: LandedFile


def encode_files(rows: Sequence[LandedRow], settings: ParquetSettings) -> list[EncodedFile]:
    """A batch as the files it lands as, one per UTC date of ``received_at``, at
    ``date=YYYY-MM-DD/{handler}-{uuid}.parquet`` relative to the table's root (every
    sink writes this layout)."""
    by_day: dict[str, list[LandedRow]] = defaultdict(list)
    for row in rows:
        by_day[_day(row.envelope.received_at)].append(row)
    handler = _UNSAFE.sub("_", rows[0].handler_id) or "handler" if rows else "handler"
    encoded = []
    for day, group in sorted(by_day.items()):
        table = sorted_table(group)
        stream = pa.BufferOutputStream()
        write_parquet(table, stream, settings)
        data = stream.getvalue()
        path = f"date={day}/{handler}-{uuid.uuid4().hex}.parquet"
        landed = LandedFile(path, len(group), data.size, day, delta_stats(table))
        encoded.append(EncodedFile(data, landed))
    return encoded


FILE_ORDER = [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]
"""How a file holds its rows (``pa.Table.sort_by``): a handler's, and a compaction's."""


def sorted_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as one file holds them: sorted by partition, project and sequence."""
    return to_table(rows).sort_by(FILE_ORDER)


def write_parquet(table: pa.Table, where: Any, settings: ParquetSettings) -> None:
    """Write ``table`` to ``where`` (a file object or a pyarrow stream) as configured."""
    compression = settings.compression
    pq.write_table(
        table,
        where,
        compression=None if compression == "none" else compression,
        row_group_size=settings.row_group_rows,
    )


def to_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as a table of ``LANDED_SCHEMA``."""
    envs = [r.envelope for r in rows]
    columns = [
        [e.message_id for e in envs],
        [e.project_id for e in envs],
        [e.partition for e in envs],
        [r.generation for r in rows],
        [r.handler_id for r in rows],
        [e.gateway_id for e in envs],
        [e.sequence for e in envs],
        [_micros(e.received_at) for e in envs],
        [_micros(r.handled_at) for r in rows],
        [e.kind.value for e in envs],
        [e.payload.decode("utf-8") for e in envs],
        [r.log_id for r in rows],
        [r.position for r in rows],
    ]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, LANDED_SCHEMA, strict=True)],
        schema=LANDED_SCHEMA,
    )


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


# Not the timestamps: Delta keeps their statistics in milliseconds, and a reader that skips
# by a maximum truncated from microseconds would skip rows it should read.
_STATS_COLUMNS = ("partition", "project_id", "log_id", "position")


def delta_stats(table: pa.Table) -> str:
    """The Delta ``stats`` of a file holding ``table``: its row count, and the least and
    greatest value of the columns readers filter on (they skip files by these)."""
    least: dict[str, Any] = {}
    greatest: dict[str, Any] = {}
    for name in _STATS_COLUMNS:
        bounds = pc.min_max(table.column(name)).as_py()
        if bounds["min"] is None:
            continue
        least[name], greatest[name] = bounds["min"], bounds["max"]
    return json.dumps(
        {
            "numRecords": table.num_rows,
            "minValues": least,
            "maxValues": greatest,
            "nullCount": dict.fromkeys(_STATS_COLUMNS, 0),
        }
    )
