"""The Sink contract, against every sink: a local disk (``ParquetSink``) and an
S3-compatible store (``S3ParquetSink`` on MinIO). What only a disk has (hidden temporary
names, fsync, a writer killed mid-file) is in test_parquet_sink.py."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adapters.parquet import LANDED_SCHEMA, ParquetSettings, ParquetSink
from adapters.s3.sink import S3ParquetSink
from core.errors import OwnershipLostError
from core.ports import Sink
from tests.contract._s3 import fresh_bucket
from tests.contract.test_parquet_sink import DAY1, DAY2, as_dicts, row

pytestmark = pytest.mark.anyio


@dataclass
class Store:
    sink: Sink
    paths: Callable[[], set[str]]  # every data file, relative to the zone's root
    read: Callable[[str], pa.Table]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "local":
        yield Store(
            ParquetSink(ParquetSettings(data_dir=tmp_path)),
            lambda: {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet")},
            lambda path: pq.read_table(tmp_path / path),
        )
        return
    client, location = fresh_bucket(request.getfixturevalue("minio_server"))

    def paths() -> set[str]:
        listed = client.list_objects_v2(Bucket=location.bucket, Prefix=location.key(""))
        return {location.relative(o["Key"]) for o in listed.get("Contents", ())}

    def read(path: str) -> pa.Table:
        body: Any = client.get_object(Bucket=location.bucket, Key=location.key(path))["Body"]
        return pq.read_table(io.BytesIO(body.read()))

    yield Store(S3ParquetSink(client, location), paths, read)


async def test_written_files_hold_exactly_the_rows_one_file_per_date(store: Store) -> None:
    rows = [row(3, partition=9), row(1), row(2), row(4, received_at=DAY2), row(0)]
    files = await store.sink.write(rows)
    assert [(f.path.split("/")[0], f.rows) for f in files] == [
        ("date=2026-11-21", 4),
        ("date=2026-11-22", 1),
    ]
    assert store.paths() == {f.path for f in files}
    back = [store.read(f.path) for f in files]
    assert all(t.schema.remove_metadata() == LANDED_SCHEMA for t in back)
    day1 = back[0].to_pylist()
    assert [(r["partition"], r["project_id"], r["sequence"]) for r in day1] == sorted(
        (r["partition"], r["project_id"], r["sequence"]) for r in day1
    )
    got = sorted((r for t in back for r in t.to_pylist()), key=lambda d: d["message_id"])
    assert got == sorted(as_dicts(rows), key=lambda d: d["message_id"])
    assert await store.sink.write([]) == ()


async def test_nothing_is_written_when_ownership_is_lost(store: Store) -> None:
    with pytest.raises(OwnershipLostError):
        await store.sink.write([row(1), row(2, received_at=DAY1)], still_valid=lambda: False)
    assert store.paths() == set()


async def test_discard_removes_exactly_the_files_named(store: Store) -> None:
    kept = await store.sink.write([row(1), row(2, received_at=DAY2)])
    dropped = await store.sink.write([row(3), row(4, received_at=DAY2)])
    await store.sink.discard(dropped)
    await store.sink.discard(dropped)  # gone already: fine
    assert store.paths() == {f.path for f in kept}
