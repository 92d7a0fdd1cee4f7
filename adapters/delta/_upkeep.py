"""``DeltaTableUpkeep``: the TableUpkeep port on a Delta Lake table (delta-rs)."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import anyio
import pyarrow as pa
from deltalake import DeltaTable

from adapters._lifecycle import Lifecycle
from adapters.delta._settings import TableSettings
from adapters.delta._table import PARTITION_COLUMN, in_thread, open_table
from core.ports import TableHealth
from core.table import DayFiles

__all__ = ["DeltaTableUpkeep"]

_ERROR_CHARS = 500  # of a failed compaction's stderr, its end


class DeltaTableUpkeep(Lifecycle):
    """Each call opens the newest version; none holds a snapshot between calls. Compaction
    runs in a child process (``adapters.delta._compaction``), so the memory it takes is
    given back when it ends."""

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        settings: TableSettings | None = None,
        *,
        log_size: Callable[[], tuple[int, int]],
    ) -> None:
        """``log_size``: how many files and bytes the table's ``_delta_log`` folder holds
        now (the storage's own listing)."""
        self.uri = uri
        self._log_size_of = log_size
        self._options = dict(storage_options) if storage_options else None
        self._settings = settings or TableSettings()

    async def health(self, small_file_bytes: int) -> TableHealth:
        def read() -> TableHealth:
            table = self._open()
            actions = pa.table(table.get_add_actions(flatten=True))
            sizes = actions.column("size_bytes").to_pylist()
            days = actions.column(f"partition.{PARTITION_COLUMN}").to_pylist()
            records = actions.column("num_records").to_pylist()
            files = Counter(days)
            small = Counter(
                d for d, size in zip(days, sizes, strict=True) if size < small_file_bytes
            )
            log_files, log_bytes = self._log_size()
            return TableHealth(
                version=table.version(),
                files=len(sizes),
                bytes=sum(sizes),
                rows=sum(r or 0 for r in records),
                log_files=log_files,
                log_bytes=log_bytes,
                days=tuple(DayFiles(d, files[d], small[d]) for d in sorted(files)),
            )

        return await in_thread(read)

    async def compact(self, days: Sequence[str], target_bytes: int) -> tuple[int, int]:
        if not days:
            return 0, 0
        request = {
            "uri": self.uri,
            "storage_options": self._options,  # on stdin: it holds the store's secret
            "days": list(days),
            "target_bytes": target_bytes,
        }
        with anyio.CancelScope(shield=True):  # a rewrite is one commit: let it finish
            done = await anyio.run_process(
                [sys.executable, "-m", "adapters.delta._compaction"],
                input=json.dumps(request).encode(),
                check=False,
            )
        if done.returncode != 0:
            error = " ".join(done.stderr.decode(errors="replace").split()) or "no output"
            raise OSError(f"compaction process exited {done.returncode}: {error[-_ERROR_CHARS:]}")
        counts = json.loads(done.stdout)
        return int(counts["removed"]), int(counts["added"])

    async def checkpoint(self) -> int:
        def checkpoint() -> int:
            table = self._open()
            table.create_checkpoint()
            before, _ = self._log_size()
            table.cleanup_metadata()
            after, _ = self._log_size()
            return max(0, before - after)

        return await in_thread(checkpoint)

    async def vacuum(self, retention_hours: float, *, dry_run: bool = False) -> list[str]:
        def vacuum() -> list[str]:
            return self._open().vacuum(
                retention_hours=math.ceil(retention_hours),  # never shorter than asked
                dry_run=dry_run,
                enforce_retention_duration=False,
                full=True,
            )

        return await in_thread(vacuum)

    def _open(self) -> DeltaTable:
        return open_table(self.uri, self._options, self._settings)

    def _log_size(self) -> tuple[int, int]:
        return self._log_size_of()
