"""The landing table's upkeep in a child process: ``python -m adapters.delta._maintenance``
reads one request as JSON on stdin (``op``, ``uri``, ``storage_options`` and the op's own
arguments), does it with delta-rs and prints its answer as JSON; a failure exits 1 with the
error on stderr. The ops: ``exists``, ``health``, ``compact``, ``checkpoint``, ``vacuum``.

Why a process: the leader keeps the table up but writes none of it, and delta-rs with
pyarrow is 70 MB of imports before the first call; a compaction holds a target file's rows
while it writes one (140 MB above a fresh process for a file of 300,000 rows). A process
returns what it took only when it ends: in its own, the upkeep leaves the leader's memory
where it was, and one that runs out of memory takes nothing else down with it. It imports
of shoal only the table's layout and file format, and the pure rules of ``core.table``.

A compaction is shoal's own, not delta-rs's ``optimize.compact``: of two compactions that
read one snapshot (a paused leader resumed beside its successor) delta-rs commits both,
since neither's removes change data, and every row they rewrote would be there twice.
This one reads the day's small files, writes each group as one file (sorted like a
handler's) and commits the removes and adds (none of them a data change) with the app
transaction ``core.table.COMPACTION_APP_ID`` one above the version it read: the table
refuses the second of two such commits, whose files are then deleted again, and says
``refused``. A writer's append between the read and the commit conflicts with nothing."""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from adapters._parquet_format import FILE_ORDER, ParquetSettings, delta_stats, write_parquet
from adapters.delta._layout import COMMIT_ATTEMPTS, CONFLICT, LOG_FOLDER, PARTITION_COLUMN
from core.table import COMPACTION_APP_ID, compaction_groups

__all__ = ["main"]

_NATIVE_TRACE = re.compile(r"\n\s*0: ")
_LISTING_TRIES = 3  # a log file can go (a staging file renamed) between a listing and its stat


def _open(request: Mapping[str, Any]) -> DeltaTable:
    return DeltaTable(request["uri"], storage_options=request["storage_options"])


def _store(request: Mapping[str, Any]) -> pafs.FileSystem:
    """The table's folder through the same object store (and options) as the table's."""
    return pafs.PyFileSystem(DeltaStorageHandler(request["uri"], request["storage_options"]))


def _log_size(request: Mapping[str, Any]) -> tuple[int, int]:
    """Files and bytes in the table's log folder: the store's own listing, through the same
    object store (and options) as the table's."""
    store = _store(request)
    selector = pafs.FileSelector(LOG_FOLDER, allow_not_found=True)
    tries = 1
    while True:
        try:
            listing = store.get_file_info(selector)
        except FileNotFoundError:
            if tries == _LISTING_TRIES:
                raise
            tries += 1
        else:
            files = [f for f in listing if f.type == pafs.FileType.File]
            return len(files), sum(f.size or 0 for f in files)


