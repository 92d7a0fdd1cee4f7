"""``S3ParquetSink``: the Sink port on an object store, with the disk sink's layout
(``adapters._parquet_format.encode_files``) under ``s3://bucket/prefix``.

Each file is encoded in memory (at most the roll size, 64 MiB by default), then
``still_valid`` is asked, then it is uploaded, then ``still_valid`` is asked again (a
writer whose lease ran out, or that was cancelled, during the upload deletes what it
uploaded). An object appears whole or not at all when
its upload completes, and the store acknowledges only once it is durable (S3; MinIO
fsyncs): there is no temporary name to rename. An upload that fails leaves no object; one
whose answer was lost may have left one, which no commit names (an orphan that
the table's vacuum deletes after its retention).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread
import pyarrow as pa
from botocore.exceptions import BotoCoreError, ClientError

from adapters._lifecycle import Lifecycle
from adapters._parquet_format import EncodedFile, ParquetSettings, encode_files
from adapters.s3._location import S3Location
from adapters.s3.client import delete_objects
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
        encoded = await anyio.to_thread.run_sync(encode_files, list(rows), self._settings)
        if still_valid is not None and not still_valid():
            raise OwnershipLostError(
                f"{len(rows)} rows not uploaded: the writer no longer owns them"
            )
        try:
            await anyio.to_thread.run_sync(self._upload, encoded)
        except anyio.get_cancelled_exc_class():
            # Cancelled while uploading (a handler woken past its lease): leave no object
            # that nobody would commit or delete.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(
                    self._delete_quietly, [f.landed.path for f in encoded]
                )
            raise
        if still_valid is not None and not still_valid():
            await anyio.to_thread.run_sync(self._delete_quietly, [f.landed.path for f in encoded])
            raise OwnershipLostError(
                f"{len(rows)} rows uploaded and removed: the writer no longer owns them"
            )
        return tuple(file.landed for file in encoded)

    async def discard(self, files: Sequence[LandedFile]) -> None:
        if files:
            await anyio.to_thread.run_sync(self._delete, [f.path for f in files])

    # -- in a worker thread --------------------------------------------------------------

    def _upload(self, encoded: list[EncodedFile]) -> None:
        done: list[str] = []
        try:
            for file in encoded:
                self._client.upload_fileobj(
                    pa.BufferReader(file.data),
                    self._location.bucket,
                    self._location.key(file.landed.path),
                )
                done.append(file.landed.path)
        except (ClientError, BotoCoreError) as exc:
            self._delete_quietly(done)
            raise OSError(f"S3 upload to {self._location}: {exc}") from exc

    def _delete(self, paths: list[str]) -> None:
        delete_objects(self._client, self._location, paths)

    def _delete_quietly(self, paths: list[str]) -> None:
        # What stays is an orphan: no version names it; the table's vacuum removes it.
        if paths:
            with contextlib.suppress(OSError):
                self._delete(paths)
