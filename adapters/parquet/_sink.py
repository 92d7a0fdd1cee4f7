"""``ParquetSink``: the Sink port on local Parquet files (layout and schema: ``_schema``)."""

from __future__ import annotations

import os
import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.parquet._schema import LANDED_SCHEMA
from core.messages import LandedRow

__all__ = ["ParquetSettings", "ParquetSink"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class ParquetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_PARQUET_", extra="ignore")

    data_dir: Path = Path("var/data")
    compression: Literal["zstd", "snappy", "gzip", "none"] = "zstd"


class ParquetSink:
    """Writes each batch as new files; returns once they are renamed into place and synced.

    ``write`` runs the blocking work in a worker thread; a cancelled ``write`` still
    finishes the file it started (the thread is not abandoned), so no half file remains.
    Raises ``OSError`` when the disk refuses; no file (not even a temporary one) is left.
    A process killed mid-write may leave a ``.*.tmp`` file, which readers skip and
    nothing removes yet.
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

    async def write(self, rows: Sequence[LandedRow]) -> None:
        if not rows:
            return
        await anyio.to_thread.run_sync(self._write_sync, list(rows))

    def _write_sync(self, rows: list[LandedRow]) -> list[Path]:
        groups: dict[tuple[str, int], list[LandedRow]] = defaultdict(list)
        for row in rows:
            day = datetime.fromtimestamp(row.envelope.received_at, UTC).date().isoformat()
            groups[(day, row.envelope.partition)].append(row)
        written = []
        for (day, partition), group in sorted(groups.items()):
            folder = self.settings.data_dir / f"date={day}" / f"partition={partition}"
            self._make_dirs(folder)
            handler = _UNSAFE.sub("_", group[0].handler_id) or "handler"
            written.append(self._write_file(folder, f"{handler}-{uuid.uuid4().hex}", group))
        return written

    def _write_file(self, folder: Path, stem: str, rows: list[LandedRow]) -> Path:
        final = folder / f"{stem}.parquet"
        temp = folder / f".{stem}.tmp"  # never *.parquet; readers skip names starting "."
        table = to_table(rows)
        compression = self.settings.compression
        try:
            with temp.open("wb") as f:
                pq.write_table(table, f, compression=None if compression == "none" else compression)
                f.flush()
                os.fsync(f.fileno())
            temp.rename(final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self._fsync_dir(folder)
        return final

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
