"""The landing table's layout, shared by its writers and its upkeep."""

__all__ = ["LOG_FOLDER", "PARTITION_COLUMN"]

PARTITION_COLUMN = "date"
LOG_FOLDER = "_delta_log"
