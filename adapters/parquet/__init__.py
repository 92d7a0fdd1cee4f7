"""The landing zone on a file system: the Sink port on Parquet files (pyarrow; layout and
schema and encoding: ``adapters._parquet_format``), the LandingLog port (``_log``) and the ZoneFiles
port (``_files``)."""

from adapters._parquet_format import (
    LANDED_SCHEMA,
    ParquetSettings,
    layout,
    sorted_table,
    table_file_path,
    to_table,
    write_parquet,
)
from adapters.parquet._files import LocalZoneFiles
from adapters.parquet._log import LOG_DIR, LocalLandingLog
from adapters.parquet._sink import ParquetSink

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
