"""The landing table's upkeep: compaction of small files, checkpoints (which clean the
Delta log) and vacuum of files no version names. One ``TableKeeper`` does it for the
active leader, on a schedule (``run``), and for ``shoal analytics compact`` / ``vacuum``,
on demand: the same code either way, over the ``TableUpkeep`` port.

A round (``round``):

1. read the table's health (files per ``date``, how many are below ``small_file_bytes``);
2. compact the days ``core.table.days_to_compact`` names (a closed day with two small
   files or more, the open day once it holds ``open_day_files``) into files of about
   ``target_file_bytes``, in one commit;
3. write a checkpoint when the version moved since the last one this keeper wrote: Delta
   then removes the log entries older than the table's log retention that it covers;
4. every ``vacuum_interval`` (and in a keeper's first round), delete the files no version
   names that are older than ``vacuum_retention_hours``: files compacted away, and
   writers' files that never got their commit. A writer's file is such a file between its
   write and its commit, so the retention must be longer than any write in flight.

The keeper never creates the table: while there is none (no handler landed anything yet)
a round does nothing. A round that fails is logged, counted and kept as ``last_error``;
the next one is tried an interval later. Every decision is logged with its reasons;
``status`` is what the status document and the dashboard show, ``TableMetrics`` what
Prometheus scrapes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge

from adapters.delta import DeltaTableUpkeep, TableSettings
from adapters.s3 import S3Settings
from core.errors import CommitConflictError
from core.ports import TableHealth, TableUpkeep
from core.table import DayFiles, days_to_compact
from services.common.logs import fields
from services.common.table_address import table_address

__all__ = [
    "Checkpoint",
    "Compaction",
    "DayCompaction",
    "NoTableError",
    "TableKeeper",
    "TableMetrics",
    "Vacuum",
    "no_table_status",
    "utc_day",
]

log = logging.getLogger("shoal.table")

_LOGGED_PATHS = 20  # a vacuum's log line names this many of the files it deleted


class NoTableError(LookupError):
    """There is no Delta table at the location (no handler landed anything there yet, or it
    is not a landing zone)."""


def utc_day(at: float) -> str:
    """The ``date`` partition a row received at ``at`` lands in."""
    return datetime.fromtimestamp(at, UTC).date().isoformat()


@dataclass(frozen=True, slots=True)
class DayCompaction:
    day: str
    files_before: int
    small_before: int
    files_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.day,
            "files_before": self.files_before,
            "small_before": self.small_before,
            "files_after": self.files_after,
        }


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction: the table before and after, the days rewritten (none: nothing was
    due) and the files the rewrite removed and added."""

    at: float
    before: TableHealth
    after: TableHealth
    days: tuple[str, ...]
    files_removed: int
    files_added: int

    @property
    def rows_lost(self) -> bool:
        """Rows are only ever added to the table: fewer after than before is a fault, and
        so is an active file of a day it rewrote that storage does not hold (its rows
        still count in the log, but no read of the table gets past it)."""
        return self.after.rows < self.before.rows or bool(self.after.missing)

    def by_day(self) -> list[DayCompaction]:
        after = {d.day: d.files for d in self.after.days}
        return [
            DayCompaction(d.day, d.files, d.small, after.get(d.day, 0))
            for d in self.before.days
            if d.day in self.days
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "days": list(self.days),
            "files_removed": self.files_removed,
            "files_added": self.files_added,
            "version": self.after.version,
        }


@dataclass(frozen=True, slots=True)
class Checkpoint:
    at: float
    version: int
    log_files_removed: int

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "version": self.version,
            "log_files_removed": self.log_files_removed,
        }


@dataclass(frozen=True, slots=True)
class Vacuum:
    """One vacuum: the files it deleted (with ``dry_run``: would delete), relative to the
    table's root."""

    at: float
    retention_hours: float
    files: tuple[str, ...]
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "retention_hours": self.retention_hours,
            "files_removed": 0 if self.dry_run else len(self.files),
            "dry_run": self.dry_run,
        }


