"""The landing table's upkeep in a child process: ``python -m adapters.delta._maintenance``
reads one request as JSON on stdin (``op``, ``uri``, ``storage_options`` and the op's own
arguments), does it with delta-rs and prints its answer as JSON; a failure exits 1 with the
error on stderr. The ops: ``exists``, ``health``, ``compact``, ``checkpoint``, ``vacuum``.

A request with ``hold`` (seconds) runs only while it is held: it may go on ``hold``
seconds from its arrival, each line the parent writes to stdin after it (a number of
seconds) extends that from the line's arrival, and once the time is up the process ends at
once (exit 3), before any commit it had not made yet. A leader holds its compaction with
what is left of its lease: paused or cut off past its lease, its compaction ends before a
successor can be elected, so the two never commit over each other (delta-rs does not
refuse two compactions that remove the same files, and both would add their rows again).

Why a process: the leader keeps the table up but writes none of it, and delta-rs with
pyarrow is 70 MB of imports before the first call; a compaction holds a target file's rows
while it writes one (140 MB above a fresh process for a file of 300,000 rows). A process
returns what it took only when it ends: in its own, the upkeep leaves the leader's memory
where it was, and one that runs out of memory takes nothing else down with it. It imports
nothing of shoal but the table's layout."""

from __future__ import annotations

import json
import math
import os
import re
import select
import sys
import threading
import time
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
_HOLD_ENDED = 3  # the exit status of an op whose hold ran out


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


def _first_line(fd: int) -> bytes:
    """The first line on ``fd``, without its newline: the request (a hold's renewals come
    after it; one read along with it is not needed, the hold starts on arrival)."""
    chunks = bytearray()
    while b"\n" not in chunks:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks).partition(b"\n")[0]


def _while_held(op: Callable[[], dict[str, Any]], fd: int, hold: float) -> dict[str, Any]:
    """``op()`` in a thread, for ``hold`` seconds and as long again as each renewal on
    ``fd`` says; the process ends (exit 3) once that time is up."""
    outcome: list[dict[str, Any]] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append(op())
        except BaseException as exc:  # handed to the main thread as it is
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    held_until = time.monotonic() + hold
    open_stdin = True
    while not done.is_set():
        now = time.monotonic()
        if now >= held_until:
            print("the hold ended before the op finished: stopped", file=sys.stderr, flush=True)
            os._exit(_HOLD_ENDED)  # now: a thread still inside delta-rs must not commit
        wait = min(held_until - now, 0.05)
        if open_stdin and select.select([fd], [], [], wait)[0]:
            renewals = os.read(fd, 4096).split()
            if renewals:
                held_until = time.monotonic() + float(renewals[-1])
            else:
                open_stdin = False  # the parent closed it: no more holds
        elif not open_stdin:
            done.wait(wait)
    if failure:
        raise failure[0]
    return outcome[0]


def main() -> int:
    fd = sys.stdin.fileno()
    request = json.loads(_first_line(fd))
    try:
        op = _OPS[request["op"]]
        if request.get("hold") is None:
            answer = op(request)
        else:
            answer = _while_held(lambda: op(request), fd, float(request["hold"]))
    except Exception as exc:  # any: the parent reports it, with its type
        # delta-rs appends a native stack trace when RUST_BACKTRACE is set: not news here
        message = _NATIVE_TRACE.split(str(exc), maxsplit=1)[0].strip()
        print(f"{type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
