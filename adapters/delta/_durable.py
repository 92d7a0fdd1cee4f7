"""The Delta log made durable on a local disk before anyone acts on a commit.

delta-rs writes every log entry (``_delta_log/N.json``: staged, then hard-linked into
place), checkpoint and ``_last_checkpoint`` through object_store's local store, which
never fsyncs (traced: ../shared/notes/durability.md). A commit that returned is then only
in the page cache: after a power cut the version can be missing while the broker already
dropped the messages it landed. So after every commit (and checkpoint) on a local disk,
``LogSync.sync`` fsyncs the log entries up to the newest, the checkpoints since the last
one ``_last_checkpoint`` names, ``_last_checkpoint`` itself, then the ``_delta_log`` folder
(and, once, the table's folder and its parent, which name the log and the table).

Every entry from the last one synced, not only the caller's own: another writer's commit
below it that is not yet synced would otherwise be lost in a crash and leave a gap, and a
table whose versions have a gap does not open. The first sync of a process starts at the
checkpoint ``_last_checkpoint`` names (a fresh reader needs nothing older), so one sync
costs an fsync per commit since the caller's last one, and a stat per version since the
last checkpoint: bounded by the checkpoint interval, not by the table's history.

On an object store a PUT that returned is durable: there is nothing to sync there.
"""

from __future__ import annotations

import json
from pathlib import Path

from adapters._files import fsync_dir, fsync_file
from adapters.delta._layout import LOG_FOLDER

__all__ = ["LogSync"]

_LAST_CHECKPOINT = "_last_checkpoint"


def _entry(version: int) -> str:
    return f"{version:020d}.json"


def _checkpoint(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


class LogSync:
    """The log of the table at ``root`` (a local folder), synced up to ``through``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / LOG_FOLDER
        self.through: int | None = None  # the newest version synced by this process

    def sync(self) -> int:
        """Fsync the log as the module's docstring says; the newest version synced (-1 for
        a log without entries). Blocking: call it in a worker thread. ``OSError`` when the
        disk refuses."""
        last_checkpoint = self._last_checkpoint()
        first = self.through + 1 if self.through is not None else max(last_checkpoint, 0)
        if self.through is None and not (self.log / _entry(first)).exists():
            first = self._oldest_entry()  # no (readable) _last_checkpoint and a cleaned log
        version = first
        while _synced(self.log / _entry(version)):
            version += 1
        newest = version - 1
        for at in range(max(last_checkpoint, 0), newest + 1):
            _synced(self.log / _checkpoint(at))
        _synced(self.log / _LAST_CHECKPOINT)
        fsync_dir(self.log)
        if self.through is None:  # the folders that name the log and the table
            fsync_dir(self.root)
            fsync_dir(self.root.parent)
        self.through = max(newest, self.through if self.through is not None else -1)
        return self.through

    def _oldest_entry(self) -> int:
        """The oldest version the log holds (a listing: once, at a process's first sync)."""
        versions = [
            int(name.removesuffix(".json"))
            for name in (entry.name for entry in self.log.iterdir())
            if name.endswith(".json") and name.removesuffix(".json").isdigit()
        ]
        return min(versions, default=0)

    def _last_checkpoint(self) -> int:
        """The version ``_last_checkpoint`` names; -1 when there is none or it cannot be
        read (a reader then lists the log: so does this sync, from the start)."""
        try:
            return int(json.loads((self.log / _LAST_CHECKPOINT).read_bytes())["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1


def _synced(path: Path) -> bool:
    """Fsync ``path`` if it is there; whether it was."""
    try:
        fsync_file(path)
    except FileNotFoundError:
        return False
    return True
