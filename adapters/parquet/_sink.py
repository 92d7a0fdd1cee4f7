"""``ParquetSink``: the Sink port on local Parquet files (layout and schema: ``_schema``)."""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio.from_thread
import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters._stateless import Stateless
from adapters.parquet._schema import LANDED_SCHEMA
from core.errors import OwnershipLostError
from core.messages import LandedRow
from core.table import LandedFile

__all__ = [
    "ParquetSettings",
    "ParquetSink",
    "layout",
    "sorted_table",
    "table_file_path",
    "to_table",
    "write_parquet",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class ParquetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_PARQUET_", extra="ignore")

    data_dir: Path = Path("var/data")
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    row_group_rows: int = Field(default=128 * 1024, ge=1)


class ParquetSink(Stateless):
    """Writes each batch as one file per UTC date (usually one): many partitions, sorted by
    partition, project and sequence. Returns once the file is renamed into place and synced
    (it is part of the table only once a commit names it: ``LocalLandingLog``).

    ``write`` runs the blocking work in a worker thread. The file is written and fsynced
    under a hidden name, then ``still_valid`` is asked, then it is renamed and the
    directory fsynced: a writer that lost its lease while writing makes nothing visible.
    A cancelled ``write`` returns at once; its thread sees the cancellation at the same
    check and removes its hidden file instead of renaming it. Raises ``OSError`` when the
    disk refuses; no file (not even a hidden one) is left. A process killed mid-write may
    leave a ``.*.tmp`` file, which readers skip and nothing removes yet.
    """

    def __init__(self, settings: ParquetSettings | None = None) -> None:
        self.settings = settings or ParquetSettings()

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        if not rows:
            return ()
        abandoned = threading.Event()

        def valid() -> bool:  # in the worker thread; ``still_valid`` runs on the event loop
            if abandoned.is_set():
                return False
            return still_valid is None or anyio.from_thread.run_sync(still_valid)

        try:
            written = await anyio.to_thread.run_sync(
                self._write_sync, list(rows), valid, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            abandoned.set()
            raise
        root = self.settings.data_dir
        return tuple(LandedFile(path.relative_to(root).as_posix(), n) for path, n in written)

    async def discard(self, files: Sequence[LandedFile]) -> None:
        await anyio.to_thread.run_sync(self._discard_sync, list(files))

    def _discard_sync(self, files: list[LandedFile]) -> None:
        root = self.settings.data_dir
        for landed in files:
            (root / landed.path).unlink(missing_ok=True)
        for folder in {(root / landed.path).parent for landed in files}:
            if folder.is_dir():
                self._fsync_dir(folder)

    def _write_sync(
        self, rows: list[LandedRow], valid: Callable[[], bool]
    ) -> list[tuple[Path, int]]:
        staged: list[tuple[Path, Path, int]] = []
        try:
            for relative, group in layout(rows):
                final = self.settings.data_dir / relative
                self._make_dirs(final.parent)
                stem = final.name.removesuffix(".parquet")
                staged.append((self._stage(final.parent, stem, group), final, len(group)))
            if not valid():
                raise OwnershipLostError(
                    f"{len(rows)} rows not made visible: the writer no longer owns them"
                )
            for temp, final, _ in staged:
                temp.rename(final)
        except BaseException:
            for temp, final, _ in staged:
                temp.unlink(missing_ok=True)
                final.unlink(missing_ok=True)
            raise
        for folder in {final.parent for _, final, _ in staged}:
            self._fsync_dir(folder)
        return [(final, n) for _, final, n in staged]

    def _stage(self, folder: Path, stem: str, rows: list[LandedRow]) -> Path:
        """Write and fsync ``rows`` under a hidden name; the caller renames or removes it."""
        return self._stage_table(folder, stem, sorted_table(rows))

    def _stage_table(self, folder: Path, stem: str, table: pa.Table) -> Path:
        temp = folder / f".{stem}.tmp"  # never *.parquet; readers skip names starting "."
        try:
            with temp.open("wb") as f:
                write_parquet(table, f, self.settings)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return temp

    def _make_dirs(self, folder: Path) -> None:
        """Create ``folder`` and missing parents, fsyncing each parent that got an entry."""
        missing = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            self._fsync_dir(d.parent)

    @staticmethod
    def _fsync_dir(folder: Path) -> None:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- whole tables (compaction) --------------------------------------------------------

    async def write_table(self, day: str, table: pa.Table, *, writer: str) -> LandedFile:
        """Write ``table`` (``LANDED_SCHEMA``, rows in the order given) as one file
        ``date={day}/{writer}-{uuid}.parquet``, the way ``write`` lands a batch: staged
        under a hidden name and fsynced, renamed, the directory fsynced. Like ``write``'s,
        the file is part of the table only once a commit names it (``discard`` removes it
        otherwise). ``shoal analytics compact`` merges small files this way. Raises
        ``ValueError`` for another schema or a ``day`` that is not YYYY-MM-DD, ``OSError``
        when the disk refuses (no file is left then)."""
        relative = table_file_path(day, table, writer=writer)
        final = self.settings.data_dir / relative
        path = await anyio.to_thread.run_sync(self._write_table_sync, final, table)
        return LandedFile(path.relative_to(self.settings.data_dir).as_posix(), table.num_rows)

    def _write_table_sync(self, final: Path, table: pa.Table) -> Path:
        folder = final.parent
        self._make_dirs(folder)
        temp = self._stage_table(folder, final.name.removesuffix(".parquet"), table)
        try:
            temp.rename(final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self._fsync_dir(folder)
        return final


def table_file_path(day: str, table: pa.Table, *, writer: str) -> str:
    """Where a sink's ``write_table`` puts ``table``: ``date={day}/{writer}-{uuid}.parquet``
    relative to the zone's root. ``ValueError`` for a schema other than ``LANDED_SCHEMA``
    or a ``day`` that is not YYYY-MM-DD."""
    if not table.schema.remove_metadata().equals(LANDED_SCHEMA):
        raise ValueError(f"not the landed schema: {table.schema}")
    folder = f"date={datetime.strptime(day, '%Y-%m-%d'):%Y-%m-%d}"
    return f"{folder}/{_UNSAFE.sub('_', writer) or 'writer'}-{uuid.uuid4().hex}.parquet"


def _day(received_at: float) -> str:
    return datetime.fromtimestamp(received_at, UTC).date().isoformat()


def layout(rows: Sequence[LandedRow]) -> list[tuple[str, list[LandedRow]]]:
    """The files a batch lands as, by UTC date of ``received_at``: ``(path, rows)`` with
    ``path`` = ``date=YYYY-MM-DD/{handler}-{uuid}.parquet`` relative to the zone's root
    (every sink writes this layout)."""
    by_day: dict[str, list[LandedRow]] = defaultdict(list)
    for row in rows:
        by_day[_day(row.envelope.received_at)].append(row)
    handler = _UNSAFE.sub("_", rows[0].handler_id) or "handler" if rows else "handler"
    return [
        (f"date={day}/{handler}-{uuid.uuid4().hex}.parquet", group)
        for day, group in sorted(by_day.items())
    ]


def sorted_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as one file holds them: sorted by partition, project and sequence."""
    return to_table(rows).sort_by(
        [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]
    )


def write_parquet(table: pa.Table, where: Any, settings: ParquetSettings) -> None:
    """Write ``table`` to ``where`` (a file object or a pyarrow stream) as configured."""
    compression = settings.compression
    pq.write_table(
        table,
        where,
        compression=None if compression == "none" else compression,
        row_group_size=settings.row_group_rows,
    )


def to_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as a table of ``LANDED_SCHEMA``."""
    envs = [r.envelope for r in rows]
    columns = [
        [e.message_id for e in envs],
        [e.project_id for e in envs],
        [e.partition for e in envs],
        [r.generation for r in rows],
        [r.handler_id for r in rows],
        [e.gateway_id for e in envs],
        [e.sequence for e in envs],
        [_micros(e.received_at) for e in envs],
        [_micros(r.handled_at) for r in rows],
        [e.kind.value for e in envs],
        [e.payload for e in envs],
    ]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, LANDED_SCHEMA, strict=True)],
        schema=LANDED_SCHEMA,
    )


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)