class TableMetrics:
    """The landing table's size and upkeep (``services.common.upkeep``): the gauges show
    the table as last read, the counters what this process did to it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, what: str) -> Gauge:
            return Gauge(name, what, registry=registry)

        def counter(name: str, what: str) -> Counter:
            return Counter(name, what, registry=registry)

        self.version = gauge("shoal_table_version", "The landing table's version")
        self.files = gauge("shoal_table_files", "Data files of the landing table")
        self.small_files = gauge(
            "shoal_table_small_files", "Data files of the landing table below the small size"
        )
        self.bytes = gauge("shoal_table_bytes", "Bytes of the landing table's data files")
        self.rows = gauge("shoal_table_rows", "Rows of the landing table")
        self.log_files = gauge("shoal_table_log_files", "Files in the landing table's log")
        self.log_bytes = gauge("shoal_table_log_bytes", "Bytes of the landing table's log")
        self.compactions = counter("shoal_table_compactions", "Compactions of the landing table")
        self.files_compacted = counter(
            "shoal_table_files_compacted", "Data files compaction rewrote into larger ones"
        )
        self.checkpoints = counter("shoal_table_checkpoints", "Checkpoints written")
        self.log_files_removed = counter(
            "shoal_table_log_files_removed", "Log files removed once a checkpoint covered them"
        )
        self.vacuumed_files = counter(
            "shoal_table_vacuumed_files", "Files no table version names, deleted by vacuum"
        )
        self.failures = counter("shoal_table_upkeep_failures", "Upkeep rounds that failed")
        self.last_compaction = gauge(
            "shoal_table_last_compaction_timestamp", "Unix time of the last compaction"
        )
        self.last_vacuum = gauge(
            "shoal_table_last_vacuum_timestamp", "Unix time of the last vacuum"
        )

    def observe(self, health: TableHealth) -> None:
        self.version.set(health.version)
        self.files.set(health.files)
        self.small_files.set(sum(day.small for day in health.days))
        self.bytes.set(health.bytes)
        self.rows.set(health.rows)
        self.log_files.set(health.log_files)
        self.log_bytes.set(health.log_bytes)


def _why_due(day: DayFiles, today: str, open_day_files: int) -> str:
    if day.day < today:
        return f"closed day with {day.small} small files (2 or more)"
    return f"open day with {day.small} small files ({open_day_files} or more)"


class TableKeeper:
    """The upkeep of one landing table (every call but ``round`` raises ``NoTableError``
    while there is none); ``clock`` gives the time (seconds since the epoch: which day is
    open, when a vacuum is due). Storage errors raise ``OSError``."""

    def __init__(
        self,
        upkeep: TableUpkeep,
        settings: TableSettings,
        *,
        location: str,
        clock: Callable[[], float] = time.time,
        metrics: TableMetrics | None = None,
    ) -> None:
        self.location = location
        self.settings = settings
        self._upkeep = upkeep
        self._clock = clock
        self._metrics = metrics or TableMetrics(CollectorRegistry())
        self.active = False  # ``run`` runs: this replica keeps the table up now
        self.health_read_at: float | None = None
        self.last_health: TableHealth | None = None
        self.last_compaction: Compaction | None = None
        self.last_checkpoint: Checkpoint | None = None
        self.last_vacuum: Vacuum | None = None
        self.compactions = 0
        self.files_compacted = 0
        self.checkpoints = 0
        self.vacuumed_files = 0
        self.failures = 0
        self.last_error: tuple[float, str] | None = None  # the last round's, when it failed
        self._table_seen = False  # a table, once there, stays: no need to ask again
        self._no_table_said = False

    @classmethod
    def at(
        cls,
        location: str | Path,
        settings: TableSettings,
        *,
        s3: S3Settings | None = None,
        clock: Callable[[], float] = time.time,
        metrics: TableMetrics | None = None,
    ) -> TableKeeper:
        """The keeper of the table of the zone at ``location`` (a directory or
        ``s3://bucket/prefix``). ``ValueError`` for an ``s3://`` URL without a bucket."""
        address = table_address(location, s3)
        upkeep = DeltaTableUpkeep(address.uri, address.storage_options)
        return cls(upkeep, settings, location=address.uri, clock=clock, metrics=metrics)

    # -- one step at a time (the CLI's commands) ------------------------------------------

    async def health(self, check_days: Sequence[str] = ()) -> TableHealth:
        """The table now; the active files of ``check_days`` that storage does not hold in
        ``missing``."""
        await self._require_table()
        health = await self._upkeep.health(self.settings.small_file_bytes, check_days)
        self.health_read_at, self.last_health = self._clock(), health
        self._metrics.observe(health)
        return health

    async def compact(self, *, open_day_files: int | None) -> Compaction:
        """Compact the days that are due. ``open_day_files``: the small files that make
        the open day (today, UTC) due; None leaves it alone."""
        before = await self.health()
        now = self._clock()
        today = utc_day(now)
        candidates = [d for d in before.days if open_day_files is not None or d.day < today]
        # Without an open day among the candidates the threshold is never consulted.
        threshold = 2 if open_day_files is None else open_day_files
        due = set(days_to_compact(candidates, today, open_day_files=threshold))
        days = [d for d in candidates if d.day in due]
        if not days:
            return Compaction(now, before, before, (), 0, 0)
        for day in days:
            log.info(
                "compacting a day",
                extra=fields(
                    table=self.location,
                    day=day.day,
                    files=day.files,
                    small=day.small,
                    reason=_why_due(day, today, threshold),
                ),
            )
        removed, added = await self._upkeep.compact(
            [d.day for d in days], self.settings.target_file_bytes
        )
        after = await self.health(check_days=[d.day for d in days])
        compaction = Compaction(now, before, after, tuple(d.day for d in days), removed, added)
        self.last_compaction = compaction
        self.compactions += 1
        self.files_compacted += removed
        self._metrics.compactions.inc()
        self._metrics.files_compacted.inc(removed)
        self._metrics.last_compaction.set(now)
        log.info(
            "compacted",
            extra=fields(
                table=self.location,
                days=",".join(compaction.days),
                files_removed=removed,
                files_added=added,
                version=after.version,
                files=after.files,
            ),
        )
        if compaction.rows_lost:
            log.error(
                "the table lost rows in a compaction: fewer rows after than before, or "
                "active files storage does not hold (see `shoal analytics check` and "
                "`shoal analytics repair`)",
                extra=fields(
                    table=self.location,
                    before=before.rows,
                    after=after.rows,
                    version=after.version,
                    missing=list(after.missing[:_LOGGED_PATHS]),
                ),
            )
        return compaction

    async def missing(self) -> tuple[int, list[str]]:
        """The newest version and its active files storage does not hold."""
        await self._require_table()
        return await self._upkeep.missing()

    async def repair(self, version: int) -> tuple[list[str], list[str]]:
        """Undo the rewrite ``version`` (``TableUpkeep.repair``): (restored, removed)."""
        await self._require_table()
        restored, dropped = await self._upkeep.repair(version)
        log.warning(
            "table repaired: a rewrite undone",
            extra=fields(
                table=self.location,
                version=version,
                restored=len(restored),
                removed=len(dropped),
                files=dropped[:_LOGGED_PATHS],
            ),
        )
        return restored, dropped

    async def checkpoint(self) -> Checkpoint:
        """Checkpoint the newest version and clean the log it covers."""
        await self._require_table()
        # The version last read: the checkpoint covers it, or a newer one a writer made since.
        version = self.last_health.version if self.last_health else -1
        removed = await self._upkeep.checkpoint()
        checkpoint = Checkpoint(self._clock(), version, removed)
        self.last_checkpoint = checkpoint
        self.checkpoints += 1
        self._metrics.checkpoints.inc()
        self._metrics.log_files_removed.inc(removed)
        # Routine under steady writes (a round's checkpoint): said when it cleaned the log.
        log.log(
            logging.INFO if removed else logging.DEBUG,
            "checkpoint written",
            extra=fields(table=self.location, version=version, log_files_removed=removed),
        )
        return checkpoint

    async def vacuum(
        self, retention_hours: float | None = None, *, dry_run: bool = False, enforce: bool = True
    ) -> Vacuum:
        """Delete the files no version names once older than ``retention_hours`` (default:
        the settings'); with ``dry_run``, only say which. ``enforce=False`` lets the
        retention be at or below the table's log retention (``TableUpkeep.vacuum``)."""
        await self._require_table()
        hours = self.settings.vacuum_retention_hours if retention_hours is None else retention_hours
        files = tuple(await self._upkeep.vacuum(hours, dry_run=dry_run, enforce=enforce))
        vacuum = Vacuum(self._clock(), hours, files, dry_run)
        if dry_run:
            return vacuum
        self.last_vacuum = vacuum
        self.vacuumed_files += len(files)
        self._metrics.vacuumed_files.inc(len(files))
        self._metrics.last_vacuum.set(vacuum.at)
        log.info(
            "vacuumed",
            extra=fields(
                table=self.location,
                retention_hours=hours,
                files_removed=len(files),
                files=list(files[:_LOGGED_PATHS]),
                more=max(0, len(files) - _LOGGED_PATHS),
            ),
        )
        return vacuum

    # -- on a schedule (the active leader) ------------------------------------------------

    async def round(self) -> None:
        """One round of upkeep (see the module's docstring). Never raises but for
        cancellation: a failure is logged, counted and kept as ``last_error``."""
        try:
            if not await self.exists():
                if not self._no_table_said:
                    log.info("no table to keep up yet", extra=fields(table=self.location))
                    self._no_table_said = True
                return
            compaction = await self.compact(open_day_files=self.settings.open_day_files)
            version = compaction.after.version
            changed = False
            if self.last_checkpoint is None or self.last_checkpoint.version != version:
                await self.checkpoint()
                changed = True
            if self._vacuum_due():
                await self.vacuum()
                changed = True
            if changed:  # the log's size as the checkpoint and the vacuum left it
                await self.health()
        except Exception as exc:  # a failed round must not stop leadership: next interval
            self.failures += 1
            self._metrics.failures.inc()
            error = _describe(exc)
            self.last_error = (self._clock(), error)
            # A store, a race, or a step refused before it changed anything: said.
            if isinstance(exc, OSError | CommitConflictError | ValueError):
                log.warning(
                    "table upkeep failed; retrying next interval",
                    extra=fields(
                        table=self.location, error=error, retry_in=self.settings.upkeep_interval
                    ),
                )
            else:
                log.exception(
                    "table upkeep failed; retrying next interval",
                    extra=fields(table=self.location, retry_in=self.settings.upkeep_interval),
                )
        else:
            self.last_error = None

    async def run(self) -> None:
        """A round now and every ``upkeep_interval`` until cancelled (leadership lost)."""
        interval = self.settings.upkeep_interval
        self.active = True
        log.info("table upkeep started", extra=fields(table=self.location, interval=interval))
        try:
            while True:
                await self.round()
                await anyio.sleep(interval)
        finally:
            self.active = False
            log.info("table upkeep stopped", extra=fields(table=self.location))

    def status(self) -> dict[str, Any]:
        """The ``table`` section of the status document (no I/O)."""
        health = self.last_health
        figures: dict[str, Any] = {
            "version": None,
            "files": None,
            "small_files": None,
            "bytes": None,
            "rows": None,
            "log_files": None,
            "log_bytes": None,
        }
        if health is not None:
            figures = {
                "version": health.version,
                "files": health.files,
                "small_files": sum(d.small for d in health.days),
                "bytes": health.bytes,
                "rows": health.rows,
                "log_files": health.log_files,
                "log_bytes": health.log_bytes,
            }
        return {
            "enabled": True,
            "active": self.active,
            "location": self.location,
            "interval_s": self.settings.upkeep_interval,
            "read_at": self.health_read_at,
            **figures,
            "compactions": self.compactions,
            "files_compacted": self.files_compacted,
            "last_compaction": _json(self.last_compaction),
            "checkpoints": self.checkpoints,
            "last_checkpoint": _json(self.last_checkpoint),
            "vacuumed_files": self.vacuumed_files,
            "vacuum_retention_hours": self.settings.vacuum_retention_hours,
            "last_vacuum": _json(self.last_vacuum),
            "failures": self.failures,
            "last_error": None
            if self.last_error is None
            else {"at": self.last_error[0], "error": self.last_error[1]},
        }

    def _vacuum_due(self) -> bool:
        last = self.last_vacuum
        return last is None or self._clock() - last.at >= self.settings.vacuum_interval

    async def exists(self) -> bool:
        """Whether the table is there (``OSError`` when the storage cannot tell)."""
        if not self._table_seen:
            self._table_seen = await self._upkeep.exists()
        return self._table_seen

    async def _require_table(self) -> None:
        if not await self.exists():
            raise NoTableError(f"no Delta table at {self.location}")


def _describe(exc: BaseException) -> str:
    # delta-rs appends a native backtrace to its messages: the first line says what failed
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _json(record: Compaction | Checkpoint | Vacuum | None) -> dict[str, Any] | None:
    return None if record is None else record.to_json()


def no_table_status() -> dict[str, Any]:
    """The ``table`` section of a leader that keeps no table up."""
    return {"enabled": False, "active": False}
