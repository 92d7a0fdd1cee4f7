"""``DeltaTableUpkeep``: the TableUpkeep port on a Delta Lake table (delta-rs), every call
in a child process (``adapters.delta._maintenance``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from core.errors import CommitConflictError
from core.ports import TableHealth
from core.table import DayFiles

__all__ = ["DeltaTableUpkeep"]

_ERROR_CHARS = 500  # of a failed call's stderr, its start


class DeltaTableUpkeep:
    """Each call runs ``python -m adapters.delta._maintenance`` on the newest version of
    the table at ``uri`` (none holds a snapshot between calls), so this process never
    imports delta-rs or pyarrow and gets back what a call took when it ends (see that
    module). A compaction is one commit: a cancelled caller waits for it to end; of two
    at once one commits, the other raises ``CommitConflictError``. A call that fails
    raises ``OSError`` with the child's error."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._options = dict(storage_options) if storage_options else None

    async def exists(self) -> bool:
        return bool((await self._call("exists"))["exists"])

    async def health(self, small_file_bytes: int) -> TableHealth:
        found = await self._call("health", small_file_bytes=small_file_bytes)
        return TableHealth(
            version=int(found["version"]),
            files=int(found["files"]),
            bytes=int(found["bytes"]),
            rows=int(found["rows"]),
            log_files=int(found["log_files"]),
            log_bytes=int(found["log_bytes"]),
            days=tuple(DayFiles(str(d), int(n), int(s)) for d, n, s in found["days"]),
        )

    async def compact(self, days: Sequence[str], target_bytes: int) -> tuple[int, int]:
        if not days:
            return 0, 0
        with anyio.CancelScope(shield=True):  # a rewrite is one commit: let it finish
            counts = await self._call("compact", days=list(days), target_bytes=target_bytes)
        if counts["refused"]:
            raise CommitConflictError(
                f"Delta table: compaction of {', '.join(days)} refused: another compaction "
                "committed first; nothing changed"
            )
        return int(counts["removed"]), int(counts["added"])

    async def checkpoint(self) -> int:
        return int((await self._call("checkpoint"))["removed"])

    async def vacuum(self, retention_hours: float, *, dry_run: bool = False) -> list[str]:
        found = await self._call("vacuum", retention_hours=retention_hours, dry_run=dry_run)
        return [str(f) for f in found["files"]]

    async def _call(self, op: str, **arguments: Any) -> dict[str, Any]:
        request = {
            "op": op,
            "uri": self.uri,
            "storage_options": self._options,  # on stdin: it holds the store's secret
            **arguments,
        }
        done = await anyio.run_process(
            [sys.executable, "-m", "adapters.delta._maintenance"],
            input=json.dumps(request).encode(),
            check=False,
        )
        if done.returncode != 0:
            error = " ".join(done.stderr.decode(errors="replace").split()) or "no output"
            raise OSError(
                f"Delta table: {op} failed (exit {done.returncode}): {error[:_ERROR_CHARS]}"
            )
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer
