"""``ParquetSink``: the Sink port on local Parquet files (layout and schema: ``_schema``)."""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import anyio.from_thread
import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.parquet._schema import LANDED_SCHEMA
from core.errors import OwnershipLostError
from core.messages import LandedRow

__all__ = ["ParquetSettings", "ParquetSink"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class ParquetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_PARQUET_", extra="ignore")

    data_dir: Path = Path("var/data")
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    row_group_rows: int = Field(default=128 * 1024, ge=1)


class ParquetSink:
    """Writes each batch as one file per UTC date (usually one): many partitions, sorted by
    partition, project and sequence. Returns once the file is renamed into place and synced.

    ``write`` runs the blocking work in a worker thread. The file is written and fsynced
    under a hidden name, then ``still_valid`` is asked, then it is renamed and the
    directory fsynced: a writer that lost its lease while writing makes nothing visible.
    A cancelled ``write`` returns at once; its thread sees the cancellation at the same
    check and removes its hidden file instead of renaming it. Raises ``OSError`` when the
    disk refuses; no file (not even a hidden one) is left. A process killed mid-write may
    leave a ``.*.tmp`` file, which readers skip and nothing removes yet.
    """

    def __init__(self, settings: ParquetSettings | None = None) -> None:
        self.settings = settings or ParquetSettings()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> int:
        if not rows:
            return 0
        abandoned = threading.Event()

        def valid() -> bool:  # in the worker thread; ``still_valid`` runs on the event loop
            if abandoned.is_set():
                return False
            return still_valid is None or anyio.from_thread.run_sync(still_valid)

        try:
            written = await anyio.to_thread.run_sync(
                self._write_sync, list(rows), valid, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            abandoned.set()
            raise
        return len(written)

    def _write_sync(self, rows: list[LandedRow], valid: Callable[[], bool]) -> list[Path]:
        by_day: dict[str, list[LandedRow]] = defaultdict(list)
        for row in rows:
            by_day[_day(row.envelope.received_at)].append(row)
        handler = _UNSAFE.sub("_", rows[0].handler_id) or "handler"
        staged: list[tuple[Path, Path]] = []
        try:
            for day, group in sorted(by_day.items()):
                folder = self.settings.data_dir / f"date={day}"
                self._make_dirs(folder)
                stem = f"{handler}-{uuid.uuid4().hex}"
                staged.append((self._stage(folder, stem, group), folder / f"{stem}.parquet"))
            if not valid():
                raise OwnershipLostError(
                    f"{len(rows)} rows not made visible: the writer no longer owns them"
                )
            for temp, final in staged:
                temp.rename(final)
        except BaseException:
            for temp, _ in staged:
                temp.unlink(missing_ok=True)
            raise
        for folder in {final.parent for _, final in staged}:
            self._fsync_dir(folder)
        return [final for _, final in staged]

    def _stage(self, folder: Path, stem: str, rows: list[LandedRow]) -> Path:
        """Write and fsync ``rows`` under a hidden name; the caller renames or removes it."""
        temp = folder / f".{stem}.tmp"  # never *.parquet; readers skip names starting "."
        table = to_table(rows).sort_by(
            [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]
        )
        compression = self.settings.compression
        try:
            with temp.open("wb") as f:
                pq.write_table(
                    table,
                    f,
                    compression=None if compression == "none" else compression,
                    row_group_size=self.settings.row_group_rows,
                )
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return temp

    def _make_dirs(self, folder: Path) -> None:
        """Create ``folder`` and missing parents, fsyncing each parent that got an entry."""
        missing = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
            self._fsync_dir(d.parent)

    @staticmethod
    def _fsync_dir(folder: Path) -> None:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _day(received_at: float) -> str:
    return datetime.fromtimestamp(received_at, UTC).date().isoformat()


def to_table(rows: Sequence[LandedRow]) -> pa.Table:
    """``rows`` as a table of ``LANDED_SCHEMA``."""
    envs = [r.envelope for r in rows]
    columns = [
        [e.message_id for e in envs],
        [e.project_id for e in envs],
        [e.partition for e in envs],
        [r.generation for r in rows],
        [r.handler_id for r in rows],
        [e.gateway_id for e in envs],
        [e.sequence for e in envs],
        [_micros(e.received_at) for e in envs],
        [_micros(r.handled_at) for r in rows],
        [e.kind.value for e in envs],
        [e.payload for e in envs],
    ]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, LANDED_SCHEMA, strict=True)],
        schema=LANDED_SCHEMA,
    )


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)
