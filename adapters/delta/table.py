"""``DeltaLandedTable``: the LandedTable port on a Delta Lake table (delta-rs), on a local
path or ``s3://bucket/prefix``; ``open_table``, which creates the table when there is none;
the table's schema."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
)

from adapters._lifecycle import Lifecycle
from adapters._parquet_format import LANDED_SCHEMA
from adapters.delta._durable import LogSync
from adapters.delta._layout import (
    COMMIT_ATTEMPTS,
    CONFLICT,
    PARTITION_COLUMN,
    commit_entry,
    is_local,
)
from adapters.delta._settings import TableSettings
from core.errors import CommitConflictError
from core.table import LandedFile, LogKey, transaction_app_id

__all__ = ["TABLE_SCHEMA", "DeltaLandedTable", "open_table"]

TABLE_SCHEMA = LANDED_SCHEMA.append(pa.field(PARTITION_COLUMN, pa.string(), nullable=False))
_TOKENS = "shoal.tokens"  # in a commit's commit info: the tokens it set, by log
_PLACE_COLUMNS = ["log_id", "partition", "position"]
_READ_COLUMNS = [*_PLACE_COLUMNS, "message_id"]
_HISTORY_LIMIT = 1000  # commits since the last snapshot read for their tokens, at most
# delta-rs cleans expired log entries after every commit when the table allows it, which
# lists the whole log three times (on a local disk a stat per entry: a commit took 38 ms
# instead of 14 once the log held 3,000 entries). A writer leaves that to the upkeep round,
# which checkpoints and cleans once per interval; it still writes its checkpoints.
_WRITER_HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def open_table(
    uri: str, storage_options: Mapping[str, str] | None, settings: TableSettings | None = None
) -> DeltaTable:
    """The newest version of the table at ``uri``, created first when there is none (a
    racing creator's table is as good). Blocking: call it in a worker thread."""
    options = dict(storage_options) if storage_options else None
    # Not DeltaTable.is_deltatable: it holds the interpreter lock for its whole request,
    # which would stall the event loop's thread (lease renewals, fetches) on a slow store.
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        pass
    # A racing creator's table is as good: opening it below says whether there is one.
    with contextlib.suppress(DeltaError):
        DeltaTable.create(
            uri,
            schema=TABLE_SCHEMA,
            mode="ignore",
            partition_by=[PARTITION_COLUMN],
            name="shoal_landed",
            description="messages landed by shoal handlers",
            configuration=(settings or TableSettings()).table_configuration(),
            storage_options=options,
        )
    return DeltaTable(uri, storage_options=options)


class DeltaLandedTable(Lifecycle):
    """A writer's snapshot of the table, kept between batches and brought forward by each
    ``refresh``, and its commits on it. Every delta-rs call runs in
    a worker thread; a commit is never abandoned half-way (a cancelled caller waits for
    it), so no commit lands behind the writer's back. delta-rs errors other than a
    conflict surface as ``OSError``.

    Tokens are read from the commits' own record of them: each commit also writes the
    tokens it sets into its commit info (``_TOKENS``), and ``refresh`` reads the commit
    infos since the previous snapshot (one small read per commit file) to keep a cache.
    delta-rs's ``transaction_version`` replays the log since its last checkpoint on every
    call, a cost per log and per commit since the checkpoint (150 ms for 128 logs
    60 commits after one); it is asked only for a log the cache does not know, and the
    cache starts over when the commits since the last snapshot cannot all be read (the log
    was cleaned in between). The fence itself is Delta's app transactions, whatever the
    cache says.

    On a local disk a commit returns only once its log entry (and every entry below it,
    and any checkpoint) is fsynced with the log's folder (``LogSync``): delta-rs syncs
    nothing, and the caller acks when it returns. A sync that fails after the commit
    landed raises; the next ``refresh`` syncs first, so nothing read back as landed is
    acted on before it is durable."""

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        settings: TableSettings | None = None,
    ) -> None:
        self.uri = uri
        self._options = dict(storage_options) if storage_options else None
        self._settings = settings or TableSettings()
        self._snapshot: DeltaTable | None = None
        self._version: int | None = None  # the snapshot's, as far as the tokens are read
        self._tokens: dict[LogKey, int | None] = {}  # as of that version
        self._store: pafs.FileSystem | None = None
        self._log_sync = LogSync(Path(uri)) if is_local(uri) else None
        self._sync_owed = False  # a commit landed whose log sync failed

    async def refresh(self) -> int:
        held, since = self._snapshot, self._version

        def read() -> tuple[DeltaTable, list[dict[str, Any]] | None]:
            self._sync_log()
            snapshot = self._updated(held)
            version = snapshot.version()
            if since is None or not 0 <= version - since <= _HISTORY_LIMIT:
                return snapshot, None
            return snapshot, self._commit_infos(range(since + 1, version + 1))

        try:
            snapshot, commits = await _in_thread(read)
        except BaseException:
            # The held snapshot may have moved on without the tokens: start over.
            self._snapshot, self._version = None, None
            self._tokens.clear()
            raise
        version = snapshot.version()
        between = sorted(
            (c for c in commits or () if (since or 0) < int(c.get("version", -1)) <= version),
            key=lambda c: int(c["version"]),
        )
        if commits is None or len(between) < version - (since or 0):
            self._tokens.clear()
        for info in between:
            self._tokens.update(json.loads(info.get(_TOKENS, "{}")))
        self._snapshot, self._version = snapshot, version
        return version

    def _sync_log(self) -> None:
        """Sync the local log (``LogSync``) when a commit landed unsynced. In the worker
        thread of the commit or the refresh."""
        if self._sync_owed and self._log_sync is not None:
            self._log_sync.sync()
            self._sync_owed = False

    def _commit_infos(self, versions: range) -> list[dict[str, Any]] | None:
        """Each version's commit info (with its ``version``), read from its own commit
        file; None when one is gone (the log was cleaned). Not ``DeltaTable.history``:
        delta-rs reads it from the log's newest commit but numbers it from the snapshot's
        version, so a commit that lands between the two (another handler's) shifted every
        number by one, the cache took another commit's tokens for this writer's own, and
        the batch after it planned its landed rows as new (a duplicate per message)."""
        store = self._files()
        infos: list[dict[str, Any]] = []
        for version in versions:
            entry = commit_entry(store, version)
            if entry is None:
                return None
            infos.append({**entry.info, "version": version})
        return infos

    def _files(self) -> pafs.FileSystem:
        """The table's folder through the table's own object store (made once)."""
        if self._store is None:
            self._store = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self._options))
        return self._store

    def _updated(self, held: DeltaTable | None) -> DeltaTable:
        """The newest version: the held snapshot brought forward by the commits since (a
        listing after its version and a read of each new commit), or a fresh open (the
        last checkpoint and every commit after it) when there is none or it cannot be
        brought forward (the commits after it were cleaned from the log)."""
        if held is not None:
            try:
                held.update_incremental()
            except DeltaError:
                pass
            else:
                return held
        return open_table(self.uri, self._options, self._settings)

    def token(self, key: LogKey) -> int | None:
        if key not in self._tokens:
            self._tokens[key] = self._current().transaction_version(transaction_app_id(key))
        return self._tokens[key]

    async def settled(
        self, floors: Mapping[LogKey, int]
    ) -> Mapping[LogKey, Mapping[int, frozenset[str]]]:
        if not floors:
            return {}
        snapshot = self._current()
        wanted = {_split(key): (key, floor) for key, floor in floors.items()}

        def read() -> Mapping[LogKey, Mapping[int, frozenset[str]]]:
            # The snapshot's files whose statistics allow a wanted position, four columns
            # of each, a row group at a time: not DataFusion (a session that stays, 28 MB
            # in every handler) nor pyarrow.dataset (it imports pandas where installed).
            files = pa.table(snapshot.get_add_actions(flatten=True)).to_pylist()
            store = self._files()
            found: dict[LogKey, dict[int, set[str]]] = {key: {} for key in floors}
            for file in files:
                if not any(_may_hold(file, *place, floor) for place, (_, floor) in wanted.items()):
                    continue
                with store.open_input_file(file["path"]) as stream:
                    for batch in pq.ParquetFile(stream).iter_batches(columns=_READ_COLUMNS):
                        for log_id, partition, position, message_id in _at_or_above(batch, wanted):
                            at = found[wanted[log_id, partition][0]]
                            at.setdefault(position, set()).add(message_id)
            return {key: {p: frozenset(ids) for p, ids in at.items()} for key, at in found.items()}

        return await _in_thread(read)

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        snapshot = self._current()
        now = round(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {PARTITION_COLUMN: f.day}, now, True, f.stats) for f in files
        ]
        properties = CommitProperties(
            app_transactions=[Transaction(transaction_app_id(k), t) for k, t in tokens.items()],
            custom_metadata={_TOKENS: json.dumps(dict(tokens))},
            max_commit_retries=COMMIT_ATTEMPTS,
        )

        def commit() -> None:
            # Owed whatever the outcome: a commit that errs may have been stored (a failed
            # post-commit checkpoint, a lost answer), and the refresh that finds it syncs.
            self._sync_owed = self._log_sync is not None
            try:
                snapshot.create_write_transaction(
                    actions,
                    mode="append",
                    schema=TABLE_SCHEMA,
                    partition_by=[PARTITION_COLUMN],
                    commit_properties=properties,
                    post_commithook_properties=_WRITER_HOOKS,
                )
            except CommitFailedError as exc:
                if CONFLICT in str(exc):
                    raise CommitConflictError(str(exc)) from exc
                raise
            self._sync_log()

        with anyio.CancelScope(shield=True):
            await _in_thread(commit)

    async def holds(self, paths: Collection[str]) -> bool:
        snapshot = self._current()

        def read() -> bool:
            active = set(
                pa.table(snapshot.get_add_actions(flatten=True)).column("path").to_pylist()
            )
            return all(p in active for p in paths)

        return await _in_thread(read)

    def _current(self) -> DeltaTable:
        if self._snapshot is None:
            raise RuntimeError("no snapshot yet: refresh first")
        return self._snapshot


