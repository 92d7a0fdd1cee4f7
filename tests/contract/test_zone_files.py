"""The ZoneFiles contract, against a local disk (``LocalZoneFiles``) and an S3-compatible
store (``S3ZoneFiles`` on MinIO): what the ``date=`` folders hold, read, stamped and
deleted, whatever the table says of it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from adapters.parquet import LocalZoneFiles
from adapters.s3 import S3ZoneFiles
from core.ports import ZoneFiles
from tests.contract._s3 import fresh_bucket

pytestmark = pytest.mark.anyio

DATA = "date=2026-11-21/h1-aaaa.parquet"
HIDDEN = "date=2026-11-21/.h1-bbbb.tmp"
OTHER_DAY = "date=2026-11-22/h2-cccc.parquet"
NOT_LISTED = (
    "_shoal/log/00000000000000000001.json",  # the commit log
    "date=2026-11-21/sub/h3-dddd.parquet",  # not directly in a date folder
    "date=2026-11-21/notes.txt",  # neither data nor a sink's temporary file
    "elsewhere/h4-eeee.parquet",  # not in a date folder
)


@dataclass
class Zone:
    files: ZoneFiles
    put: Callable[[str, bytes], None]  # any path relative to the zone's root


@pytest.fixture(params=["local", "s3"])
def zone(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Zone]:
    if request.param == "local":

        def put_file(path: str, data: bytes) -> None:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(data)

        yield Zone(LocalZoneFiles(tmp_path), put_file)
        return
    client, location = fresh_bucket(request.getfixturevalue("minio_server"))

    def put_object(path: str, data: bytes) -> None:
        client.put_object(Bucket=location.bucket, Key=location.key(path), Body=data)

    yield Zone(S3ZoneFiles(client, location), put_object)


async def test_the_listing_is_the_date_folders_data_and_temporary_files(zone: Zone) -> None:
    began = time.time()
    contents = {DATA: b"x" * 10, HIDDEN: b"yy", OTHER_DAY: b"z" * 3}
    for path, data in {**contents, **dict.fromkeys(NOT_LISTED, b"-")}.items():
        zone.put(path, data)
    listed = await zone.files.listing()
    assert {f.path: f.size for f in listed} == {p: len(d) for p, d in contents.items()}
    # the store's clock (S3: to the second; here on this machine) around the writes
    assert all(int(began) - 1 <= f.modified <= time.time() + 1 for f in listed)


async def test_an_empty_zone_lists_nothing(zone: Zone) -> None:
    assert await zone.files.listing() == []


async def test_read_returns_the_whole_file_and_a_missing_one_raises(zone: Zone) -> None:
    zone.put(DATA, bytes(range(256)) * 100)
    assert await zone.files.read(DATA) == bytes(range(256)) * 100
    with pytest.raises(FileNotFoundError):
        await zone.files.read(OTHER_DAY)


async def test_stamping_dates_a_file_anew_and_keeps_its_content(zone: Zone) -> None:
    zone.put(DATA, b"content")
    zone.put(OTHER_DAY, b"other")
    [first, other] = sorted(await zone.files.listing(), key=lambda f: f.path)
    # An object store dates to the second: let the clock pass the next whole second.
    await anyio.sleep(max(0.0, int(first.modified) + 1.1 - time.time()))
    await zone.files.stamp([DATA])
    [stamped, untouched] = sorted(await zone.files.listing(), key=lambda f: f.path)
    assert stamped.modified > first.modified
    assert untouched == other
    assert await zone.files.read(DATA) == b"content"


async def test_delete_removes_the_files_and_a_missing_one_is_no_error(zone: Zone) -> None:
    for path in (DATA, HIDDEN, OTHER_DAY):
        zone.put(path, b"x")
    await zone.files.delete([DATA, HIDDEN, "date=2026-11-21/never-there.parquet"])
    assert [f.path for f in await zone.files.listing()] == [OTHER_DAY]
    await zone.files.delete([DATA])
    await zone.files.delete([])
    with pytest.raises(FileNotFoundError):
        await zone.files.read(DATA)


async def test_a_listing_and_a_delete_of_more_than_a_page(zone: Zone) -> None:
    """More than S3's 1,000 keys per listed page and per DeleteObjects call."""
    paths = [f"date=2026-11-21/h-{n:05d}.parquet" for n in range(1_203)]
    for path in paths:
        zone.put(path, b"x")
    assert sorted(f.path for f in await zone.files.listing()) == paths
    await zone.files.delete(paths[:1_101])
    assert sorted(f.path for f in await zone.files.listing()) == paths[1_101:]
