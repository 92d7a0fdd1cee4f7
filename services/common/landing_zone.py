"""Where the landing zone lives, and the adapters for it: a directory (``ParquetSink`` +
``LocalLandingLog`` + ``LocalZoneFiles``) or ``s3://bucket/prefix`` on an S3-compatible
store (``S3ParquetSink`` + ``S3LandingLog`` + ``S3ZoneFiles``, reached as ``S3Settings`` /
the AWS variables say). Handlers, ``shoal analytics`` and ``shoal up`` all take the zone as
such a string."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from adapters.parquet import LocalLandingLog, LocalZoneFiles, ParquetSettings, ParquetSink
from adapters.s3 import (
    S3LandingLog,
    S3Location,
    S3ParquetSink,
    S3Settings,
    S3ZoneFiles,
    s3_client,
)
from core.ports import LandingLog

__all__ = ["LandingZone", "is_object_store", "landing_log_at", "open_landing_zone"]


def is_object_store(location: str | Path) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True, slots=True)
class LandingZone:
    sink: ParquetSink | S3ParquetSink
    log: LocalLandingLog | S3LandingLog
    files: LocalZoneFiles | S3ZoneFiles


def _adapters(
    location: str | Path, parquet: ParquetSettings | None, s3: S3Settings | None
) -> LandingZone:
    if is_object_store(location):
        where = S3Location.parse(str(location))
        client = s3_client(s3 or S3Settings())
        return LandingZone(
            S3ParquetSink(client, where, parquet),
            S3LandingLog(client, where),
            S3ZoneFiles(client, where),
        )
    root = Path(location)
    settings = (parquet or ParquetSettings()).model_copy(update={"data_dir": root})
    return LandingZone(ParquetSink(settings), LocalLandingLog(root), LocalZoneFiles(root))


@asynccontextmanager
async def open_landing_zone(
    location: str | Path,
    *,
    parquet: ParquetSettings | None = None,
    s3: S3Settings | None = None,
) -> AsyncIterator[LandingZone]:
    """The zone's sink, log and files, entered. ``ValueError`` for an ``s3://`` URL without a
    bucket."""
    zone = _adapters(location, parquet, s3)
    async with zone.sink, zone.log, zone.files:
        yield zone


def landing_log_at(location: str | Path, s3: S3Settings | None = None) -> LandingLog:
    """The zone's log alone (readers: ``services.common.table.committed_state``)."""
    return _adapters(location, None, s3).log
