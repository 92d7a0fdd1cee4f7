"""``shoal analytics compact``, ``vacuum``, ``check`` and ``repair``: the landing table's
upkeep on demand, by the same ``TableKeeper`` the active leader runs on a schedule
(``services.common.upkeep``; settings ``SHOAL_TABLE_*``).

``compact`` rewrites, in one Delta commit, the small files of every closed day (a ``date``
before today's UTC date) holding two or more of them, and with ``include_today`` of today
too (handlers still write there: their appends and the rewrite do not conflict); then it
writes a checkpoint, which removes the log entries older than the table's log retention.
A reader sees the old files or the new ones, never both or neither; the files compacted
away stay in the folder for readers of older versions until a vacuum.

``vacuum`` deletes the files of the table's folder that no version names (compacted away,
or written by a handler whose commit never came) once older than the retention. A
handler's file is such a file between its write and its commit, so the retention must be
longer than any write in flight: hours, not seconds.

``check`` lists the active files of the newest version that storage does not hold (a table
naming one fails every read). ``repair`` undoes one rewrite (a compaction) whose files are
missing, restoring the files it removed while they are still within the vacuum retention
(``core.table.plan_repair`` says when that would lose or duplicate rows: then nothing
changes).

The zone is a directory or ``s3://bucket/prefix`` (``open_landing_zone``). Neither command
creates a table: a zone without one is refused (``ZoneError``), and so is a compaction that
another (the leader's) committed over first: nothing changed, run it again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from adapters.delta import TableSettings
from core.errors import CommitConflictError
from services.common.settings import load_settings
from services.common.table_address import is_object_store
from services.common.upkeep import (
    Checkpoint,
    Compaction,
    NoTableError,
    TableKeeper,
    Vacuum,
    utc_day,
)

__all__ = [
    "TableCheck",
    "TableCompaction",
    "TableRepair",
    "ZoneError",
    "check_table",
    "compact_table",
    "compaction_json",
    "print_check",
    "print_compaction",
    "print_repair",
    "print_vacuum",
    "repair_table",
    "table_settings",
    "vacuum_json",
    "vacuum_table",
]


class ZoneError(ValueError):
    """The location is no landing table: missing, not a directory, an ``s3://`` URL
    without a bucket, or no Delta table there."""


@dataclass(frozen=True, slots=True)
class TableCompaction:
    """What ``compact`` did: the compaction, and the checkpoint after it (None when
    nothing was compacted)."""

    location: str
    include_today: bool
    compaction: Compaction
    checkpoint: Checkpoint | None


def table_settings(*, checked: bool = True, **overrides: float | None) -> TableSettings:
    """``SHOAL_TABLE_*`` (exit 2 on a bad value), with the command's options (those not
    None) over them, validated like the environment's unless not ``checked``."""
    settings = load_settings(TableSettings)
    given = {name: value for name, value in overrides.items() if value is not None}
    if not given:
        return settings
    if not checked:
        return settings.model_copy(update=given)
    try:
        return TableSettings.model_validate({**settings.model_dump(), **given})
    except ValidationError as exc:
        message = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def _keeper_at(location: str, settings: TableSettings) -> TableKeeper:
    if not is_object_store(location):
        folder = Path(location)
        if not folder.exists():
            raise ZoneError(f"landing zone {location} does not exist")
        if not folder.is_dir():
            raise ZoneError(f"landing zone {location} is not a directory")
    try:
        return TableKeeper.at(location, settings)
    except ValueError as exc:  # an s3:// URL without a bucket
        raise ZoneError(str(exc)) from None


async def _keeper(location: str, settings: TableSettings) -> TableKeeper:
    keeper = _keeper_at(location, settings)
    if not await keeper.exists():
        raise ZoneError(
            f"{location} holds no Delta table (no _delta_log): nothing has landed there yet, "
            "or it is not a landing zone"
        )
    return keeper


async def compact_table(
    location: str, settings: TableSettings, *, include_today: bool
) -> TableCompaction:
    """Compact the table at ``location`` (see the module's docstring). Raises
    ``ZoneError``, and ``OSError`` when the storage fails."""
    keeper = await _keeper(location, settings)
    try:
        # A closed day is due with two small files; so is today when it is included.
        compaction = await keeper.compact(open_day_files=2 if include_today else None)
        checkpoint = await keeper.checkpoint() if compaction.days else None
    except NoTableError as exc:  # removed since it was looked at
        raise ZoneError(str(exc)) from None
    except CommitConflictError as exc:
        raise ZoneError(f"{exc}; run it again") from None
    return TableCompaction(location, include_today, compaction, checkpoint)


async def vacuum_table(
    location: str, settings: TableSettings, *, dry_run: bool, enforce: bool = True
) -> Vacuum:
    """Delete (``dry_run``: list) the files no version of the table at ``location`` names,
    older than the settings' ``vacuum_retention_hours`` (``enforce``: only above the table's
    log retention). Raises ``ZoneError`` (also for a vacuum refused: nothing deleted), and
    ``OSError`` when the storage fails."""
    keeper = await _keeper(location, settings)
    try:
        return await keeper.vacuum(dry_run=dry_run, enforce=enforce)
    except (NoTableError, ValueError) as exc:
        raise ZoneError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class TableCheck:
    location: str
    version: int
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableRepair:
    location: str
    version: int
    restored: tuple[str, ...]
    removed: tuple[str, ...]


