"""``DeltaTableUpkeep``: the TableUpkeep port on a Delta Lake table (delta-rs), every call
in a child process (``adapters.delta._maintenance``)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from core.errors import CommitConflictError
from core.ports import TableHealth
from core.table import DayFiles

__all__ = ["DeltaTableUpkeep"]

log = logging.getLogger("shoal.table")

_ERROR_CHARS = 500  # of a failed call's stderr, its start
_REFUSED = "RefusedError: "  # a request the child refused: nothing changed


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

    async def health(self, small_file_bytes: int, check_days: Sequence[str] = ()) -> TableHealth:
        found = await self._call(
            "health", small_file_bytes=small_file_bytes, check_days=list(check_days)
        )
        return TableHealth(
            version=int(found["version"]),
            files=int(found["files"]),
            bytes=int(found["bytes"]),
            rows=int(found["rows"]),
            log_files=int(found["log_files"]),
            log_bytes=int(found["log_bytes"]),
            days=tuple(DayFiles(str(d), int(n), int(s)) for d, n, s in found["days"]),
            missing=tuple(str(p) for p in found["missing"]),
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
        if "warning" in counts:
            log.warning("compaction %s", counts["warning"], extra={"table": self.uri})
        return int(counts["removed"]), int(counts["added"])

    async def missing(self) -> tuple[int, list[str]]:
        found = await self._call("missing")
        return int(found["version"]), [str(p) for p in found["missing"]]

    async def repair(self, version: int) -> tuple[list[str], list[str]]:
        with anyio.CancelScope(shield=True):  # one commit: let it finish
            done = await self._call("repair", version=version)
        return [str(p) for p in done["restored"]], [str(p) for p in done["dropped"]]

    async def checkpoint(self) -> int:
        return int((await self._call("checkpoint"))["removed"])

    async def vacuum(
        self, retention_hours: float, *, dry_run: bool = False, enforce: bool = True
    ) -> list[str]:
        found = await self._call(
            "vacuum", retention_hours=retention_hours, dry_run=dry_run, enforce=enforce
        )
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
            if error.startswith(_REFUSED):
                raise ValueError(f"Delta table: {op} refused: {error.removeprefix(_REFUSED)}")
            raise OSError(
                f"Delta table: {op} failed (exit {done.returncode}): {error[:_ERROR_CHARS]}"
            )
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer
