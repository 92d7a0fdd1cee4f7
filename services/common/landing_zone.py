"""The landing zone's adapters for a process that writes it: the data files are written by a
Sink (``ParquetSink`` in a directory, ``S3ParquetSink`` under ``s3://bucket/prefix``), the
table's commits made by ``DeltaLandedTable``; the zone's ``DeltaTableUpkeep`` comes along
for tools that write and keep up (the leader, which only keeps up, makes its own:
``services.common.upkeep``). Where the zone is: ``services.common.table_address``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.delta import DeltaTableUpkeep, TableSettings
from adapters.delta.table import DeltaLandedTable
from adapters.parquet import ParquetSettings, ParquetSink
from adapters.s3 import S3Location, S3Settings
from services.common.table_address import TableAddress, is_object_store, table_address

if TYPE_CHECKING:
    from adapters.s3.sink import S3ParquetSink

__all__ = ["LandingZone", "open_landing_zone"]


@dataclass(frozen=True, slots=True)
class LandingZone:
    sink: ParquetSink | S3ParquetSink
    table: DeltaLandedTable
    upkeep: DeltaTableUpkeep
    address: TableAddress


def _adapters(
    location: str | Path,
    parquet: ParquetSettings | None,
    s3: S3Settings | None,
    table: TableSettings | None,
) -> LandingZone:
    address = table_address(location, s3)
    sink: ParquetSink | S3ParquetSink
    if is_object_store(location):
        # Here, not at the top: boto3 is 24 MB a handler landing on a disk does without.
        from adapters.s3.client import s3_client  # noqa: PLC0415 (boto3)
        from adapters.s3.sink import S3ParquetSink  # noqa: PLC0415 (boto3)

        where = S3Location.parse(str(location))
        sink = S3ParquetSink(s3_client(s3 or S3Settings()), where, parquet)
    else:
        root = Path(address.uri)
        sink = ParquetSink((parquet or ParquetSettings()).model_copy(update={"data_dir": root}))
    return LandingZone(
        sink,
        DeltaLandedTable(address.uri, address.storage_options, table),
        DeltaTableUpkeep(address.uri, address.storage_options),
        address,
    )


@asynccontextmanager
async def open_landing_zone(
    location: str | Path,
    *,
    parquet: ParquetSettings | None = None,
    s3: S3Settings | None = None,
    table: TableSettings | None = None,
) -> AsyncIterator[LandingZone]:
    """The zone's sink and table, entered, and its upkeep. ``ValueError`` for an ``s3://``
    URL without a bucket."""
    zone = _adapters(location, parquet, s3, table)
    async with zone.sink, zone.table:
        yield zone
