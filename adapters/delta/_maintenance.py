"""The landing table's upkeep in a child process: ``python -m adapters.delta._maintenance``
reads one request as JSON on stdin (``op``, ``uri``, ``storage_options`` and the op's own
arguments), does it with delta-rs and prints its answer as JSON; a failure exits 1 with the
error on stderr. The ops: ``exists``, ``health``, ``compact``, ``checkpoint``, ``vacuum``.

Why a process: the leader keeps the table up but writes none of it, and delta-rs with
pyarrow is 70 MB of imports before the first call; a compaction holds a target file's rows
while it writes one (140 MB above a fresh process for a file of 300,000 rows). A process
returns what it took only when it ends: in its own, the upkeep leaves the leader's memory
where it was, and one that runs out of memory takes nothing else down with it. It imports
nothing of shoal but the table's layout."""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from adapters.delta._layout import LOG_FOLDER, PARTITION_COLUMN

__all__ = ["main"]

_NATIVE_TRACE = re.compile(r"\n\s*0: ")
_LISTING_TRIES = 3  # a log file can go (a staging file renamed) between a listing and its stat


def _open(request: Mapping[str, Any]) -> DeltaTable:
    return DeltaTable(request["uri"], storage_options=request["storage_options"])


def _log_size(request: Mapping[str, Any]) -> tuple[int, int]:
    """Files and bytes in the table's log folder: the store's own listing, through the same
    object store (and options) as the table's."""
    store = pafs.PyFileSystem(DeltaStorageHandler(request["uri"], request["storage_options"]))
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
    metrics = _open(request).optimize.compact(
        partition_filters=[(PARTITION_COLUMN, "in", list(request["days"]))],
        target_size=int(request["target_bytes"]),
    )
    return {"removed": int(metrics["numFilesRemoved"]), "added": int(metrics["numFilesAdded"])}


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
