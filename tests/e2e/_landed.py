"""Read the Parquet landing zone: ``{data_dir}/date=YYYY-MM-DD/{handler}-{uuid}.parquet``.

The zone is a table: its rows are those of the files its log (``_shoal/log``) names, and
nothing else in the folder (a file a handler wrote but did not commit, because it crashed
or found its rows landed by another, is not data). Both readers here list the files from
the log (``services.common.table``), never from the folder.

Columns (written by the ParquetSink): message_id, project_id, partition, generation,
handler_id, gateway_id, sequence, received_at, handled_at, kind, payload. In
``LandingZone`` tables, ``received_at`` and ``handled_at`` are float seconds since the
epoch (comparable with ``time.time()``), and two columns are added: ``landed_at``, the
modification time of the row's file (when the write reached the disk, as opposed to
``handled_at``, stamped by the handler before it wrote), and ``seen_at``, when this reader
first found the file in the table (named by a commit: under its final name, visible to
readers). A writer's clocks say what it meant; ``seen_at`` is an outside observer's: a
paused writer's late write is caught by it, whatever the file's own times say.

``LandingZone.refresh()`` reads only the commits made since its last call and the files
they add (and forgets files they remove), so tests can watch the zone grow while load runs.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from adapters.s3 import S3Location, S3Settings, s3_client
from services.common.landing_zone import is_object_store, landing_log_at
from services.common.table import LandingTable, read_table

__all__ = [
    "COLUMNS",
    "LandingZone",
    "duplicates",
    "landed_ids",
    "read_landed",
]

COLUMNS = (
    "message_id",
    "project_id",
    "partition",
    "generation",
    "handler_id",
    "gateway_id",
    "sequence",
    "received_at",
    "handled_at",
    "kind",
    "payload",
)


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _seconds(column: Any) -> Any:
    """A timestamp column as float seconds since the epoch (floats stay as they are)."""
    if not pa.types.is_timestamp(column.type):
        return column
    return pc.divide(pc.cast(column, pa.int64()), float(_PER_SECOND[column.type.unit]))


def _normalized(table: Any, mtime_ns: int, seen_at: float) -> Any:
    """Timestamps as float seconds (comparable with ``time.time()``), plus ``landed_at`` and
    ``seen_at``."""
    for name in ("received_at", "handled_at"):
        if name in table.column_names:
            index = table.column_names.index(name)
            table = table.set_column(index, name, _seconds(table.column(name)))
    landed_at = pa.array([mtime_ns / 1e9] * table.num_rows, type=pa.float64())
    table = table.append_column("landed_at", landed_at)
    return table.append_column("seen_at", pa.array([seen_at] * table.num_rows, pa.float64()))


class LandingZone:
    """An incrementally read view of the landing table at ``data_dir`` (a directory, or
    ``s3://bucket/prefix`` reached with ``s3``: then ``landed_at`` is the object's
    LastModified, to the second)."""

    def __init__(self, data_dir: Path | str, s3: S3Settings | None = None) -> None:
        self.data_dir = data_dir
        self._s3 = s3_client(s3 or S3Settings()) if is_object_store(data_dir) else None
        self._view = LandingTable(landing_log_at(data_dir, s3), writer="e2e-reader")
        self._tables: dict[str, Any] = {}  # by path relative to data_dir, as the log names it
        self._ids: Counter[str] = Counter()
        self._combined: Any = None

    @property
    def files(self) -> int:
        return len(self._tables)

    def refresh(self) -> int:
        """Catch up with the table; returns how many rows were added (net). Runs an event
        loop of its own: call it where none runs (``anyio.to_thread.run_sync``)."""
        state = anyio.run(self._view.refresh)
        seen_at = time.time()
        added = 0
        changed = False
        for path in [p for p in self._tables if p not in state.files]:  # compacted away
            old = self._tables.pop(path)
            self._ids.subtract(old.column("message_id").to_pylist())
            added -= old.num_rows
            changed = True
        for path in sorted(state.files.keys() - self._tables.keys()):
            table = _normalized(*self._read(path), seen_at)
            self._ids.update(table.column("message_id").to_pylist())
            self._tables[path] = table
            added += table.num_rows
            changed = True
        if changed:
            self._combined = None
        self._ids += Counter()  # drop zero counts left by removed files
        return added

    def _read(self, path: str) -> tuple[Any, int]:
        """The file's rows and its modification time (ns)."""
        if self._s3 is None:
            file = Path(self.data_dir) / path
            return ds.dataset(file, format="parquet").to_table(), file.stat().st_mtime_ns
        where = S3Location.parse(str(self.data_dir))
        answer = self._s3.get_object(Bucket=where.bucket, Key=where.key(path))
        table = pq.read_table(io.BytesIO(answer["Body"].read()))
        return table, int(answer["LastModified"].timestamp() * 1e9)

    def ids(self) -> Counter[str]:
        """message_id -> how many rows carry it."""
        return Counter(self._ids)

    def count(self) -> int:
        return sum(self._ids.values())

    def table(self) -> Any:
        """Every row read so far, as one ``pyarrow.Table`` (with ``landed_at``)."""
        if self._combined is None:
            tables = list(self._tables.values())
            self._combined = (
                pa.concat_tables(tables, promote_options="permissive") if tables else _empty_table()
            )
        return self._combined

    def first(self, mask: Any) -> dict[str, Any] | None:
        """The row with the smallest ``handled_at`` among those where ``mask`` (a boolean
        array over ``table()``, or a callable table -> mask) is true; None if there is none."""
        table = self.table()
        if table.num_rows == 0:
            return None
        selected = table.filter(mask(table) if callable(mask) else mask)
        if selected.num_rows == 0:
            return None
        index = pc.index(selected.column("handled_at"), pc.min(selected.column("handled_at")))
        row: dict[str, Any] = selected.slice(index.as_py(), 1).to_pylist()[0]
        return row


def _empty_table() -> Any:
    return pa.table(
        {
            "message_id": pa.array([], pa.string()),
            "partition": pa.array([], pa.int64()),
            "generation": pa.array([], pa.int64()),
            "handler_id": pa.array([], pa.string()),
            "handled_at": pa.array([], pa.float64()),
            "landed_at": pa.array([], pa.float64()),
            "seen_at": pa.array([], pa.float64()),
        }
    )


def read_landed(data_dir: Path) -> Any:
    """Every row of the landing table at ``data_dir`` in one pass of pyarrow.dataset (no
    landed_at). Runs an event loop of its own, like ``LandingZone.refresh``."""
    files = [str(data_dir / path) for path in sorted(read_table(data_dir).files)]
    if not files:
        return _empty_table().drop_columns(["landed_at", "seen_at"])
    return ds.dataset(files, format="parquet").to_table()


def landed_ids(table: Any) -> Counter[str]:
    """message_id -> number of rows, over a table from ``read_landed`` or ``table()``."""
    return Counter(table.column("message_id").to_pylist())


def duplicates(ids: Counter[str]) -> dict[str, int]:
    """The message ids landed more than once, with their row counts."""
    return {message_id: n for message_id, n in ids.items() if n > 1}
