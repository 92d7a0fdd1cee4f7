"""``S3ZoneFiles``: the ZoneFiles port on an object store.

``modified`` is the object's ``LastModified`` (the store's clock, to the second). An
object store cannot change that time in place: ``stamp`` copies each object onto itself
(``CopyObject`` with new metadata, server side), which S3 and MinIO date anew.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
from botocore.exceptions import BotoCoreError, ClientError

from adapters._lifecycle import Lifecycle
from adapters.s3._client import S3Location, call, delete_objects, list_objects
from core.table import StoredFile, in_date_folder

__all__ = ["S3ZoneFiles"]

_MISSING = {"NoSuchKey", "404"}


class S3ZoneFiles(Lifecycle):
    """``client``: a boto3 S3 client (``s3_client``)."""

    def __init__(self, client: Any, location: S3Location) -> None:
        self._client = client
        self._location = location

    async def listing(self) -> Sequence[StoredFile]:
        return await anyio.to_thread.run_sync(self._listing)

    async def read(self, path: str) -> bytes:
        return await anyio.to_thread.run_sync(self._read, path)

    async def stamp(self, paths: Sequence[str]) -> None:
        await anyio.to_thread.run_sync(self._stamp, list(paths))

    async def delete(self, paths: Sequence[str]) -> None:
        await anyio.to_thread.run_sync(self._delete, list(paths))

    # -- in a worker thread --------------------------------------------------------------

    def _listing(self) -> list[StoredFile]:
        where = self._location
        found = []
        for item in list_objects(self._client, where.bucket, where.key("date=")):
            path = where.relative(item["Key"])
            if in_date_folder(path):
                found.append(StoredFile(path, item["Size"], item["LastModified"].timestamp()))
        return found

    def _read(self, path: str) -> bytes:
        key = self._location.key(path)
        try:
            response = self._client.get_object(Bucket=self._location.bucket, Key=key)
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                raise FileNotFoundError(f"no object {self._location}/{path}") from exc
            raise OSError(f"S3 get {key}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"S3 get {key}: {exc}") from exc
        return body

    def _stamp(self, paths: list[str]) -> None:
        bucket = self._location.bucket
        for path in paths:
            key = self._location.key(path)
            call(
                self._client.copy_object,
                Bucket=bucket,
                Key=key,
                CopySource={"Bucket": bucket, "Key": key},
                MetadataDirective="REPLACE",  # a copy onto itself must change something
                Metadata={"shoal-stamped": f"{time.time():.3f}"},
            )

    def _delete(self, paths: list[str]) -> None:
        delete_objects(self._client, self._location, paths)
