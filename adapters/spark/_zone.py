"""The landing zone as the analytics read it: a directory or ``s3://bucket/prefix`` holding
a Delta table (importable without pyspark, so the CLI checks a zone before Spark starts)."""

from __future__ import annotations

from pathlib import Path

from adapters.spark._errors import LandingDirError

__all__ = ["Zone", "check_local_zone", "is_s3", "not_a_table"]

Zone = str | Path
"""A landing zone: a directory, or ``s3://bucket/prefix``."""

_DELTA_LOG = "_delta_log"


def is_s3(zone: Zone) -> bool:
    return str(zone).startswith(("s3://", "s3a://"))


def check_local_zone(folder: Path) -> None:
    """``LandingDirError`` unless ``folder`` is a directory with a Delta log."""
    if not folder.exists():
        raise LandingDirError(f"landing directory {folder} does not exist")
    if not folder.is_dir():
        raise LandingDirError(f"landing directory {folder} is not a directory")
    if not (folder / _DELTA_LOG).is_dir():
        raise LandingDirError(not_a_table(folder, holds_parquet=_holds_parquet(folder)))


def not_a_table(zone: Zone, *, holds_parquet: bool) -> str:
    if holds_parquet:
        return (
            f"{zone} is not a Delta table: it holds Parquet files but no version in "
            f"{_DELTA_LOG}/, so nothing says which of them are data"
        )
    return f"{zone} is not a Delta table (no version in {_DELTA_LOG}/)"


def _holds_parquet(folder: Path) -> bool:
    return any(
        not any(part.startswith((".", "_")) for part in path.relative_to(folder).parts)
        for path in folder.rglob("*.parquet")
    )
