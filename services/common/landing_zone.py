"""Where the landing zone lives, and the adapters for it: a Delta Lake table in a directory
or at ``s3://bucket/prefix`` on an S3-compatible store (reached as ``S3Settings`` / the AWS
variables say). The data files are written by a Sink (``ParquetSink``, ``S3ParquetSink``),
the table's commits made by ``DeltaLandedTable``, its upkeep done by ``DeltaTableUpkeep``.
Handlers, the leader, ``shoal analytics`` and ``shoal up`` all take the zone as such a
string."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from adapters.delta import DeltaLandedTable, DeltaTableUpkeep, TableSettings
from adapters.parquet import ParquetSettings, ParquetSink
from adapters.s3 import S3Location, S3ParquetSink, S3Settings, s3_client, usage

__all__ = [
    "LandingZone",
    "TableAddress",
    "is_object_store",
    "open_landing_zone",
    "storage_options",
    "table_address",
]


_LOG_DIR = "_delta_log"


def is_object_store(location: str | Path) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True, slots=True)
class TableAddress:
    """How delta-rs (and any Delta reader) reaches the zone's table."""

    uri: str
    storage_options: dict[str, str] | None


def table_address(location: str | Path, s3: S3Settings | None = None) -> TableAddress:
    """``ValueError`` for an ``s3://`` URL without a bucket."""
    if is_object_store(location):
        where = S3Location.parse(str(location))
        return TableAddress(str(where), storage_options(s3 or S3Settings()))
    return TableAddress(str(Path(location).absolute()), None)


def storage_options(s3: S3Settings) -> dict[str, str]:
    """delta-rs (object_store) options for the store ``s3`` reaches: only what is set, so the
    AWS variables and the SDK chain fill the rest."""
    options: dict[str, str] = {"timeout": f"{round(s3.request_timeout)}s"}
    if s3.endpoint_url:
        options["AWS_ENDPOINT_URL"] = s3.endpoint_url
        if s3.endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.region:
        options["AWS_REGION"] = s3.region
    elif s3.endpoint_url:
        options["AWS_REGION"] = "us-east-1"  # S3-compatible servers ignore it; the client needs one
    if s3.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = s3.access_key_id
    if s3.secret_access_key is not None:
        options["AWS_SECRET_ACCESS_KEY"] = s3.secret_access_key.get_secret_value()
    style = s3.addressing_style
    if style == "virtual" or (style == "auto" and not s3.endpoint_url):
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
    if not s3.verify_tls:
        options["allow_invalid_certificates"] = "true"
    return options


def _local_usage(folder: Path) -> tuple[int, int]:
    files = sizes = 0
    for entry in os.scandir(folder):
        # a commit or checkpoint being written is a staging file renamed away any moment
        with suppress(FileNotFoundError):
            if entry.is_file():
                size = entry.stat().st_size
                files, sizes = files + 1, sizes + size
    return files, sizes


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
        where = S3Location.parse(str(location))
        client = s3_client(s3 or S3Settings())
        sink = S3ParquetSink(client, where, parquet)
        log_size = partial(usage, client, where, _LOG_DIR)
    else:
        root = Path(address.uri)
        sink = ParquetSink((parquet or ParquetSettings()).model_copy(update={"data_dir": root}))
        log_size = partial(_local_usage, root / _LOG_DIR)
    return LandingZone(
        sink,
        DeltaLandedTable(address.uri, address.storage_options, table),
        DeltaTableUpkeep(address.uri, address.storage_options, table, log_size=log_size),
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
    """The zone's sink, table and upkeep, entered. ``ValueError`` for an ``s3://`` URL
    without a bucket."""
    zone = _adapters(location, parquet, s3, table)
    async with zone.sink, zone.table, zone.upkeep:
        yield zone
