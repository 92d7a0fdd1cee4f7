"""The landing zone's table: Delta Lake through delta-rs (``deltalake``), on a local path
or ``s3://bucket/prefix``. ``DeltaTableUpkeep`` is the TableUpkeep port (compaction,
checkpoints, log cleanup, vacuum, each in a child process); the writers' side, the
LandedTable port, is ``adapters.delta.table.DeltaLandedTable`` (commits fenced by app
transactions: ``core.table``). That one is a module of its own because it imports delta-rs
and pyarrow, 70 MB a leader that only keeps the table up does without."""

from adapters.delta._settings import TableSettings
from adapters.delta._upkeep import DeltaTableUpkeep

__all__ = ["DeltaTableUpkeep", "TableSettings"]