def _exists(request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        _open(request)
    except TableNotFoundError:
        return {"exists": False}
    return {"exists": True}


def _health(request: Mapping[str, Any]) -> dict[str, Any]:
    table = _open(request)
    actions = pa.table(table.get_add_actions(flatten=True))
    sizes = actions.column("size_bytes").to_pylist()
    days = actions.column(f"partition.{PARTITION_COLUMN}").to_pylist()
    records = actions.column("num_records").to_pylist()
    small_bytes = int(request["small_file_bytes"])
    files = Counter(days)
    small = Counter(d for d, size in zip(days, sizes, strict=True) if size < small_bytes)
    log_files, log_bytes = _log_size(request)
    return {
        "version": table.version(),
        "files": len(sizes),
        "bytes": sum(sizes),
        "rows": sum(r or 0 for r in records),
        "log_files": log_files,
        "log_bytes": log_bytes,
        "days": [[d, files[d], small[d]] for d in sorted(files)],
    }


def _compact(request: Mapping[str, Any]) -> dict[str, Any]:
    return compact(_open(request), _store(request), request["days"], int(request["target_bytes"]))


def compact(
    table: DeltaTable, store: pafs.FileSystem, days: list[str], target_bytes: int
) -> dict[str, Any]:
    """Merge the small files of ``days`` in ``table`` (a snapshot) into files of about
    ``target_bytes``, in one fenced commit (see the module's docstring): the files
    removed and added, and ``refused`` when another compaction committed first."""
    files = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    by_day: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for file in files:
        day = file[f"partition.{PARTITION_COLUMN}"]
        if day in days:
            by_day[day].append((file["path"], int(file["size_bytes"])))
    sizes = {path: size for day_files in by_day.values() for path, size in day_files}
    settings = ParquetSettings()
    now = round(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    written: list[str] = []
    removed = 0
    try:
        for day in sorted(by_day):
            values: dict[str, str | None] = {PARTITION_COLUMN: day}
            for group in compaction_groups(by_day[day], target_bytes):
                rows = pa.concat_tables(_read(store, path) for path in group).sort_by(FILE_ORDER)
                path = f"{PARTITION_COLUMN}={day}/compacted-{uuid.uuid4().hex}.parquet"
                with store.open_output_stream(path) as out:
                    write_parquet(rows, out, settings)
                written.append(path)
                size = store.get_file_info(path).size or 0
                actions.append(AddAction(path, size, values, now, False, delta_stats(rows)))
                actions += [RemoveAction(p, False, now, sizes[p], values) for p in group]
                removed += len(group)
                del rows  # one group's rows in memory at a time
        if not actions:
            return {"removed": 0, "added": 0, "refused": False}
        read = table.transaction_version(COMPACTION_APP_ID) or 0
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=[PARTITION_COLUMN],
            commit_properties=CommitProperties(
                app_transactions=[Transaction(COMPACTION_APP_ID, read + 1)],
                custom_metadata={"shoal.operation": "compaction"},
                max_commit_retries=COMMIT_ATTEMPTS,
            ),
        )
    except CommitFailedError as exc:
        _delete(store, written)
        if CONFLICT not in str(exc):
            raise
        return {"removed": 0, "added": 0, "refused": True}
    except BaseException:
        _delete(store, written)
        raise
    return {"removed": removed, "added": len(written), "refused": False}


def _read(store: pafs.FileSystem, path: str) -> pa.Table:
    with store.open_input_file(path) as stream:
        return pq.read_table(stream)


def _delete(store: pafs.FileSystem, paths: list[str]) -> None:
    """Best effort: what is left is named by no version, and the vacuum removes it."""
    for path in paths:
        with contextlib.suppress(OSError):
            store.delete_file(path)


def _checkpoint(request: Mapping[str, Any]) -> dict[str, Any]:
    table = _open(request)
    table.create_checkpoint()
    before, _ = _log_size(request)
    table.cleanup_metadata()
    after, _ = _log_size(request)
    return {"removed": max(0, before - after)}


def _vacuum(request: Mapping[str, Any]) -> dict[str, Any]:
    files = _open(request).vacuum(
        retention_hours=math.ceil(float(request["retention_hours"])),  # never shorter than asked
        dry_run=bool(request["dry_run"]),
        enforce_retention_duration=False,
        full=True,
    )
    return {"files": files}


_OPS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "exists": _exists,
    "health": _health,
    "compact": _compact,
    "checkpoint": _checkpoint,
    "vacuum": _vacuum,
}


def main() -> int:
    request = json.load(sys.stdin)
    try:
        answer = _OPS[request["op"]](request)
    except Exception as exc:  # any: the parent reports it, with its type
        # delta-rs appends a native stack trace when RUST_BACKTRACE is set: not news here
        message = _NATIVE_TRACE.split(str(exc), maxsplit=1)[0].strip()
        print(f"{type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
