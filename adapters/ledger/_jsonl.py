"""``JsonlLedger``: one line per answered request, appended and flushed before the answer,
fsynced every ``sync_interval`` seconds and on exit."""

from __future__ import annotations

import json
import os
from io import FileIO
from pathlib import Path

import anyio

from adapters._lifecycle import Lifecycle
from core.messages import LedgerEntry

__all__ = ["JsonlLedger", "ledger_line"]


def ledger_line(entry: LedgerEntry) -> str:
    return json.dumps(
        {
            "v": 1,
            "gateway_id": entry.gateway_id,
            "project_id": entry.project_id,
            "first_sequence": entry.first_sequence,
            "last_sequence": entry.last_sequence,
            "outcome": str(entry.outcome),
            "received_at": entry.received_at,
            "decided_at": entry.decided_at,
        },
        separators=(",", ":"),
    )


class JsonlLedger(Lifecycle):
    """``async with JsonlLedger(directory, gateway_id) as ledger: await ledger.record(e)``.

    A crash can cut the last line short; readers skip such a line. Appending to an existing
    file is safe: each gateway process has its own id, so its own file. A write the disk
    refuses (full) raises ``OSError`` and leaves at most a part of its line, which the next
    write ends first: an entry written again after a failure stands on a line of its own.
    """

    def __init__(self, directory: Path, gateway_id: str, sync_interval: float = 1.0) -> None:
        self.path = directory / f"{gateway_id}.jsonl"
        self._sync_interval = sync_interval
        self._file: FileIO | None = None
        self._dirty = False
        self._torn = False  # the file may end mid-line

    async def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._torn = self._ends_mid_line()  # a crash cut the last line short
        self._file = FileIO(self.path, "a")  # unbuffered: a refused write keeps nothing back
        self._tasks.start_soon(self._sync_periodically)

    async def _disconnect(self) -> None:
        if self._file is not None:
            self._sync()
            self._file.close()
            self._file = None

    def _ends_mid_line(self) -> bool:
        try:
            with self.path.open("rb") as existing:
                existing.seek(0, os.SEEK_END)
                if existing.tell() == 0:
                    return False
                existing.seek(-1, os.SEEK_END)
                return existing.read(1) != b"\n"
        except FileNotFoundError:
            return False

    async def record(self, entry: LedgerEntry) -> None:
        if self._file is None:
            raise OSError("ledger is not open")
        line = ("\n" if self._torn else "") + ledger_line(entry) + "\n"
        rest = memoryview(line.encode())
        # A few hundred bytes to the page cache: cheaper than a thread hop.
        self._torn = True
        while rest:
            rest = rest[self._file.write(rest) or 0 :]
            self._dirty = True
        self._torn = False

    def _sync(self) -> None:
        if self._file is not None and self._dirty:
            self._dirty = False
            os.fsync(self._file.fileno())

    async def _sync_periodically(self) -> None:
        while True:
            await anyio.sleep(self._sync_interval)
            if self._dirty:
                await anyio.to_thread.run_sync(self._sync)
