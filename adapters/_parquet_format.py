"""The landed data as Parquet, for every sink (a file system's, an object store's): the
schema, the file layout, the encoding and its settings.

Layout: ``{data_dir}/date=YYYY-MM-DD/{handler_id}-{uuid}.parquet``, one file per roll of
a handler's buffer (and per date within it): many partitions in one file, sorted by
partition, project and sequence, so files are large (thousands of rows, not one per
fetched batch and partition) while a reader filtering on ``partition`` still skips most
of each file by its row-group statistics. ``date`` is the UTC date of ``received_at``
(the gateway's clock), so every copy of a message, redelivered or not, lands under the
same date. Files appear atomically: they are written under a name starting with ``.``
and ending in ``.tmp`` (which Spark and pyarrow skip), fsynced, then renamed, and the
directory is fsynced.

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
payload        binary                  the message body as received
=============  ======================  =====================================================

No column is nullable. Readers that partition by folder (Spark, ``pyarrow.dataset`` with
``partitioning="hive"``) see ``date`` (string) from the path.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.messages import LandedRow

__all__ = [
    "LANDED_SCHEMA",
    "ParquetSettings",
    "layout",
    "sorted_table",
    "table_file_path",
    "to_table",
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
        pa.field("payload", pa.binary(), nullable=False),
    ]
)


class ParquetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_PARQUET_", extra="ignore")

    data_dir: Path = Path("var/data")
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    row_group_rows: int = Field(default=128 * 1024, ge=1)


def table_file_path(day: str, table: pa.Table, *, writer: str) -> str:
    """Where a sink's ``write_table`` puts ``table``: ``date={day}/{writer}-{uuid}.parquet``
    relative to the zone's root. ``ValueError`` for a schema other than ``LANDED_SCHEMA``
    or a ``day`` that is not YYYY-MM-DD."""
    if not table.schema.remove_metadata().equals(LANDED_SCHEMA):
        raise ValueError(f"not the landed schema: {table.schema}")
    folder = f"date={datetime.strptime(day, '%Y-%m-%d'):%Y-%m-%d}"
    return f"{folder}/{_UNSAFE.sub('_', writer) or 'writer'}-{uuid.uuid4().hex}.parquet"


def _day(received_at: float) -> str:
    return datetime.fromtimestamp(received_at, UTC).date().isoformat()


def layout(rows: Sequence[LandedRow]) -> list[tuple[str, list[LandedRow]]]:
    """The files a batch lands as, by UTC date of ``received_at``: ``(path, rows)`` with
    ``path`` = ``date=YYYY-MM-DD/{handler}-{uuid}.parquet`` relative to the zone's root
    (every sink writes this layout)."""
    by_day: dict[str, list[LandedRow]] = defaultdict(list)
    for row in rows:
        by_day[_day(row.envelope.received_at)].append(row)
    handler = _UNSAFE.sub("_", rows[0].handler_id) or "handler" if rows else "handler"
    return [
        (f"date={day}/{handler}-{uuid.uuid4().hex}.parquet", group)
        for day, group in sorted(by_day.items())
    ]


def sorted_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as one file holds them: sorted by partition, project and sequence."""
    return to_table(rows).sort_by(
        [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]
    )


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
        [e.payload for e in envs],
    ]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, LANDED_SCHEMA, strict=True)],
        schema=LANDED_SCHEMA,
    )


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)
