"""``RouteFile``: the route table in a JSON file, polled for changes (see the package doc)."""

from __future__ import annotations

import fcntl
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Self

import anyio

from adapters._files import replace_file
from adapters._route_codec import decode_table, encode_table
from core.errors import RouteConflictError, RouteError
from core.routing import RouteTable

__all__ = ["RouteFile"]

log = logging.getLogger("shoal.routes")


class RouteFile:
    """The table in ``path`` (None while there is no file). Every read checks the file's
    identity (inode, size, mtime: one ``stat``) and decodes it again only when it changed,
    so a gateway can ask on every request. ``put`` holds an exclusive lock on
    ``{path}.lock``, checks the version and replaces the file atomically (temporary file,
    fsync, rename): two writers cannot both follow one version, and a reader never sees
    half a file. ``watch`` polls every ``poll_interval`` seconds.
    """

    def __init__(self, path: Path, *, poll_interval: float = 0.2) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self._table: RouteTable | None = None
        self._identity: tuple[int, int, int] | None = None
        self._read_once = False
        self._complaint = ""  # the last error logged: said once, not on every poll

    async def __aenter__(self) -> Self:
        await self.current()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def current(self) -> RouteTable | None:
        try:
            self._reload()
        except (OSError, RouteError) as exc:
            if not self._read_once:
                raise
            if str(exc) != self._complaint:
                self._complaint = str(exc)
                log.error("keeping the last good route table: %s", exc)
        else:
            self._complaint = ""
        return self._table

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if self._table is not None:
                raise  # a table was in force: a vanished file is a mistake, not a reset
            self._identity, self._read_once = None, True
            return
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if identity != self._identity or not self._read_once:
            table = decode_table(self.path.read_bytes(), str(self.path))
            if self._table is not None and table.version < self._table.version:
                raise RouteError(
                    f"{self.path}: version {table.version} is older than the "
                    f"{self._table.version} already read"
                )
            self._table, self._identity, self._read_once = table, identity, True

    async def put(self, table: RouteTable) -> None:
        await anyio.to_thread.run_sync(self._put, table)

    def _put(self, table: RouteTable) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stored = (
                decode_table(self.path.read_bytes(), str(self.path)).version
                if self.path.exists()
                else 0
            )
            if table.version != stored + 1:
                raise RouteConflictError(
                    f"{self.path}: route table version {table.version} does not follow "
                    f"the stored {stored}"
                )
            replace_file(self.path, encode_table(table), 0o644)
        self._reload()

    async def watch(self) -> AsyncIterator[RouteTable | None]:
        last = await self.current()
        yield last
        while True:
            await anyio.sleep(self.poll_interval)
            table = await self.current()
            if table is not None and (last is None or table.version > last.version):
                last = table
                yield table
