"""Files made durable the way a power cut needs them: the file's data, then the folder
that names it (PostgreSQL's discipline; a rename or a new name is lost with the page cache
until its folder is synced). Used by the Parquet sink, the Delta log's local sync and the
small files that several processes read and one at a time rewrites (the API keys file, the
route table), which are written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "fsync_file", "make_dirs", "replace_file"]


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data (written through any descriptor) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries: the names created, renamed or removed in it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(folder: Path) -> None:
    """Create ``folder`` and missing parents, syncing each parent that got an entry."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for created in reversed(missing):
        created.mkdir(exist_ok=True)
        fsync_dir(created.parent)


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a temporary file beside ``path`` (created with ``mode``), fsync it,
    rename it over ``path`` and sync the folder: a reader sees the old file or the new one,
    never a part, and after a crash the new one is there once this returned."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)
    fsync_dir(path.parent)
