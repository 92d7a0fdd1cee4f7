"""``S3ParquetSink``: the Sink port on an object store, with the disk sink's layout
(``adapters.parquet.layout``) under ``s3://bucket/prefix``.

Each file is encoded in memory (at most the roll size, 64 MiB by default), then
``still_valid`` is asked, then it is uploaded. An object appears whole or not at all when
its upload completes, and the store acknowledges only once it is durable (S3; MinIO
fsyncs): there is no temporary name to rename. An upload that fails leaves no object; one
whose answer was lost may have left one, which no commit names (an orphan that
``shoal analytics compact`` deletes after its retention).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread
import pyarrow as pa
from botocore.exceptions import BotoCoreError, ClientError

from adapters._lifecycle import Lifecycle
from adapters._parquet_format import (
    ParquetSettings,
    layout,
    sorted_table,
    table_file_path,
    write_parquet,
)
from adapters.s3._client import S3Location, delete_objects
from core.errors import OwnershipLostError
from core.messages import LandedRow
from core.table import LandedFile

__all__ = ["S3ParquetSink"]


class S3ParquetSink(Lifecycle):
    """``client``: a boto3 S3 client (``s3_client``); ``settings``: compression and row
    groups (``ParquetSettings``; its ``data_dir`` is not used). Storage errors raise
    ``OSError``."""

    def __init__(
        self, client: Any, location: S3Location, settings: ParquetSettings | None = None
    ) -> None:
        self._client = client
        self._location = location
        self._settings = settings or ParquetSettings()

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        if not rows:
            return ()
        encoded = await anyio.to_thread.run_sync(self._encode, list(rows))
        if still_valid is not None and not still_valid():
            raise OwnershipLostError(
                f"{len(rows)} rows not uploaded: the writer no longer owns them"
            )
        await anyio.to_thread.run_sync(self._upload, encoded)
        return tuple(LandedFile(path, n) for path, _, n in encoded)

    async def discard(self, files: Sequence[LandedFile]) -> None:
        if files:
            await anyio.to_thread.run_sync(self._delete, [f.path for f in files])

    async def write_table(self, day: str, table: pa.Table, *, writer: str) -> LandedFile:
        """Upload ``table`` (``LANDED_SCHEMA``, rows in the order given) as one object at
        ``table_file_path``; part of the table only once a commit names it (``discard``
        removes it otherwise). ``shoal analytics compact`` merges small files this way.
        ``ValueError`` for another schema or day, ``OSError`` when the store refuses (no
        object is left then, unless only the answer was lost)."""
        path = table_file_path(day, table, writer=writer)

        def encode() -> pa.Buffer:
            stream = pa.BufferOutputStream()
            write_parquet(table, stream, self._settings)
            return stream.getvalue()

        data = await anyio.to_thread.run_sync(encode)
        await anyio.to_thread.run_sync(self._upload, [(path, data, table.num_rows)])
        return LandedFile(path, table.num_rows)

    # -- in a worker thread --------------------------------------------------------------

    def _encode(self, rows: list[LandedRow]) -> list[tuple[str, pa.Buffer, int]]:
        encoded = []
        for path, group in layout(rows):
            stream = pa.BufferOutputStream()
            write_parquet(sorted_table(group), stream, self._settings)
            encoded.append((path, stream.getvalue(), len(group)))
        return encoded

    def _upload(self, encoded: list[tuple[str, pa.Buffer, int]]) -> None:
        done: list[str] = []
        try:
            for path, data, _ in encoded:
                self._client.upload_fileobj(
                    pa.BufferReader(data), self._location.bucket, self._location.key(path)
                )
                done.append(path)
        except (ClientError, BotoCoreError) as exc:
            self._delete_quietly(done)
            raise OSError(f"S3 upload to {self._location}: {exc}") from exc

    def _delete(self, paths: list[str]) -> None:
        delete_objects(self._client, self._location, paths)

    def _delete_quietly(self, paths: list[str]) -> None:
        # What stays is an orphan: no commit names it; compact's retention removes it.
        if paths:
            with contextlib.suppress(OSError):
                self._delete(paths)
