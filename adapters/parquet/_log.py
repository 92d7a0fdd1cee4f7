"""``LocalLandingLog``: the LandingLog port on a local (or mounted) file system.

Layout, under the landing zone's root::

    _shoal/log/00000000000000000042.json              commit 42
    _shoal/log/00000000000000000100.checkpoint.json   the state after commit 100

A commit is written and fsynced under a hidden temporary name, then linked to its final
name: ``link`` fails when the name exists, which makes the create exclusive (two writers
racing for one version: one wins, the other reads the log again). The directory is
fsynced before ``append`` returns. Checkpoints are replaced by ``rename`` (same content
for the same version, whoever writes it). Names starting with ``_`` keep Spark and pyarrow
out of the folder.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread
from pydantic import TypeAdapter

from adapters._lifecycle import Lifecycle
from core.table import Commit, TableState

__all__ = ["LOG_DIR", "LocalLandingLog"]

LOG_DIR = "_shoal/log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.json$")
_COMMIT_CODEC: TypeAdapter[Commit] = TypeAdapter(Commit)
_STATE_CODEC: TypeAdapter[TableState] = TypeAdapter(TableState)


class LocalLandingLog(Lifecycle):
    def __init__(self, root: Path) -> None:
        self.folder = root / LOG_DIR

    async def commits(self, after: int) -> Sequence[Commit]:
        return await anyio.to_thread.run_sync(self._commits, after)

    async def append(self, commit: Commit) -> bool:
        return await anyio.to_thread.run_sync(self._append, commit)

    async def checkpoint(self) -> TableState | None:
        return await anyio.to_thread.run_sync(self._checkpoint)

    async def save_checkpoint(self, state: TableState) -> None:
        await anyio.to_thread.run_sync(self._save_checkpoint, state)

    # -- in a worker thread --------------------------------------------------------------

    def _versions(self, pattern: re.Pattern[str]) -> list[int]:
        try:
            names = [entry.name for entry in self.folder.iterdir()]
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := pattern.match(n)))

    def _commits(self, after: int) -> list[Commit]:
        found: list[Commit] = []
        expected = after + 1
        for version in self._versions(_COMMIT):
            if version < expected:
                continue
            if version > expected:
                break
            try:
                data = (self.folder / f"{version:020d}.json").read_bytes()
            except FileNotFoundError:  # removed after a checkpoint meanwhile
                break
            found.append(_COMMIT_CODEC.validate_json(data))
            expected += 1
        return found

    def _append(self, commit: Commit) -> bool:
        self._make_folder()
        final = self.folder / f"{commit.version:020d}.json"
        temp = self._write_temp(_COMMIT_CODEC.dump_json(commit))
        try:
            os.link(temp, final)
        except FileExistsError:
            return False
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(self.folder)
        return True

    def _checkpoint(self) -> TableState | None:
        for version in reversed(self._versions(_CHECKPOINT)):
            try:
                data = (self.folder / f"{version:020d}.checkpoint.json").read_bytes()
            except FileNotFoundError:
                continue
            return _STATE_CODEC.validate_json(data)
        return None

    def _save_checkpoint(self, state: TableState) -> None:
        self._make_folder()
        temp = self._write_temp(_STATE_CODEC.dump_json(state))
        try:
            temp.rename(self.folder / f"{state.version:020d}.checkpoint.json")
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.folder)

    def _write_temp(self, data: bytes) -> Path:
        temp = self.folder / f".{uuid.uuid4().hex}.tmp"
        try:
            with temp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return temp

    def _make_folder(self) -> None:
        if self.folder.is_dir():
            return
        missing = []
        folder = self.folder
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            _fsync_dir(d.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
