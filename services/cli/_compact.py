"""``shoal analytics compact``: merge the small files of closed days into large ones, swap them
into the landing table in one commit per day, and delete files the table no longer names.

A day (a ``date=YYYY-MM-DD`` folder) is closed when it is before today's UTC date: no
handler writes there any more, except the odd late redelivery (it lands in a file of its own
and a commit of its own, which the swap does not disturb, and is merged next time).

Per closed day, the committed files are packed into bins of at most ``target_rows`` rows
(first fit, largest first). Each bin of several files becomes one file, sorted by partition,
project_id and sequence, written by the sink's ``write_table`` (on a disk: staged, fsynced,
renamed; on an object store: one upload); bins of one file stay as they are, and a day whose
packing would not lower its file count is left alone (so a second run changes nothing).
Every file's rows are counted as read and the new files' rows as written: when they differ
from the table's counts, nothing is committed. Then one commit removes the merged files and
adds the new ones: a reader resolving the table sees one or the other, never both or
neither. The commit is refused when another compactor removed one of the files first: the
new files are deleted and the day reported as ``raced``.

Deleting: a file in a ``date=`` folder (``*.parquet``, or a sink's hidden ``.*.tmp``) that
the table does not name is deleted once its modification time is older than ``retention``
(core's ``unreferenced``); a committed file never is. That removes crashed writers' orphans
and files compacted away. Just before the swap, the files it takes out are stamped with the
current time: a reader that listed the table before the swap has ``retention`` to finish
reading them. ``retention`` must also exceed the longest time a writer takes from writing a
file to committing it (a handler commits right after its write; one paused longer than
``retention`` in between would find its file deleted).

The zone is a directory or ``s3://bucket/prefix`` (``open_landing_zone``); the ZoneFiles
port lists, reads, stamps and deletes. On an object store a file's modification time is the
store's ``LastModified`` (its clock, to the second), stamping copies the object onto itself,
and ages are taken against this machine's clock: keep ``retention`` well above the two
clocks' skew.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq

from adapters.parquet import LANDED_SCHEMA, ParquetSettings, ParquetSink
from adapters.s3 import S3ParquetSink, S3Settings
from core.ports import ZoneFiles
from core.table import LandedFile, TableState, pack, unreferenced
from services.common.landing_zone import open_landing_zone
from services.common.table import LandingTable

__all__ = [
    "DEFAULT_RETENTION",
    "DEFAULT_TARGET_ROWS",
    "Compaction",
    "DayCompaction",
    "collect_garbage",
    "compact",
    "compact_day",
]

DEFAULT_TARGET_ROWS = 1_000_000
DEFAULT_RETENTION = 3600.0  # seconds
SORT_KEYS = [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]

DayStatus = Literal["compacted", "skipped", "raced", "mismatch"]


@dataclass(frozen=True, slots=True)
class DayCompaction:
    """What compaction did to one ``date=`` folder: ``compacted`` (swapped), ``skipped``
    (nothing to gain), ``raced`` (another compactor swapped first: nothing done) or
    ``mismatch`` (rows read or written differ from the table's counts: nothing done)."""

    date: str
    status: DayStatus
    files_before: int
    files_after: int
    rows: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "status": self.status,
            "files_before": self.files_before,
            "files_after": self.files_after,
            "rows": self.rows,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class Garbage:
    """Files in ``date=`` folders that the table does not name: ``deleted`` (relative
    paths; older than the retention) and how many younger ones were kept."""

    deleted: tuple[str, ...] = ()
    deleted_bytes: int = 0
    kept: int = 0


@dataclass(frozen=True, slots=True)
class Compaction:
    """One run of ``compact``. ``ok`` is false when a day's rows did not add up (the run
    stopped there, without deleting anything)."""

    data_dir: str | Path
    version_before: int
    version_after: int
    days: tuple[DayCompaction, ...]
    garbage: Garbage | None
    retention: float
    target_rows: int

    @property
    def ok(self) -> bool:
        return all(d.status != "mismatch" for d in self.days)

    def to_json(self) -> dict[str, Any]:
        garbage = self.garbage
        return {
            "data_dir": str(self.data_dir),
            "ok": self.ok,
            "version_before": self.version_before,
            "version_after": self.version_after,
            "target_rows": self.target_rows,
            "retention_seconds": self.retention,
            "dates": [d.to_json() for d in self.days],
            "deleted": list(garbage.deleted) if garbage is not None else [],
            "deleted_bytes": garbage.deleted_bytes if garbage is not None else 0,
            "kept_unreferenced": garbage.kept if garbage is not None else 0,
        }


def writer_name() -> str:
    return f"compact-{socket.gethostname()}-{os.getpid()}"


async def compact(
    data_dir: str | Path,
    *,
    today: date,
    include_today: bool = False,
    target_rows: int = DEFAULT_TARGET_ROWS,
    retention: float = DEFAULT_RETENTION,
    settings: ParquetSettings | None = None,
    s3: S3Settings | None = None,
    clock: Callable[[], float] = time.time,
    on_step: Callable[[str], None] | None = None,
) -> Compaction:
    """Compact every closed day of the table at ``data_dir`` (a directory or
    ``s3://bucket/prefix``; before ``today``, or up to it with ``include_today``), then
    delete unreferenced files older than ``retention`` seconds (not when a day's rows did
    not add up). ``settings``: compression and row groups of the new files (its
    ``data_dir`` is replaced); ``s3``: how to reach an object store. Raises ``OSError``
    when the storage or the log refuses (a commit that could not be confirmed may exist:
    its new files are kept, and deleted by a later run if it does not). ``on_step`` is
    told what it does next."""
    if target_rows < 1:
        raise ValueError(f"target_rows must be at least 1, not {target_rows}")
    if retention < 0:
        raise ValueError(f"retention must not be negative, not {retention}")
    last = today.isoformat()
    async with open_landing_zone(data_dir, parquet=settings, s3=s3) as zone:
        table = LandingTable(zone.log, writer_name(), clock=clock)
        state = await table.refresh()
        before = state.version
        days: list[DayCompaction] = []
        for day, files in sorted(files_by_day(state).items()):
            if day > last or (day == last and not include_today):
                continue
            if on_step is not None:
                rows = sum(f.rows for f in files)
                on_step(f"date={day}: {len(files):,} file(s), {rows:,} rows")
            outcome = await compact_day(
                table, zone.sink, zone.files, day, files, target_rows=target_rows
            )
            days.append(outcome)
            if outcome.status == "mismatch":
                break
        garbage = None
        if all(d.status != "mismatch" for d in days):
            if on_step is not None:
                on_step(f"deleting files the table does not name, older than {retention:g} s")
            garbage = await collect_garbage(table, zone.files, retention=retention, now=clock())
        return Compaction(
            data_dir=data_dir,
            version_before=before,
            version_after=table.state.version,
            days=tuple(days),
            garbage=garbage,
            retention=retention,
            target_rows=target_rows,
        )


def files_by_day(state: TableState) -> dict[str, list[LandedFile]]:
    """The table's files per ``date=`` folder (files elsewhere are left out)."""
    days: dict[str, list[LandedFile]] = {}
    for path, landed in state.files.items():
        folder, _, name = path.partition("/")
        if folder.startswith("date=") and name and "/" not in name:
            days.setdefault(folder.removeprefix("date="), []).append(landed)
    for files in days.values():
        files.sort(key=lambda f: f.path)
    return days


async def compact_day(
    table: LandingTable,
    sink: ParquetSink | S3ParquetSink,
    files: ZoneFiles,
    day: str,
    landed: Sequence[LandedFile],
    *,
    target_rows: int = DEFAULT_TARGET_ROWS,
) -> DayCompaction:
    """Merge ``landed`` (the committed files of ``date={day}`` as ``table`` saw them, read
    through ``files``) into files ``sink`` writes, and swap the result in with one commit
    through ``table``. See the module docstring."""
    rows = sum(f.rows for f in landed)
    before = len(landed)

    def outcome(status: DayStatus, after: int, note: str = "") -> DayCompaction:
        return DayCompaction(day, status, before, after, rows, note)

    if before <= 1 or math.ceil(rows / target_rows) >= before:
        return outcome("skipped", before, "no smaller file count possible")
    bins = pack(landed, target_rows)
    merged = [b for b in bins if len(b) > 1]
    after = len(bins)
    if after >= before:
        return outcome("skipped", before, "no smaller file count possible")
    written: list[LandedFile] = []
    try:
        for group in merged:
            read, wrong = await _read_sorted(files, group)
            if read is None:
                await _discard(sink, written)
                return outcome("mismatch", before, "; ".join(wrong) + ": not committed")
            written.append(await sink.write_table(day, read, writer="compact"))
            del read
        counted = sum([await _footer_rows(files, f) for f in written])
        expected = sum(sum(f.rows for f in group) for group in merged)
        if counted != expected:
            await _discard(sink, written)
            return outcome(
                "mismatch", before, f"wrote {counted:,} rows for {expected:,}: not committed"
            )
        removed = [f.path for group in merged for f in group]
        # Stamp what the swap takes out: readers that listed it get ``retention`` from now.
        await files.stamp(removed)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _discard(sink, written)
        raise
    # Not discarded on an error from here: the commit may exist (a later run deletes the
    # files if it does not).
    if not await table.commit(added=written, removed=removed):
        await _discard(sink, written)
        return outcome("raced", before, "another compactor swapped these files first")
    return outcome("compacted", after)


async def collect_garbage(
    table: LandingTable, files: ZoneFiles, *, retention: float, now: float
) -> Garbage:
    """Delete the files in ``date=`` folders that the table (refreshed here) does not name
    and that were last modified more than ``retention`` seconds before ``now``."""
    state = await table.refresh()
    deletable, kept = unreferenced(state, await files.listing(), now - retention)
    await files.delete([f.path for f in deletable])
    return Garbage(
        deleted=tuple(f.path for f in deletable),
        deleted_bytes=sum(f.size for f in deletable),
        kept=kept,
    )


async def _read_sorted(
    files: ZoneFiles, group: Sequence[LandedFile]
) -> tuple[pa.Table | None, list[str]]:
    """The rows of ``group``, sorted; (None, what is wrong) when a file does not hold the
    rows the table says it does, or cannot be read as Parquet."""
    tables = []
    wrong = []
    for landed in group:
        try:
            data = await anyio.to_thread.run_sync(_decode, await files.read(landed.path))
        except FileNotFoundError:
            wrong.append(f"{landed.path} is missing")
            continue
        except pa.ArrowException as exc:
            wrong.append(f"{landed.path}: {exc}")
            continue
        if data.num_rows != landed.rows:
            wrong.append(
                f"{landed.path} holds {data.num_rows:,} rows, the table says {landed.rows:,}"
            )
        tables.append(data)
    if wrong:
        return None, wrong
    return await anyio.to_thread.run_sync(_concat_sorted, tables), []


async def _footer_rows(files: ZoneFiles, landed: LandedFile) -> int:
    data = await files.read(landed.path)
    return await anyio.to_thread.run_sync(lambda: pq.read_metadata(pa.BufferReader(data)).num_rows)


# -- in a worker thread ------------------------------------------------------------------


def _decode(data: bytes) -> pa.Table:
    read = pq.read_table(pa.BufferReader(data))
    return read.select(LANDED_SCHEMA.names).cast(LANDED_SCHEMA)


def _concat_sorted(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables).sort_by(SORT_KEYS).combine_chunks()


async def _discard(sink: ParquetSink | S3ParquetSink, files: Sequence[LandedFile]) -> None:
    if files:
        await sink.discard(files)
