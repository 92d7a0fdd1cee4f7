"""``ParquetSink``: the Sink port on local Parquet files (schema, layout and encoding:
``adapters._parquet_format``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio.from_thread
import anyio.to_thread
import pyarrow as pa

from adapters._lifecycle import Lifecycle
from adapters._parquet_format import (
    ParquetSettings,
    layout,
    sorted_table,
    table_file_path,
    write_parquet,
)
from core.errors import OwnershipLostError
from core.messages import LandedRow
from core.table import LandedFile

__all__ = ["ParquetSink"]


class ParquetSink(Lifecycle):
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
