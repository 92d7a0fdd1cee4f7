"""The landing zone's table: Delta Lake through delta-rs (``deltalake``), on a local path
or ``s3://bucket/prefix``. ``DeltaLandedTable`` is the LandedTable port (the handlers'
commits, fenced by app transactions: ``core.table``), ``DeltaTableUpkeep`` the
TableUpkeep port (compaction, checkpoints, log cleanup, vacuum)."""

from adapters.delta._settings import TableSettings
from adapters.delta._table import PARTITION_COLUMN, TABLE_SCHEMA, DeltaLandedTable, open_table
from adapters.delta._upkeep import DeltaTableUpkeep

__all__ = [
    "PARTITION_COLUMN",
    "TABLE_SCHEMA",
    "DeltaLandedTable",
    "DeltaTableUpkeep",
    "TableSettings",
    "open_table",
]
