"""Read the landing zone's Delta table: ``{data_dir}/date=YYYY-MM-DD/*.parquet`` plus
``_delta_log``.

The zone is a table: its rows are those of the files its newest version holds, and
nothing else in the folder (a file a handler wrote but did not commit, because it crashed
or found its rows landed by another, is not data). Both readers here list the files from
the table (``services.common.table``), never from the folder.

Columns (written by the ParquetSink): message_id, project_id, partition, generation,
handler_id, gateway_id, sequence, received_at, handled_at, kind, payload, log_id,
position. In ``LandingZone`` tables, ``received_at`` and ``handled_at`` are float seconds
since the epoch (comparable with ``time.time()``), and two columns are added:
``landed_at``, the file's modification time as its commit records it (when the commit
that added it was made, as opposed to ``handled_at``, stamped by the handler when it
fetched the message), and ``seen_at``, when this reader first found the file in the
table. A writer's clocks say what it meant; ``seen_at`` is an outside observer's: a
paused writer's late commit is caught by it, whatever the file's own times say.

``LandingZone.refresh()`` reads only the files added since its last call (and forgets
files compaction removed), so tests can watch the zone grow while load runs.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from adapters.s3 import S3Location, S3Settings
from adapters.s3.client import s3_client
from services.common.table import landed_table
from services.common.table import read_landed as read_table_rows
from services.common.table_address import is_object_store

__all__ = [
    "COLUMNS",
    "LandingZone",
    "RunTally",
    "duplicates",
    "landed_ids",
    "read_landed",
    "tally_run",
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
    "log_id",
    "position",
)


# What tells one landed row from another, whichever file holds it.
_ROW_IDENTITY = ("message_id", "handler_id", "generation", "handled_at")

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _seconds(column: Any) -> Any:
    """A timestamp column as float seconds since the epoch (floats stay as they are)."""
    if not pa.types.is_timestamp(column.type):
        return column
    return pc.divide(pc.cast(column, pa.int64()), float(_PER_SECOND[column.type.unit]))


def _normalized(table: Any, landed_at: float, seen_at: float) -> Any:
    """Timestamps as float seconds (comparable with ``time.time()``), plus ``landed_at`` and
    ``seen_at``."""
    for name in ("received_at", "handled_at"):
        if name in table.column_names:
            index = table.column_names.index(name)
            table = table.set_column(index, name, _seconds(table.column(name)))
    table = table.append_column("landed_at", pa.array([landed_at] * table.num_rows, pa.float64()))
    return table.append_column("seen_at", pa.array([seen_at] * table.num_rows, pa.float64()))


class LandingZone:
    """An incrementally read view of the landing table at ``data_dir`` (a directory, or
    ``s3://bucket/prefix`` reached with ``s3``)."""

    def __init__(self, data_dir: Path | str, s3: S3Settings | None = None) -> None:
        self.data_dir = data_dir
        self._s3_settings = s3
        self._s3 = s3_client(s3 or S3Settings()) if is_object_store(data_dir) else None
        self._tables: dict[str, Any] = {}  # by path relative to data_dir, as the table names it
        self._first: dict[tuple[Any, ...], tuple[float, float]] = {}  # row -> landed, seen
        self._ids: Counter[str] = Counter()
        self._combined: Any = None

    @property
    def files(self) -> int:
        return len(self._tables)

    def refresh(self) -> int:
        """Catch up with the table; returns how many rows were added (net). Blocking: call it
        from async code through ``anyio.to_thread.run_sync``."""
        delta = landed_table(self.data_dir, self._s3_settings)
        files: dict[str, float] = {}
        if delta is not None:
            actions = pa.table(delta.get_add_actions(flatten=True)).to_pydict()
            files = dict(
                zip(actions["path"], (t / 1000 for t in actions["modification_time"]), strict=True)
            )
        seen_at = time.time()
        added = 0
        changed = False
        for path in [p for p in self._tables if p not in files]:  # compacted away
            old = self._tables.pop(path)
            self._ids.subtract(old.column("message_id").to_pylist())
            added -= old.num_rows
            changed = True
        for path in sorted(files.keys() - self._tables.keys()):
            table = self._first_sightings(_normalized(self._read(path), files[path], seen_at))
            self._ids.update(table.column("message_id").to_pylist())
            self._tables[path] = table
            added += table.num_rows
            changed = True
        if changed:
            self._combined = None
        self._ids += Counter()  # drop zero counts left by removed files
        return added

    def _first_sightings(self, table: Any) -> Any:
        """``table`` with each row's ``landed_at`` and ``seen_at`` as first seen: a row the
        table's upkeep rewrote into a new file (compaction) keeps the times of the file it
        first appeared in, so it is never taken for a late write."""
        rows = zip(
            *(table.column(c).to_pylist() for c in _ROW_IDENTITY),
            table.column("landed_at").to_pylist(),
            table.column("seen_at").to_pylist(),
            strict=True,
        )
        times = [self._first.setdefault(tuple(r[:-2]), (r[-2], r[-1])) for r in rows]
        for name, index in (("landed_at", 0), ("seen_at", 1)):
            column = pa.array([t[index] for t in times], pa.float64())
            table = table.set_column(table.column_names.index(name), name, column)
        return table

    def _read(self, path: str) -> Any:
        if self._s3 is None:
            return pq.read_table(Path(self.data_dir) / path)
        where = S3Location.parse(str(self.data_dir))
        answer = self._s3.get_object(Bucket=where.bucket, Key=where.key(path))
        return pq.read_table(io.BytesIO(answer["Body"].read()))

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


def read_landed(
    data_dir: Path | str, s3: S3Settings | None = None, *, columns: Sequence[str] | None = None
) -> Any:
    """Every row of the landing table at ``data_dir`` (``columns`` of them, all by default),
    read through its newest version, the committed one (no landed_at). Blocking."""
    return read_table_rows(data_dir, s3, columns=columns)


def landed_ids(table: Any) -> Counter[str]:
    """message_id -> number of rows, over a table from ``read_landed`` or ``table()``."""
    return Counter(table.column("message_id").to_pylist())


def duplicates(ids: Counter[str]) -> dict[str, int]:
    """The message ids landed more than once, with their row counts."""
    return {message_id: n for message_id, n in ids.items() if n > 1}


@dataclass(frozen=True)
class RunTally:
    """A whole run judged against the table: every message id accepted in it (answered 202,
    whichever fault it fell in, the warm-up before the first one included) must be in the
    table exactly once."""

    accepted: int  # distinct message ids answered 202
    landed: int  # rows in the table
    missing: int  # accepted ids with no row
    duplicated: int  # rows whose message_id occurs more than once (an id twice: 2 rows)
    duplicated_ids: int  # message ids with more than one row
    examples: tuple[str, ...] = ()  # a few of the missing and duplicated ids, for the failure

    @property
    def exactly_once(self) -> bool:
        return self.missing == 0 and self.duplicated == 0

    def line(self) -> str:
        return (
            f"accepted={self.accepted} landed={self.landed} missing={self.missing} "
            f"duplicated={self.duplicated} duplicated_ids={self.duplicated_ids}"
        )


def tally_run(accepted: Iterable[str], table: Any, examples: int = 5) -> RunTally:
    """Judge a whole run: ``accepted``, every message id answered 202 in it, against
    ``table`` (a ``pyarrow.Table`` with a ``message_id`` column, as ``read_landed`` reads the
    committed version), grouped by message_id. Any id with more than one row counts, an
    accepted one or not (every row of the run's table is the run's)."""
    landed = pa.table({"message_id": pc.cast(table.column("message_id"), pa.string())})
    counts = landed.group_by("message_id").aggregate([("message_id", "count")])
    twice = counts.filter(pc.greater(counts.column("message_id_count"), 1))
    wanted = pa.array(sorted(set(accepted)), pa.string())
    missing = wanted.filter(pc.invert(pc.is_in(wanted, value_set=counts.column("message_id"))))
    shown = (
        missing.slice(0, examples).to_pylist() + twice.column("message_id")[:examples].to_pylist()
    )
    return RunTally(
        accepted=len(wanted),
        landed=landed.num_rows,
        missing=len(missing),
        duplicated=int(pc.sum(twice.column("message_id_count")).as_py() or 0),
        duplicated_ids=twice.num_rows,
        examples=tuple(str(m) for m in shown),
    )