def _may_hold(file: Mapping[str, Any], log_id: str, partition: int, floor: int) -> bool:
    """Whether a file's statistics (``get_add_actions(flatten=True)``; None where a writer
    kept none) allow a row of ``log_id``'s ``partition`` at ``floor`` or above."""

    def within(column: str, value: Any) -> bool:
        least, greatest = file.get(f"min.{column}"), file.get(f"max.{column}")
        return (least is None or least <= value) and (greatest is None or value <= greatest)

    greatest_position = file.get("max.position")
    return (
        within("log_id", log_id)
        and within("partition", partition)
        and (greatest_position is None or greatest_position >= floor)
    )


def _at_or_above(
    batch: pa.RecordBatch, wanted: Mapping[tuple[str, int], tuple[LogKey, int]]
) -> list[tuple[str, int, int, str]]:
    """The (log id, partition, position, message id) of ``batch``'s rows at or above their
    log's floor."""
    log_id, partition, position = (batch.column(c) for c in _PLACE_COLUMNS)
    keep = None
    for (wanted_log, wanted_partition), (_, floor) in wanted.items():
        match = pc.and_(
            pc.and_(pc.equal(log_id, wanted_log), pc.equal(partition, wanted_partition)),
            pc.greater_equal(position, floor),
        )
        keep = match if keep is None else pc.or_(keep, match)
    found = batch.filter(keep).to_pydict()
    return list(zip(*(found[c] for c in _READ_COLUMNS), strict=True))


def _split(key: LogKey) -> tuple[str, int]:
    log_id, _, partition = key.rpartition("#")
    return log_id, int(partition)


async def _in_thread(function: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``function`` in a worker thread, delta-rs's errors as ``OSError``."""

    def run() -> _T:
        try:
            return function(*args, **kwargs)
        except DeltaError as exc:
            raise OSError(f"Delta table: {exc}") from exc

    return await anyio.to_thread.run_sync(run)
