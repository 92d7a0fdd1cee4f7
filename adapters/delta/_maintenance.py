"""The landing table's upkeep in a child process: ``python -m adapters.delta._maintenance``
reads one request as JSON on stdin (``op``, ``uri``, ``storage_options`` and the op's own
arguments), does it with delta-rs and prints its answer as JSON; a failure exits 1 with the
error on stderr. The ops: ``exists``, ``health``, ``compact``, ``checkpoint``, ``vacuum``,
``missing`` (active files storage does not hold) and ``repair`` (undo a rewrite).

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
handler's; on a local disk fsynced with its folder before the commit names it) and commits
the removes and adds (none of them a data change) with the app transaction
``core.table.COMPACTION_APP_ID`` one above the version it read: the table refuses the
second of two such commits, which then says ``refused``. A writer's append between the
read and the commit conflicts with nothing.

**It never deletes on uncertainty.** Its commit runs without post-commit hooks (the round
checkpoints and cleans the log right after, as a step of its own), so an error there
cannot follow a stored commit. Any error of the commit itself (a lost answer re-sent and
refused as "concurrent", a timeout, a storage error) may still follow a stored commit: the
table is read afresh and the commits since the version the compaction read are looked at
for its own mark (``shoal.compaction``, unique per compaction, beside the app
transaction). Its commit among them: it landed, and that is its answer. None of them its
own, all of them read: its files are named by no version and deleted. Anything less than
that (the table or a commit unreadable): the files stay for the vacuum, which deletes only
what no version names, and the error is raised."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
)

from adapters._files import fsync_dir, fsync_file
from adapters._parquet_format import FILE_ORDER, ParquetSettings, delta_stats, write_parquet
from adapters.delta._durable import LogSync
from adapters.delta._layout import (
    COMMIT_ATTEMPTS,
    CONFLICT,
    LOG_FOLDER,
    PARTITION_COLUMN,
    commit_entry,
    is_local,
)
from core.table import COMPACTION_APP_ID, LoggedFile, compaction_groups, plan_repair

__all__ = ["RefusedError", "TableFolder", "compact", "main"]

_NATIVE_TRACE = re.compile(r"\n\s*0: ")
_LISTING_TRIES = 3  # a log file can go (a staging file renamed) between a listing and its stat
_MARK = "shoal.compaction"  # in a compaction's commit info: unique to that compaction
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


class RefusedError(ValueError):
    """A request refused before anything changed (said to the parent by its name)."""


class TableFolder:
    """The table a request names: its snapshots, its folder through delta-rs's own object
    store (the same options as the table's), and on a local disk its log's sync."""

    def __init__(self, uri: str, options: Mapping[str, str] | None) -> None:
        self.uri = uri
        self.options = dict(options) if options else None
        self.root = Path(self.uri) if is_local(self.uri) else None

    @functools.cached_property
    def store(self) -> pafs.FileSystem:
        """Made on first use: on a local disk it needs the folder to be there."""
        return pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.options))

    def open(self) -> DeltaTable:
        return DeltaTable(self.uri, storage_options=self.options)

    def make_durable(self, paths: Iterable[str]) -> None:
        """On a local disk, fsync the files at ``paths`` (relative) and their folders: a
        commit must not name a file a power cut can take."""
        if self.root is None:
            return
        folders = set()
        for path in paths:
            fsync_file(self.root / path)
            folders.add((self.root / path).parent)
        for folder in folders:
            fsync_dir(folder)

    def sync_log(self) -> None:
        if self.root is not None:
            LogSync(self.root).sync()

    def listing(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        tries = 1
        while True:
            try:
                return [
                    f for f in self.store.get_file_info(selector) if f.type == pafs.FileType.File
                ]
            except FileNotFoundError:
                if tries == _LISTING_TRIES:
                    raise
                tries += 1

    def stored(self, folders: Iterable[str] = ("",)) -> set[str]:
        """The data files storage holds under ``folders`` (relative; "" for the whole
        table, but for its log and the top-level ``_``/``.`` folders)."""
        found: set[str] = set()
        for folder in folders:
            for info in self.listing(
                pafs.FileSelector(folder, allow_not_found=True, recursive=True)
            ):
                if not info.path.split("/", 1)[0].startswith(("_", ".")):
                    found.add(info.path)
        return found


def _exists(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        table.open()
    except TableNotFoundError:
        return {"exists": False}
    return {"exists": True}


def _active(snapshot: DeltaTable) -> list[dict[str, Any]]:
    return pa.table(snapshot.get_add_actions(flatten=True)).to_pylist()  # type: ignore[no-any-return]


def _health(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    snapshot = table.open()
    files = _active(snapshot)
    small_bytes = int(request["small_file_bytes"])
    day_of = {f["path"]: f[f"partition.{PARTITION_COLUMN}"] for f in files}
    per_day = Counter(day_of.values())
    small = Counter(day_of[f["path"]] for f in files if int(f["size_bytes"]) < small_bytes)
    checked = set(request.get("check_days") or ())
    stored = table.stored(f"{PARTITION_COLUMN}={day}" for day in sorted(checked))
    missing = sorted(p for p, day in day_of.items() if day in checked and p not in stored)
    log_files = table.listing(pafs.FileSelector(LOG_FOLDER, allow_not_found=True))
    return {
        "version": snapshot.version(),
        "files": len(files),
        "bytes": sum(int(f["size_bytes"]) for f in files),
        "rows": sum(int(f["num_records"] or 0) for f in files),
        "log_files": len(log_files),
        "log_bytes": sum(f.size or 0 for f in log_files),
        "days": [[d, per_day[d], small[d]] for d in sorted(per_day)],
        "missing": missing,
    }


def _missing(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    snapshot = table.open()
    active = [f["path"] for f in _active(snapshot)]
    stored = table.stored()
    return {
        "version": snapshot.version(),
        "files": len(active),
        "missing": sorted(p for p in active if p not in stored),
    }


def _compact(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    return compact(table, table.open(), list(request["days"]), int(request["target_bytes"]))


def compact(
    table: TableFolder, snapshot: DeltaTable, days: list[str], target_bytes: int
) -> dict[str, Any]:
    """Merge the small files of ``days`` in ``snapshot`` of ``table`` into files of about
    ``target_bytes``, in one fenced commit (see the module's docstring): the files removed
    and added, and ``refused`` when another compaction committed first; ``warning`` when
    it landed though its commit answered an error."""
    read_version = snapshot.version()
    by_day: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for file in _active(snapshot):
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
                rows = pa.concat_tables(_read(table.store, p) for p in group).sort_by(FILE_ORDER)
                path = f"{PARTITION_COLUMN}={day}/compacted-{uuid.uuid4().hex}.parquet"
                written.append(path)
                with table.store.open_output_stream(path) as out:
                    write_parquet(rows, out, settings)
                size = table.store.get_file_info(path).size or 0
                actions.append(AddAction(path, size, values, now, False, delta_stats(rows)))
                actions += [RemoveAction(p, False, now, sizes[p], values) for p in group]
                removed += len(group)
                del rows  # one group's rows in memory at a time
        table.make_durable(written)
    except BaseException:
        _delete(table.store, written)  # no commit was tried: no version names them
        raise
    if not actions:
        return {"removed": 0, "added": 0, "refused": False}
    mark = uuid.uuid4().hex
    try:
        _commit_rewrite(snapshot, actions, {"shoal.operation": "compaction", _MARK: mark})
    except BaseException as exc:
        landed_at = _landed_at(table, read_version, mark)
        if landed_at is None:
            raise OSError(
                f"the compaction's commit failed ({_first_line(exc)}) and the table could "
                f"not be read back to tell whether it landed: its {len(written)} files stay "
                "for the vacuum (it deletes only files no version names)"
            ) from exc
        if landed_at < 0:
            _delete(table.store, written)
            if isinstance(exc, CommitFailedError) and CONFLICT in str(exc):
                return {"removed": 0, "added": 0, "refused": True}
            raise
        table.sync_log()
        return {
            "removed": removed,
            "added": len(written),
            "refused": False,
            "warning": f"committed as version {landed_at}, though the commit answered "
            f"{type(exc).__name__}: {_first_line(exc)}",
        }
    table.sync_log()
    return {"removed": removed, "added": len(written), "refused": False}


def _commit_rewrite(
    snapshot: DeltaTable, actions: list[AddAction | RemoveAction], metadata: dict[str, str]
) -> None:
    """Commit a rewrite (no data change) of ``snapshot``, fenced by the app transaction
    ``COMPACTION_APP_ID`` one above the version ``snapshot`` read (of two rewrites of one
    snapshot the table takes one), with ``metadata`` in its commit info and no post-commit
    hooks (the round checkpoints as a step of its own)."""
    read = snapshot.transaction_version(COMPACTION_APP_ID) or 0
    snapshot.create_write_transaction(
        actions,
        mode="append",
        schema=snapshot.schema(),
        partition_by=[PARTITION_COLUMN],
        commit_properties=CommitProperties(
            app_transactions=[Transaction(COMPACTION_APP_ID, read + 1)],
            custom_metadata=metadata,
            max_commit_retries=COMMIT_ATTEMPTS,
        ),
        post_commithook_properties=_NO_HOOKS,
    )


def _landed_at(table: TableFolder, since: int, mark: str) -> int | None:
    """The version the compaction marked ``mark`` committed as, read afresh: -1 when every
    commit after ``since`` is read and none is its own; None when that cannot be told."""
    try:
        newest = table.open().version()
        for version in range(since + 1, newest + 1):
            entry = commit_entry(table.store, version)
            if entry is None:
                return None  # cleaned from the log already: cannot tell
            if entry.info.get(_MARK) == mark:
                return version
    except Exception:  # any: unreadable means unknown
        return None
    return -1


def _read(store: pafs.FileSystem, path: str) -> pa.Table:
    with store.open_input_file(path) as stream:
        return pq.read_table(stream)


def _delete(store: pafs.FileSystem, paths: list[str]) -> None:
    """Best effort: what is left is named by no version, and the vacuum removes it."""
    for path in paths:
        with contextlib.suppress(OSError):
            store.delete_file(path)


def _checkpoint(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    snapshot = table.open()
    snapshot.create_checkpoint()
    table.sync_log()
    before = len(table.listing(pafs.FileSelector(LOG_FOLDER, allow_not_found=True)))
    snapshot.cleanup_metadata()
    after = len(table.listing(pafs.FileSelector(LOG_FOLDER, allow_not_found=True)))
    return {"removed": max(0, before - after)}


def _vacuum(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    nested = sorted(
        {
            path.rpartition(f"/{LOG_FOLDER}/")[0]
            for path in table.stored()
            if f"/{LOG_FOLDER}/" in path
        }
    )
    if nested:
        raise RefusedError(
            f"{len(nested)} other Delta table(s) live inside this one's folder "
            f"({nested[0]}/ first); a vacuum of it would delete their files. Move them out "
            "(a broadcast handler's table lives beside the group's zone, not in it)"
        )
    snapshot = table.open()
    hours = float(request["retention_hours"])
    log_hours = _duration_hours(snapshot, "delta.logRetentionDuration")
    if request.get("enforce", True) and log_hours is not None and hours <= log_hours:
        raise RefusedError(
            f"a vacuum retention of {hours:g} h is not above the table's log retention "
            f"({log_hours:g} h, delta.logRetentionDuration): a writer paused between the two "
            "could commit files the vacuum deleted instead of failing"
        )
    # delta-rs takes whole hours, or none for the table's own deletedFileRetentionDuration
    # (to the second): that one when it is what was asked.
    kept = _duration_hours(snapshot, "delta.deletedFileRetentionDuration")
    exact = kept is not None and abs(kept - hours) < 1 / 3600
    files = snapshot.vacuum(
        retention_hours=None if exact else math.ceil(hours),  # never shorter than asked
        dry_run=bool(request["dry_run"]),
        enforce_retention_duration=False,
        full=True,
    )
    return {"files": files}


def _duration_hours(snapshot: DeltaTable, key: str) -> float | None:
    """The table's duration property ``key`` in hours (``interval N seconds`` as shoal
    writes it, or another unit Delta knows); None when unset or unreadable."""
    setting = snapshot.metadata().configuration.get(key)
    found = re.fullmatch(r"\s*interval\s+(\d+)\s+(\w+?)s?\s*", setting or "")
    units = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
    if found is None or found.group(2).lower() not in units:
        return None
    return int(found.group(1)) * units[found.group(2).lower()]


def _repair(table: TableFolder, request: Mapping[str, Any]) -> dict[str, Any]:
    version = int(request["version"])
    entry = commit_entry(table.store, version)
    if entry is None:
        raise RefusedError(
            f"version {version} is not in the table's log (never written, or cleaned past "
            "the log retention): it cannot be undone"
        )
    snapshot = table.open()
    active = {f["path"]: f for f in _active(snapshot)}
    stored = table.stored({f.path.rpartition("/")[0] for f in entry.removed})
    # A remove carries no row count: a stored file's footer has it.
    removed = [
        LoggedFile(f.path, f.data_change, _rows(table.store, f.path) if f.path in stored else None)
        for f in entry.removed
    ]
    try:
        plan = plan_repair(version, entry.added, removed, active=active, stored=stored)
    except ValueError as exc:
        raise RefusedError(str(exc)) from None
    now = round(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for path in plan.restore:
        rows = _read(table.store, path)
        size = table.store.get_file_info(path).size or 0
        values = entry.partition_values.get(path) or _partition_of(path)
        actions.append(AddAction(path, size, values, now, False, delta_stats(rows)))
    for path in plan.drop:
        file = active[path]
        values = {PARTITION_COLUMN: file[f"partition.{PARTITION_COLUMN}"]}
        actions.append(RemoveAction(path, False, now, int(file["size_bytes"]), values))
    _commit_rewrite(
        snapshot, actions, {"shoal.operation": "repair", "shoal.repaired": str(version)}
    )
    table.sync_log()
    return {"restored": list(plan.restore), "dropped": list(plan.drop)}


def _rows(store: pafs.FileSystem, path: str) -> int:
    with store.open_input_file(path) as stream:
        return int(pq.ParquetFile(stream).metadata.num_rows)


def _partition_of(path: str) -> dict[str, str | None]:
    folder = path.split("/", 1)[0]
    key, _, value = folder.partition("=")
    if key != PARTITION_COLUMN or not value:
        raise ValueError(f"{path}: not under a {PARTITION_COLUMN}= folder")
    return {PARTITION_COLUMN: value}


def _first_line(exc: BaseException) -> str:
    text = _NATIVE_TRACE.split(str(exc), maxsplit=1)[0].strip().splitlines()
    return text[0] if text else type(exc).__name__


_OPS: dict[str, Callable[[TableFolder, Mapping[str, Any]], dict[str, Any]]] = {
    "exists": _exists,
    "health": _health,
    "compact": _compact,
    "checkpoint": _checkpoint,
    "vacuum": _vacuum,
    "missing": _missing,
    "repair": _repair,
}


def main() -> int:
    request = json.load(sys.stdin)
    try:
        table = TableFolder(request["uri"], request["storage_options"])
        answer = _OPS[request["op"]](table, request)
    except Exception as exc:  # any: the parent reports it, with its type
        # delta-rs appends a native stack trace when RUST_BACKTRACE is set: not news here
        message = _NATIVE_TRACE.split(str(exc), maxsplit=1)[0].strip()
        print(f"{type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
