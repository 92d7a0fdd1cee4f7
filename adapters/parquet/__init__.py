"""The landing zone on a file system: the Sink port on Parquet files (pyarrow; layout and
schema: ``LANDED_SCHEMA``'s module) and the LandingLog port (``_log``)."""

from adapters.parquet._log import LOG_DIR, LocalLandingLog
from adapters.parquet._schema import LANDED_SCHEMA
from adapters.parquet._sink import (
    ParquetSettings,
    ParquetSink,
    layout,
    sorted_table,
    to_table,
    write_parquet,
)

__all__ = [
    "LANDED_SCHEMA",
    "LOG_DIR",
    "LocalLandingLog",
    "ParquetSettings",
    "ParquetSink",
    "layout",
    "sorted_table",
    "to_table",
    "write_parquet",
]
