"""``ParquetSink``: the Sink port on a local (or mounted) file system (schema, layout and
encoding: ``adapters._parquet_format``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio.from_thread
import anyio.to_thread

from adapters._files import fsync_dir, make_dirs
from adapters._lifecycle import Lifecycle
from adapters._parquet_format import EncodedFile, ParquetSettings, encode_files
from core.errors import OwnershipLostError
from core.messages import LandedRow
from core.table import LandedFile

__all__ = ["ParquetSink"]

_DISCARD_BOUND = 10.0  # seconds a cancelled write may spend removing files handed over


class ParquetSink(Lifecycle):
    """Writes each batch as one file per UTC date (usually one) under ``data_dir``, the
    table's root: many partitions, sorted by partition, project and sequence. Returns once
    the files and their folders are fsynced; they are part of the table only once a
    ``LandedTable`` commit adds them.

    ``write`` encodes in a worker thread, then asks ``still_valid``, then writes, then asks
    again: a writer that lost its lease while encoding writes nothing, and one that lost it
    (or was cancelled) while writing removes what it wrote. A cancelled ``write`` returns at
    once; its thread sees the cancellation at the next check, and files stored just as it
    was cancelled are removed by the cancelled call (``_Handoff``). Raises ``OSError`` when the
    disk refuses; the files it began are removed. A process killed mid-write may leave a
    partial file that no version names (readers never see it; vacuum removes it).
    """

    def __init__(self, settings: ParquetSettings | None = None) -> None:
        self.settings = settings or ParquetSettings()

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        if not rows:
            return ()
        handoff = _Handoff()

        def valid() -> bool:  # in the worker thread; ``still_valid`` runs on the event loop
            if handoff.abandoned:
                return False
            return still_valid is None or anyio.from_thread.run_sync(still_valid)

        try:
            return await anyio.to_thread.run_sync(
                self._write_sync, list(rows), valid, handoff, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            orphans = handoff.abandon()
            if orphans:  # written and handed over just as the caller was cancelled
                with anyio.CancelScope(shield=True), anyio.move_on_after(_DISCARD_BOUND):
                    await self.discard(orphans)
            raise

    async def discard(self, files: Sequence[LandedFile]) -> None:
        await anyio.to_thread.run_sync(self._discard_sync, list(files))

    def _discard_sync(self, files: list[LandedFile]) -> None:
        root = self.settings.data_dir
        for landed in files:
            (root / landed.path).unlink(missing_ok=True)
        for folder in {(root / landed.path).parent for landed in files}:
            if folder.is_dir():
                fsync_dir(folder)

    def _write_sync(
        self, rows: list[LandedRow], valid: Callable[[], bool], handoff: _Handoff
    ) -> tuple[LandedFile, ...]:
        encoded = encode_files(rows, self.settings)
        if not valid():
            raise OwnershipLostError(
                f"{len(rows)} rows not written: the writer no longer owns them"
            )
        written: list[Path] = []
        try:
            for file in encoded:
                written.append(self._store(file))
            for folder in {path.parent for path in written}:
                fsync_dir(folder)
            # Asked again once stored: a write cancelled (or a lease lost) while the data
            # went to disk leaves no file behind that nobody would commit or delete.
            landed = tuple(file.landed for file in encoded)
            if not valid() or not handoff.hand_over(landed):
                raise OwnershipLostError(
                    f"{len(rows)} rows written and removed: the writer no longer owns them"
                )
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise
        return landed

    def _store(self, file: EncodedFile) -> Path:
        path = self.settings.data_dir / file.landed.path
        make_dirs(path.parent)
        try:
            with path.open("xb") as f:
                f.write(memoryview(file.data))
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path


class _Handoff:
    """Who owns a write's files once they are stored: the caller (handed over) or the
    worker thread (the caller was cancelled first, so the thread removes them). Decided
    under a lock, so that files are never left to nobody when the cancellation and the
    hand-over cross."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.abandoned = False
        self._handed: tuple[LandedFile, ...] = ()

    def hand_over(self, files: tuple[LandedFile, ...]) -> bool:
        """In the thread: give ``files`` to the caller, unless it was cancelled."""
        with self._lock:
            if not self.abandoned:
                self._handed = files
            return not self.abandoned

    def abandon(self) -> tuple[LandedFile, ...]:
        """On the caller's cancellation: the files already handed over (now nobody's but
        the caller's to remove), and the thread keeps none after this."""
        with self._lock:
            self.abandoned = True
            return self._handed
