"""The Sink port on Parquet files (pyarrow). Layout and schema: ``LANDED_SCHEMA``'s module."""

from adapters.parquet._schema import LANDED_SCHEMA
from adapters.parquet._sink import ParquetSettings, ParquetSink, to_table

__all__ = ["LANDED_SCHEMA", "ParquetSettings", "ParquetSink", "to_table"]
