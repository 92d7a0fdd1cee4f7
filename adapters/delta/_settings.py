"""``TableSettings``: the landing zone table's own settings (env prefix ``SHOAL_TABLE_``)."""

from __future__ import annotations

import math
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["TableSettings"]


class TableSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_TABLE_", extra="ignore")

    log_retention_hours: float = Field(
        default=30.0,
        gt=0,
        description="commits older than this are removed from the Delta log once a "
        "checkpoint covers them: a Delta streaming reader (Spark readStream) stopped longer "
        "cannot resume, and time travel reaches back this far. Must be below "
        "vacuum_retention_hours. On a local disk every commit lists the whole log (about "
        "10 us an entry, so a busy local table wants a shorter one): see "
        "docs/architecture.md, Upkeep. Set on a new table",
    )
    checkpoint_interval: int = Field(
        default=100, ge=1, description="commits per checkpoint (set on a new table)"
    )
    upkeep_interval: float = Field(
        default=60.0,
        gt=0,
        description="seconds between two rounds: compaction, checkpoint and log cleanup",
    )
    target_file_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1024, description="compaction writes files of about this"
    )
    small_file_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1,
        description="files below this are compacted (a day's first small files wait for more)",
    )
    open_day_files: int = Field(
        default=50,
        ge=2,
        description="small files that make today's partition due for compaction (closed days: 2)",
    )
    vacuum_interval: float = Field(
        default=3600.0, gt=0, description="seconds between two vacuums of unnamed files"
    )
    vacuum_retention_hours: float = Field(
        default=36.0,
        gt=0,
        description="a file no version names is deleted once this old (longer than any "
        "write in flight, and than any reader stays on an old version); above "
        "log_retention_hours, so a writer paused past it finds its snapshot's log gone and "
        "fails instead of committing files a vacuum deleted; also above a handler's write "
        "timeout plus its lease (refused otherwise). On a new table also "
        "`delta.deletedFileRetentionDuration`",
    )

    @model_validator(mode="after")
    def _retention_order(self) -> Self:
        if self.log_retention_hours >= self.vacuum_retention_hours:
            raise ValueError(
                f"SHOAL_TABLE_LOG_RETENTION_HOURS ({self.log_retention_hours:g}) must be "
                f"below SHOAL_TABLE_VACUUM_RETENTION_HOURS ({self.vacuum_retention_hours:g}): "
                "a writer paused "
                "longer than the log retention must find its snapshot's commits gone and "
                "fail, before a vacuum can have deleted the files it is about to commit"
            )
        return self

    def table_configuration(self) -> dict[str, str | None]:
        """The Delta table properties a new table gets. A checkpoint carries the remove
        action of every file compacted away until it is older than
        ``deletedFileRetentionDuration`` (7 days by default: a checkpoint of half a million
        actions after a week of compactions every minute, rewritten every
        ``checkpoint_interval`` commits); the vacuum's retention is as long as any of them
        matters (the vacuum lists the folder, it does not need them)."""
        log_seconds = max(1, math.ceil(self.log_retention_hours * 3600))
        removed_seconds = max(1, math.ceil(self.vacuum_retention_hours * 3600))
        return {
            "delta.enableExpiredLogCleanup": "true",
            "delta.logRetentionDuration": f"interval {log_seconds} seconds",
            "delta.deletedFileRetentionDuration": f"interval {removed_seconds} seconds",
            "delta.checkpointInterval": str(self.checkpoint_interval),
        }
