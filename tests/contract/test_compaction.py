"""``compact`` (``shoal analytics compact``) on both landing zones, a directory and
``s3://`` on MinIO: the swap keeps every row exactly once, orphans go after the retention,
committed files never do, and rows that do not add up change nothing. Spark's audit of a
compacted zone, readers racing compaction and two compactors at once: tests/spark."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adapters.parquet import LANDED_SCHEMA, to_table
from adapters.s3 import S3Settings
from core.messages import LandedRow
from core.table import LandedFile, TableState
from services.cli._compact import Compaction, DayCompaction, compact
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.table import LandingTable
from tests.contract._s3 import fresh_bucket, settings_for
from tests.contract.test_parquet_sink import DAY1, DAY2, row

pytestmark = pytest.mark.anyio

CLOSED = "2026-11-21"
TODAY = date(2026, 11, 22)
HOUR = 3600.0
BATCH = 50


@dataclass
class Place:
    location: str | Path
    s3: S3Settings | None

    def open(self) -> AbstractAsyncContextManager[LandingZone]:
        return open_landing_zone(self.location, s3=self.s3)

    async def compact(
        self, *, target_rows: int, retention: float, clock_ahead: float = 0.0
    ) -> Compaction:
        """``compact`` as if run ``clock_ahead`` seconds from now."""
        return await compact(
            self.location,
            today=TODAY,
            target_rows=target_rows,
            retention=retention,
            s3=self.s3,
            clock=lambda: time.time() + clock_ahead,
        )


@pytest.fixture(params=["local", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":
        return Place(tmp_path, None)
    server = request.getfixturevalue("minio_server")
    _, location = fresh_bucket(server)
    return Place(str(location), settings_for(server))


def closed_rows(count: int) -> list[LandedRow]:
    return [row(n, partition=n % 7, received_at=DAY1 - n) for n in range(1, count + 1)]


async def land(zone: LandingZone, rows: Sequence[LandedRow]) -> list[LandedFile]:
    """Write and commit ``rows`` in batches of ``BATCH``, a commit each, as handlers do."""
    table = LandingTable(zone.log, "tests")
    await table.refresh()
    landed: list[LandedFile] = []
    for start in range(0, len(rows), BATCH):
        files = await zone.sink.write(rows[start : start + BATCH])
        assert await table.commit(added=files)
        landed.extend(files)
    return landed


async def state_of(zone: LandingZone) -> TableState:
    return await LandingTable(zone.log, "reader").refresh()


async def message_ids(zone: LandingZone, state: TableState) -> Counter[str]:
    ids: Counter[str] = Counter()
    for path in state.files:
        data = pq.read_table(pa.BufferReader(await zone.files.read(path)))
        assert data.schema.remove_metadata() == LANDED_SCHEMA
        ids.update(data.column("message_id").to_pylist())
    return ids


async def stored(zone: LandingZone) -> set[str]:
    return {f.path for f in await zone.files.listing()}


async def test_compaction_swaps_a_closed_day_and_deletes_unnamed_files_after_the_retention(
    place: Place,
) -> None:
    async with place.open() as zone:
        small = await land(zone, closed_rows(600))  # 12 files of 50 rows
        today = await land(zone, [row(n, received_at=DAY2) for n in range(1_000, 1_100)])
        orphan = await zone.sink.write([row(5_000), row(5_001)])  # a writer that crashed
        before = await state_of(zone)
        ids_before = await message_ids(zone, before)
    assert sum(ids_before.values()) == 700 and set(ids_before.values()) == {1}

    result = await place.compact(target_rows=250, retention=HOUR)

    assert result.ok
    assert result.days == (DayCompaction(CLOSED, "compacted", 12, 3, 600),)
    assert result.version_after == before.version + 1
    # younger than the retention: the orphan and the files compacted away stay for now
    assert result.garbage is not None
    assert (result.garbage.deleted, result.garbage.kept) == ((), 1 + 12)
    async with place.open() as zone:
        after = await state_of(zone)
        merged = {p: f for p, f in after.files.items() if p.startswith(f"date={CLOSED}/")}
        assert sorted(f.rows for f in merged.values()) == [100, 250, 250]
        assert not merged.keys() & {f.path for f in small}
        assert {f.path for f in today} <= after.files.keys()  # today is not touched
        assert await message_ids(zone, after) == ids_before
        assert await stored(zone) == {*after.files, *(f.path for f in small), orphan[0].path}

    # Two hours on, as it were: what the table does not name goes; nothing it names does.
    again = await place.compact(target_rows=250, retention=HOUR, clock_ahead=2 * HOUR)
    assert [d.status for d in again.days] == ["skipped"]
    assert again.version_after == after.version
    assert again.garbage is not None
    assert sorted(again.garbage.deleted) == sorted([*(f.path for f in small), orphan[0].path])
    assert again.garbage.kept == 0
    async with place.open() as zone:
        assert await stored(zone) == set(after.files)
        assert await message_ids(zone, await state_of(zone)) == ids_before


async def test_rows_that_do_not_add_up_change_nothing(place: Place) -> None:
    async with place.open() as zone:
        table = LandingTable(zone.log, "tests")
        await table.refresh()
        files = [await zone.sink.write(closed_rows(200)[n::4]) for n in range(4)]
        [a], [b], [c], [d] = files
        assert await table.commit(added=[a, b, replace(c, rows=c.rows - 1), d])
        before = await state_of(zone)
        listed = await stored(zone)

    result = await place.compact(target_rows=1_000, retention=0.0)

    assert not result.ok and result.garbage is None
    [day] = result.days
    assert day.status == "mismatch" and c.path in day.note
    async with place.open() as zone:
        assert await state_of(zone) == before
        assert await stored(zone) == listed


async def test_a_committed_file_that_is_gone_stops_the_run(place: Place) -> None:
    async with place.open() as zone:
        files = await land(zone, closed_rows(150))
        await zone.files.delete([files[1].path])
        before = await state_of(zone)

    result = await place.compact(target_rows=1_000, retention=0.0)

    [day] = result.days
    assert day.status == "mismatch" and f"{files[1].path} is missing" in day.note
    async with place.open() as zone:
        assert await state_of(zone) == before
        assert await stored(zone) == {files[0].path, files[2].path}


async def test_write_table_lands_the_landed_schema_in_a_date_folder_only(place: Place) -> None:
    rows = to_table(closed_rows(100))
    async with place.open() as zone:
        with pytest.raises(ValueError, match="not the landed schema"):
            await zone.sink.write_table(CLOSED, rows.drop_columns(["payload"]), writer="c")
        with pytest.raises(ValueError, match="does not match format"):
            await zone.sink.write_table("../../etc", rows, writer="c")
        assert await stored(zone) == set()
        written = await zone.sink.write_table(CLOSED, rows, writer="compact/1")
        assert written.path.startswith(f"date={CLOSED}/compact_1-") and written.rows == 100
        assert pq.read_table(pa.BufferReader(await zone.files.read(written.path))).equals(rows)
        await zone.sink.discard([written])
        assert await stored(zone) == set()