async def check_table(location: str, settings: TableSettings) -> TableCheck:
    """The active files of the newest version that storage does not hold. Raises
    ``ZoneError``, and ``OSError`` when the storage fails."""
    keeper = await _keeper(location, settings)
    try:
        version, missing = await keeper.missing()
    except NoTableError as exc:
        raise ZoneError(str(exc)) from None
    return TableCheck(location, version, tuple(missing))


async def repair_table(location: str, settings: TableSettings, version: int) -> TableRepair:
    """Undo the rewrite ``version`` (see the module's docstring). Raises ``ZoneError`` (also
    when the version cannot be undone: nothing changed), and ``OSError`` when the storage
    fails."""
    keeper = await _keeper(location, settings)
    try:
        restored, removed = await keeper.repair(version)
    except (NoTableError, ValueError) as exc:
        raise ZoneError(str(exc)) from None
    except CommitConflictError as exc:
        raise ZoneError(f"{exc}; run it again") from None
    return TableRepair(location, version, tuple(restored), tuple(removed))


# --- output ------------------------------------------------------------------------------


def compaction_json(result: TableCompaction) -> dict[str, Any]:
    """``shoal analytics compact --json``."""
    compaction, checkpoint = result.compaction, result.checkpoint
    before, after = compaction.before, compaction.after
    return {
        "location": result.location,
        "today": utc_day(compaction.at),
        "include_today": result.include_today,
        "version_before": before.version,
        "version_after": after.version,
        "files_before": before.files,
        "files_after": after.files,
        "rows_before": before.rows,
        "rows_after": after.rows,
        "dates": [day.to_json() for day in compaction.by_day()],
        "files_removed": compaction.files_removed,
        "files_added": compaction.files_added,
        "log_files_removed": 0 if checkpoint is None else checkpoint.log_files_removed,
    }


def print_compaction(console: Console, result: TableCompaction) -> None:
    compaction, checkpoint = result.compaction, result.checkpoint
    before, after = compaction.before, compaction.after
    console.print(
        f"compaction of {result.location}: table version {before.version} -> {after.version}, "
        f"{before.files:,} -> {after.files:,} files",
        style="bold",
        markup=False,
    )
    if not compaction.days:
        scope = "no day before today" if not result.include_today else "no day"
        console.print(f"nothing to compact: {scope} holds two small files or more", markup=False)
        return
    table = Table(show_edge=False, box=None, pad_edge=False)
    table.add_column("date", style="bold")
    table.add_column("files before", justify="right")
    table.add_column("small", justify="right")
    table.add_column("files after", justify="right")
    for day in compaction.by_day():
        table.add_row(
            day.day, f"{day.files_before:,}", f"{day.small_before:,}", f"{day.files_after:,}"
        )
    console.print(table)
    console.print(
        f"{compaction.files_removed:,} files rewritten into {compaction.files_added:,}; "
        f"{after.rows:,} rows",
        markup=False,
    )
    if compaction.rows_lost:
        console.print(
            f"FAULT: the table held {before.rows:,} rows before and {after.rows:,} after; "
            f"{len(after.missing)} active file(s) missing from storage",
            style="bold red",
            markup=False,
        )
    if checkpoint is not None:
        console.print(
            f"checkpoint at version {checkpoint.version}: {checkpoint.log_files_removed:,} "
            f"log files removed",
            markup=False,
        )


def vacuum_json(location: str, vacuum: Vacuum) -> dict[str, Any]:
    """``shoal analytics vacuum --json``."""
    return {
        "location": location,
        "retention_hours": vacuum.retention_hours,
        "dry_run": vacuum.dry_run,
        "files": sorted(vacuum.files),
    }


def print_vacuum(console: Console, location: str, vacuum: Vacuum) -> None:
    verb = "would delete" if vacuum.dry_run else "deleted"
    console.print(
        f"vacuum of {location}: {verb} {len(vacuum.files):,} file(s) no table version names, "
        f"older than {vacuum.retention_hours:g} h",
        style="bold",
        markup=False,
    )
    for path in sorted(vacuum.files):
        console.print(f"  {path}", markup=False)


def print_check(console: Console, check: TableCheck) -> None:
    if not check.missing:
        console.print(
            f"check of {check.location}: version {check.version}, every active file is stored",
            markup=False,
        )
        return
    console.print(
        f"FAULT: version {check.version} of {check.location} names {len(check.missing):,} "
        "file(s) storage does not hold; every read of the table fails on them. Find the "
        "version that added them (`_delta_log`) and undo it with `shoal analytics repair "
        "--version V` while the files it removed are within the vacuum retention",
        style="bold red",
        markup=False,
    )
    for path in check.missing:
        console.print(f"  {path}", markup=False)


def print_repair(console: Console, repair: TableRepair) -> None:
    console.print(
        f"repair of {repair.location}: version {repair.version} undone: "
        f"{len(repair.restored):,} file(s) restored, {len(repair.removed):,} removed",
        style="bold",
        markup=False,
    )
    for path in repair.restored:
        console.print(f"  + {path}", markup=False)
    for path in repair.removed:
        console.print(f"  - {path}", markup=False)
