"""``LocalZoneFiles``: the ZoneFiles port on a local (or mounted) file system."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread

from adapters._lifecycle import Lifecycle
from core.table import StoredFile, in_date_folder

__all__ = ["LocalZoneFiles"]


class LocalZoneFiles(Lifecycle):
    def __init__(self, root: Path) -> None:
        self.root = root

    async def listing(self) -> Sequence[StoredFile]:
        return await anyio.to_thread.run_sync(self._listing)

    async def read(self, path: str) -> bytes:
        return await anyio.to_thread.run_sync((self.root / path).read_bytes)

    async def stamp(self, paths: Sequence[str]) -> None:
        await anyio.to_thread.run_sync(self._stamp, list(paths))

    async def delete(self, paths: Sequence[str]) -> None:
        await anyio.to_thread.run_sync(self._delete, list(paths))

    # -- in a worker thread --------------------------------------------------------------

    def _listing(self) -> list[StoredFile]:
        found = []
        for entry in self.root.glob("date=*/*"):
            path = entry.relative_to(self.root).as_posix()
            if not in_date_folder(path):
                continue
            try:
                info = entry.stat()
            except FileNotFoundError:  # deleted meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(StoredFile(path, info.st_size, info.st_mtime))
        return found

    def _stamp(self, paths: list[str]) -> None:
        for path in paths:
            os.utime(self.root / path)

    def _delete(self, paths: list[str]) -> None:
        for path in paths:
            (self.root / path).unlink(missing_ok=True)
