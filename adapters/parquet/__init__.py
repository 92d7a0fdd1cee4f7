"""The landing zone's data files on a file system: the Sink port on Parquet files (pyarrow;
layout, schema and encoding: ``adapters._parquet_format``). The table over them is
``adapters.delta``."""

from adapters._parquet_format import (
    LANDED_SCHEMA,
    ParquetSettings,
    encode_files,
    sorted_table,
    to_table,
    use_memory_pool,
    write_parquet,
)
from adapters.parquet._sink import ParquetSink

__all__ = [
    "LANDED_SCHEMA",
    "ParquetSettings",
    "ParquetSink",
    "encode_files",
    "sorted_table",
    "to_table",
    "use_memory_pool",
    "write_parquet",
]
