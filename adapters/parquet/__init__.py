"""The landing zone on a file system: the Sink port on Parquet files (pyarrow; layout and
schema: ``LANDED_SCHEMA``'s module), the LandingLog port (``_log``) and the ZoneFiles
port (``_files``)."""

from adapters.parquet._files import LocalZoneFiles
from adapters.parquet._log import LOG_DIR, LocalLandingLog
from adapters.parquet._schema import LANDED_SCHEMA
from adapters.parquet._sink import (
    ParquetSettings,
    ParquetSink,
    layout,
    sorted_table,
    table_file_path,
    to_table,
    write_parquet,
)

__all__ = [
    "LANDED_SCHEMA",
    "LOG_DIR",
    "LocalLandingLog",
    "LocalZoneFiles",
    "ParquetSettings",
    "ParquetSink",
    "layout",
    "sorted_table",
    "table_file_path",
    "to_table",
    "write_parquet",
]
