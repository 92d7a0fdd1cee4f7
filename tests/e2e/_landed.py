"""Read the Parquet landing zone: ``{data_dir}/date=YYYY-MM-DD/{handler}-{uuid}.parquet``.

Columns (written by the ParquetSink): message_id, project_id, partition, generation,
handler_id, gateway_id, sequence, received_at, handled_at, kind, payload. In
``LandingZone`` tables, ``received_at`` and ``handled_at`` are float seconds since the
epoch (comparable with ``time.time()``), and ``landed_at`` is added: the modification time
of the row's file (when the write reached the disk, as opposed to ``handled_at``, stamped
by the handler before it wrote).

``LandingZone.refresh()`` reads only files it has not read yet (or that changed since),
so tests can watch the zone grow while load runs. Files whose name or directory starts
with ``.`` or ``_`` are skipped (pyarrow.dataset's own convention for temporary files),
and a file that cannot be read yet (still being written) is tried again next time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

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


@dataclass(frozen=True)
class _Signature:
    mtime_ns: int
    size: int


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _seconds(column: Any) -> Any:
    """A timestamp column as float seconds since the epoch (floats stay as they are)."""
    if not pa.types.is_timestamp(column.type):
        return column
    return pc.divide(pc.cast(column, pa.int64()), float(_PER_SECOND[column.type.unit]))


def _normalized(table: Any, mtime_ns: int) -> Any:
    """Timestamps as float seconds (comparable with ``time.time()``), plus ``landed_at``."""
    for name in ("received_at", "handled_at"):
        if name in table.column_names:
            index = table.column_names.index(name)
            table = table.set_column(index, name, _seconds(table.column(name)))
    landed_at = pa.array([mtime_ns / 1e9] * table.num_rows, type=pa.float64())
    return table.append_column("landed_at", landed_at)


class LandingZone:
    """An incrementally read view of the Parquet files under ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._read: dict[Path, _Signature] = {}
        self._tables: dict[Path, Any] = {}
        self._ids: Counter[str] = Counter()
        self._combined: Any = None
        self.unreadable: dict[Path, str] = {}  # files skipped on the last refresh, and why

    @property
    def files(self) -> int:
        return len(self._tables)

    def refresh(self) -> int:
        """Read new and changed files; returns how many rows were added (net)."""
        added = 0
        changed = False
        self.unreadable = {}
        if not self.data_dir.exists():
            return 0
        for path in sorted(self.data_dir.rglob("*.parquet")):
            if not path.is_file() or not _visible(path, self.data_dir):
                continue
            stat = path.stat()
            signature = _Signature(stat.st_mtime_ns, stat.st_size)
            if self._read.get(path) == signature:
                continue
            try:
                table = ds.dataset(path, format="parquet").to_table()
            except (pa.ArrowException, OSError) as exc:
                self.unreadable[path] = str(exc)
                continue
            after = path.stat()
            if _Signature(after.st_mtime_ns, after.st_size) != signature:
                self.unreadable[path] = "changed while read"
                continue
            table = _normalized(table, signature.mtime_ns)
            old = self._tables.get(path)
            if old is not None:
                self._ids.subtract(old.column("message_id").to_pylist())
                added -= old.num_rows
            self._ids.update(table.column("message_id").to_pylist())
            self._tables[path] = table
            self._read[path] = signature
            added += table.num_rows
            changed = True
        if changed:
            self._combined = None
        self._ids += Counter()  # drop zero counts left by re-read files
        return added

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
        }
    )


def read_landed(data_dir: Path) -> Any:
    """Every landed row under ``data_dir`` in one pass of pyarrow.dataset (no landed_at)."""
    files = [
        str(p) for p in sorted(data_dir.rglob("*.parquet")) if p.is_file() and _visible(p, data_dir)
    ]
    if not files:
        return _empty_table().drop_columns(["landed_at"])
    return ds.dataset(files, format="parquet").to_table()


def landed_ids(table: Any) -> Counter[str]:
    """message_id -> number of rows, over a table from ``read_landed`` or ``table()``."""
    return Counter(table.column("message_id").to_pylist())


def duplicates(ids: Counter[str]) -> dict[str, int]:
    """The message ids landed more than once, with their row counts."""
    return {message_id: n for message_id, n in ids.items() if n > 1}
