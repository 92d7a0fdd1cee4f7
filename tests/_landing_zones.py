"""A landing zone for a test, in a local directory or on the session's MinIO (a fresh
bucket), and what the test reads of it at the point of truth: the Delta table read fresh,
the data files every version names, and the data files the storage holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from adapters.s3 import S3Location, S3Settings
from core.messages import Envelope, LandedRow
from core.model import Partition
from core.ports import LandedTable
from core.table import LandedFile, LogKey
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.table import read_landed
from services.common.table_address import table_address
from tests.contract._s3 import fresh_bucket, settings_for

__all__ = [
    "ZONE_KINDS",
    "PassThroughTable",
    "ZoneUnderTest",
    "ids_of",
    "landed_row",
    "zone_of_kind",
]

ZONE_KINDS = ("local", "s3")


class PassThroughTable:
    """A LandedTable handing every call to ``inner``: a test overrides what it watches."""

    def __init__(self, inner: LandedTable) -> None:
        self.inner = inner

    async def refresh(self) -> int:
        return await self.inner.refresh()

    def token(self, key: LogKey) -> int | None:
        return self.inner.token(key)

    async def settled(
        self, floors: Mapping[LogKey, int]
    ) -> Mapping[LogKey, Mapping[int, frozenset[str]]]:
        return await self.inner.settled(floors)

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        await self.inner.commit(files, tokens)

    async def holds(self, paths: Collection[str]) -> bool:
        return await self.inner.holds(paths)


@dataclass(frozen=True)
class ZoneUnderTest:
    location: str
    s3: S3Settings | None = None  # the store's own address (not a proxy's)
    client: Any = None  # a boto3 client of the store, for its listing

    def open(self, s3: S3Settings | None = None) -> AbstractAsyncContextManager[LandingZone]:
        """A writer's adapters; ``s3`` reaches the store another way (through a proxy)."""
        return open_landing_zone(self.location, s3=s3 or self.s3)

    def read(self) -> pa.Table:
        return read_landed(self.location, self.s3)

    def message_ids(self) -> list[str]:
        ids: list[str] = self.read().column("message_id").to_pylist()
        return ids

    def table(self, version: int | None = None) -> DeltaTable:
        address = table_address(self.location, self.s3)
        return DeltaTable(address.uri, version=version, storage_options=address.storage_options)

    def named(self) -> set[str]:
        """Every data file some version of the table adds."""
        newest = self.table().version()
        named: set[str] = set()
        for version in range(newest + 1):
            actions = pa.table(self.table(version).get_add_actions(flatten=True))
            named.update(actions.column("path").to_pylist())
        return named

    def stored(self) -> set[str]:
        """Every data file in the table's folder, named by a version or not."""
        if self.client is None:
            root = Path(self.location)
            return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}
        where = S3Location.parse(self.location)
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=where.bucket, Prefix=where.key("")
        )
        return {
            where.relative(o["Key"])
            for page in pages
            for o in page.get("Contents", ())
            if o["Key"].endswith(".parquet")
        }


def zone_of_kind(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> ZoneUnderTest:
    if kind == "local":
        return ZoneUnderTest(str(tmp_path / "zone"))
    server = request.getfixturevalue("minio_server")
    client, location = fresh_bucket(server)
    return ZoneUnderTest(str(location), settings_for(server), client)


def landed_row(
    log_id: str,
    partition: Partition,
    position: int,
    *,
    message_id: str | None = None,
    received_at: float | None = None,
) -> LandedRow:
    envelope = Envelope(
        message_id=message_id or uuid.uuid4().hex,
        project_id="proj",
        partition=partition,
        gateway_id="gw",
        sequence=position,
        received_at=time.time() if received_at is None else received_at,
        payload=b'{"n": 1}',
    )
    return LandedRow(envelope, 1, "h1", time.time(), log_id=log_id, position=position)


def ids_of(rows: Sequence[LandedRow]) -> list[str]:
    return [r.envelope.message_id for r in rows]
