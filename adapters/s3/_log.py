"""``S3LandingLog``: the LandingLog port on an object store.

Layout as on a disk: ``{prefix}/_shoal/log/{version:020d}.json`` (commits) and
``{version:020d}.checkpoint.json``. A commit is created with ``PutObject`` and
``If-None-Match: *``: the store refuses it (412, or 409 while another conditional write of
the key is in flight) when the key exists, so of two writers racing for a version one wins
(AWS S3 since 2024, MinIO, Ceph RGW, R2 and GCS honour the header; a store that ignores it
would let a second writer overwrite a commit: do not use one). A PUT is atomic: readers
see the whole commit or none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import TypeAdapter

from adapters._lifecycle import Lifecycle
from adapters.s3._client import S3Location, call, list_objects
from core.table import Commit, TableState

__all__ = ["S3LandingLog"]

_LOG = "_shoal/log/"
_COMMIT = re.compile(r"(\d{20})\.json$")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.json$")
_COMMIT_CODEC: TypeAdapter[Commit] = TypeAdapter(Commit)
_STATE_CODEC: TypeAdapter[TableState] = TypeAdapter(TableState)
_EXISTS = {"PreconditionFailed", "ConditionalRequestConflict"}


class S3LandingLog(Lifecycle):
    """``client``: a boto3 S3 client (``s3_client``). Storage errors raise ``OSError``."""

    def __init__(self, client: Any, location: S3Location) -> None:
        self._client = client
        self._location = location
        self._folder = location.key(_LOG)

    async def commits(self, after: int) -> Sequence[Commit]:
        return await anyio.to_thread.run_sync(self._commits, after)

    async def append(self, commit: Commit) -> bool:
        return await anyio.to_thread.run_sync(self._append, commit)

    async def checkpoint(self) -> TableState | None:
        return await anyio.to_thread.run_sync(self._checkpoint)

    async def save_checkpoint(self, state: TableState) -> None:
        await anyio.to_thread.run_sync(
            self._put, _checkpoint_name(state.version), _STATE_CODEC.dump_json(state)
        )

    # -- in a worker thread --------------------------------------------------------------

    def _keys(self, start_after: str = "") -> list[str]:
        after = self._folder + start_after if start_after else ""
        listed = list_objects(self._client, self._location.bucket, self._folder, start_after=after)
        return [item["Key"] for item in listed]

    def _commits(self, after: int) -> list[Commit]:
        found: list[Commit] = []
        expected = after + 1
        for key in self._keys(start_after=f"{after:020d}.json"):
            match = _COMMIT.search(key)
            if match is None or key != self._folder + match.group(0):
                continue
            version = int(match.group(1))
            if version != expected:
                break
            data = self._get(key)
            if data is None:  # removed after a checkpoint meanwhile
                break
            found.append(_COMMIT_CODEC.validate_json(data))
            expected += 1
        return found

    def _append(self, commit: Commit) -> bool:
        try:
            self._client.put_object(
                Bucket=self._location.bucket,
                Key=self._folder + f"{commit.version:020d}.json",
                Body=_COMMIT_CODEC.dump_json(commit),
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _EXISTS:
                return False
            raise OSError(f"S3 refused commit {commit.version}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"S3 did not confirm commit {commit.version}: {exc}") from exc
        return True

    def _checkpoint(self) -> TableState | None:
        versions = sorted(int(m.group(1)) for key in self._keys() if (m := _CHECKPOINT.search(key)))
        for version in reversed(versions):
            data = self._get(self._folder + _checkpoint_name(version))
            if data is not None:
                return _STATE_CODEC.validate_json(data)
        return None

    def _get(self, key: str) -> bytes | None:
        try:
            response = self._client.get_object(Bucket=self._location.bucket, Key=key)
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise OSError(f"S3 get {key}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"S3 get {key}: {exc}") from exc
        return body

    def _put(self, name: str, data: bytes) -> None:
        call(
            self._client.put_object,
            Bucket=self._location.bucket,
            Key=self._folder + name,
            Body=data,
        )


def _checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.json"
