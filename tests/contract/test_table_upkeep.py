"""The TableUpkeep contract against ``DeltaTableUpkeep``, on a local directory and on an
S3-compatible store (MinIO): health counts what the table holds; compaction merges a day's
small files and keeps every row and every app transaction, and a second one finds nothing;
of two compactions of one snapshot the table takes one, and the other leaves nothing (nor
do several at once land a row twice);
a checkpoint bounds the log; vacuum deletes a file no version names once older than the
retention, and never a file the table holds.

The table is written the way handlers write it: files from the zone's sink, added by
``DeltaLandedTable`` commits that set app transactions."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import anyio
import anyio.to_thread
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from adapters.delta import DeltaTableUpkeep, TableSettings
from adapters.delta._maintenance import TableFolder, compact
from adapters.s3 import S3Settings
from core.errors import CommitConflictError
from core.messages import Envelope, LandedRow
from core.table import COMPACTION_APP_ID, LandedFile, days_to_compact, transaction_app_id
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.table import read_landed
from tests.contract._s3 import fresh_bucket, settings_for

pytestmark = pytest.mark.anyio

DAY1 = "2026-11-21"
DAY2 = "2026-11-22"
LOGS = ("L#0", "L#1", "L#2")
TARGET = 64 * 1024 * 1024
SMALL = 1024 * 1024


@dataclass
class Zone:
    zone: LandingZone
    location: str | Path
    read: Callable[[], set[str]]  # the message ids the table's newest version holds
    data_files: Callable[[], set[str]]  # every *.parquet of the folder, relative paths
    log_listing: Callable[[], tuple[int, int]]  # files and bytes in _delta_log
    tokens: count[int]
    positions: count[int]
    s3: S3Settings | None = None

    @property
    def uri(self) -> str:
        return self.zone.address.uri

    def table(self) -> DeltaTable:
        return DeltaTable(self.uri, storage_options=self.zone.address.storage_options)

    async def land(
        self, n: int, day: str, log: str = LOGS[0], writer: LandingZone | None = None
    ) -> list[LandedFile]:
        """One handler commit of ``n`` rows received on ``day``, setting ``log``'s app
        transaction, by ``writer`` (the zone's own by default)."""
        writer = writer or self.zone
        received = datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC).timestamp()
        rows = []
        for _ in range(n):
            position = next(self.positions)
            envelope = Envelope(
                message_id=f"m{position}",
                project_id="proj",
                partition=int(log.rpartition("#")[2]),
                gateway_id="gw",
                sequence=position + 1,
                received_at=received,
                payload=b'{"n": 1}',
            )
            rows.append(LandedRow(envelope, 1, "h1", received, log.rpartition("#")[0], position))
        files = list(await writer.sink.write(rows))
        await writer.table.refresh()
        await writer.table.commit(files, {log: next(self.tokens)})
        return files

    def transactions(self) -> dict[str, int | None]:
        table = self.table()
        return {log: table.transaction_version(transaction_app_id(log)) for log in LOGS}

    async def orphan(self, day: str) -> str:
        """A file the sink wrote for a commit that never came: its path."""
        received = datetime.fromisoformat(day).replace(hour=1, tzinfo=UTC).timestamp()
        envelope = Envelope("orphan", "proj", 0, "gw", 1, received, b"{}")
        (written,) = await self.zone.sink.write([LandedRow(envelope, 1, "h0", received, "L", 0)])
        return written.path


def _settings() -> TableSettings:
    return TableSettings(small_file_bytes=SMALL, target_file_bytes=TARGET)


@pytest.fixture(params=["local", "s3"])
async def zone(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Zone]:
    location: str | Path
    if request.param == "local":
        location = tmp_path / "zone"
        s3 = None

        def data_files() -> set[str]:
            return {p.relative_to(location).as_posix() for p in Path(location).rglob("*.parquet")}

        def log_listing() -> tuple[int, int]:
            entries = [e for e in os.scandir(Path(location) / "_delta_log") if e.is_file()]
            return len(entries), sum(e.stat().st_size for e in entries)

    else:
        server = request.getfixturevalue("minio_server")
        client, where = fresh_bucket(server)
        location, s3 = f"s3://{where.bucket}/{where.prefix}", settings_for(server)

        def listing(prefix: str) -> list[tuple[str, int]]:
            found = client.list_objects_v2(Bucket=where.bucket, Prefix=where.key(prefix))
            return [(where.relative(o["Key"]), int(o["Size"])) for o in found.get("Contents", ())]

        def data_files() -> set[str]:
            return {key for key, _ in listing("") if key.endswith(".parquet")}

        def log_listing() -> tuple[int, int]:
            entries = listing("_delta_log/")
            return len(entries), sum(size for _, size in entries)

    async with open_landing_zone(location, s3=s3, table=_settings()) as opened:

        def read() -> set[str]:
            return {str(m) for m in read_landed(location, s3, columns=["message_id"])["message_id"]}

        yield Zone(opened, location, read, data_files, log_listing, count(1), count(), s3)


async def test_health_counts_files_bytes_rows_days_and_the_log(zone: Zone) -> None:
    small = [await zone.land(3, DAY1) for _ in range(3)]
    (big,) = await zone.land(40_000, DAY2, LOGS[1])
    threshold = big.size  # every file of DAY1 is below it, the one of DAY2 is not
    assert all(f.size < threshold for files in small for f in files)

    health = await zone.zone.upkeep.health(threshold)

    landed = [f for files in small for f in files] + [big]
    assert health.version == zone.table().version() == 4  # the creation, then 4 commits
    assert health.files == 4
    assert health.bytes == sum(f.size for f in landed)
    assert health.rows == 3 * 3 + 40_000
    assert [(d.day, d.files, d.small) for d in health.days] == [(DAY1, 3, 3), (DAY2, 1, 0)]
    assert (health.log_files, health.log_bytes) == zone.log_listing()
    assert health.log_files >= 5


async def test_compaction_merges_small_files_and_keeps_every_row_and_transaction(
    zone: Zone,
) -> None:
    for n in range(6):
        await zone.land(5, DAY1, LOGS[n % 3])
    await zone.land(5, DAY2, LOGS[0])
    await zone.land(5, DAY2, LOGS[1])
    ids, tokens = zone.read(), zone.transactions()
    before = await zone.zone.upkeep.health(SMALL)
    assert [(d.day, d.files) for d in before.days] == [(DAY1, 6), (DAY2, 2)]

    removed, added = await zone.zone.upkeep.compact([DAY1], TARGET)

    assert (removed, added) == (6, 1)
    after = await zone.zone.upkeep.health(SMALL)
    assert after.version == before.version + 1
    assert [(d.day, d.files) for d in after.days] == [(DAY1, 1), (DAY2, 2)]  # DAY2 untouched
    assert after.rows == before.rows == len(ids) == 40
    assert zone.read() == ids
    assert zone.transactions() == tokens and all(t is not None for t in tokens.values())
    # the files compacted away stay in the folder (readers of older versions) until vacuumed
    assert len(zone.data_files()) == 6 + 2 + 1

    again = days_to_compact(after.days, "2026-11-27", open_day_files=50)
    assert again == [DAY2]  # DAY1 is one file now: nothing left to merge there
    assert await zone.zone.upkeep.compact([DAY1], TARGET) == (0, 0)
    assert (await zone.zone.upkeep.health(SMALL)).version == after.version


async def test_of_two_compactions_of_one_snapshot_the_table_takes_one(zone: Zone) -> None:
    """A leader paused mid-compaction resumes beside its successor's: both read the same
    snapshot. delta-rs's own OPTIMIZE commits both (every row then twice)."""
    for n in range(4):
        await zone.land(5, DAY1, LOGS[n % 3])
    ids = zone.read()
    first, second = zone.table(), zone.table()  # one version, read twice
    folder = TableFolder(zone.uri, zone.zone.address.storage_options)
    files_before = zone.data_files()

    taken = await anyio.to_thread.run_sync(compact, folder, first, [DAY1], TARGET)
    refused = await anyio.to_thread.run_sync(compact, folder, second, [DAY1], TARGET)

    assert taken == {"removed": 4, "added": 1, "refused": False}
    assert refused == {"removed": 0, "added": 0, "refused": True}
    rows = read_landed(zone.location, zone.s3, columns=["message_id"])["message_id"]
    assert sorted(str(m) for m in rows) == sorted(ids), "every row once"
    assert zone.table().transaction_version(COMPACTION_APP_ID) == 1
    assert len(zone.data_files() - files_before) == 1, "the refused one's file is gone"


async def test_compactions_at_once_land_no_row_twice(zone: Zone) -> None:
    for n in range(6):
        await zone.land(5, DAY1, LOGS[n % 3])
    ids = zone.read()
    upkeeps = [DeltaTableUpkeep(zone.uri, zone.zone.address.storage_options) for _ in range(3)]
    outcomes: list[tuple[int, int] | str] = []

    async def run(upkeep: DeltaTableUpkeep) -> None:
        try:
            outcomes.append(await upkeep.compact([DAY1], TARGET))
        except CommitConflictError as exc:
            outcomes.append(str(exc))

    async with anyio.create_task_group() as tg:
        for upkeep in upkeeps:
            tg.start_soon(run, upkeep)

    assert (6, 1) in outcomes, outcomes
    assert all(o in ((6, 1), (0, 0)) or "another compaction" in str(o) for o in outcomes)
    rows = read_landed(zone.location, zone.s3, columns=["message_id"])["message_id"]
    assert sorted(str(m) for m in rows) == sorted(ids), "every row once"
    assert (await zone.zone.upkeep.health(SMALL)).days[0].files == 1


async def _log_retention_of_one_second(zone: Zone) -> None:
    """The table's log retention down to a second, on a table created with the default
    (an object's age on a store cannot be set back: a second, waited for, ages the log)."""

    def alter() -> None:
        zone.table().alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 1 seconds"}
        )

    await anyio.to_thread.run_sync(alter)


async def test_a_checkpoint_leaves_the_log_bounded(zone: Zone) -> None:
    for n in range(12):
        await zone.land(2, DAY1, LOGS[n % 3])
    await _log_retention_of_one_second(zone)
    ids, tokens = zone.read(), zone.transactions()
    grown = await zone.zone.upkeep.health(SMALL)
    assert grown.log_files >= 14  # a commit file per version, nothing cleaned yet
    await anyio.sleep(1.2)  # every log entry is older than the retention now

    removed = await zone.zone.upkeep.checkpoint()

    bounded = await zone.zone.upkeep.health(SMALL)
    assert removed == grown.log_files - bounded.log_files + 2  # + checkpoint, _last_checkpoint
    assert bounded.log_files <= 3  # the newest commit, its checkpoint, _last_checkpoint
    assert bounded.version == grown.version
    # what the removed commits set lives on in the checkpoint
    assert zone.read() == ids
    assert zone.transactions() == tokens

    await zone.land(2, DAY2, LOGS[0])  # the table goes on from the checkpoint
    assert len(zone.read()) == len(ids) + 2


async def test_a_writer_leaves_cleaning_the_log_to_the_checkpoint(zone: Zone) -> None:
    """delta-rs would clean the expired log after every commit, listing all of it each
    time; only the upkeep round cleans."""
    for n in range(6):
        await zone.land(2, DAY1, LOGS[n % 3])
    await zone.zone.upkeep.checkpoint()  # nothing is old enough to clean yet
    await _log_retention_of_one_second(zone)
    await anyio.sleep(1.2)  # every log entry before the checkpoint is expired now
    expired, _ = zone.log_listing()

    await zone.land(2, DAY1, LOGS[0])

    assert zone.log_listing()[0] == expired + 1, "the commit added itself and cleaned nothing"
    assert await zone.zone.upkeep.checkpoint() > 0
    assert zone.log_listing()[0] <= 3


async def test_a_writer_comes_back_to_a_log_cleaned_past_its_snapshot(zone: Zone) -> None:
    """A writer idle while another one's commits were checkpointed and cleaned away finds
    the newest version and the tokens those commits set."""
    async with open_landing_zone(zone.location, s3=zone.s3, table=_settings()) as idle:
        await zone.land(2, DAY1, LOGS[0])
        assert await idle.table.refresh() == 1
        for n in range(5):
            await zone.land(2, DAY1, LOGS[n % 3])
        await _log_retention_of_one_second(zone)
        await anyio.sleep(1.2)
        assert await zone.zone.upkeep.checkpoint() > 0  # versions 1 to 5 are gone

        assert await idle.table.refresh() == zone.table().version() == 7
        assert {log: idle.table.token(log) for log in LOGS} == zone.transactions()
        await zone.land(2, DAY2, LOGS[1], writer=idle)
        assert await idle.table.refresh() == 8
        assert idle.table.token(LOGS[1]) == zone.transactions()[LOGS[1]]


async def test_a_checkpoint_forgets_files_removed_before_the_vacuum_retention(
    tmp_path: Path,
) -> None:
    """Files compacted away stay in the checkpoints (rewritten every 100 commits) only as
    long as the vacuum's retention, not Delta's default of a week."""
    location = tmp_path / "zone"
    settings = TableSettings(
        small_file_bytes=SMALL,
        target_file_bytes=TARGET,
        log_retention_hours=1 / 7200,
        vacuum_retention_hours=1 / 3600,
    )
    async with open_landing_zone(location, table=settings) as opened:
        zone = Zone(opened, location, set, set, lambda: (0, 0), count(1), count())
        for _ in range(6):
            await zone.land(2, DAY1)
        assert await opened.upkeep.compact([DAY1], TARGET) == (6, 1)
        await anyio.sleep(1.2)  # the six removals are older than the retention now

        await opened.upkeep.checkpoint()

        log = location / "_delta_log"
        version = json.loads((log / "_last_checkpoint").read_text())["version"]
        checkpoint = pq.read_table(log / f"{version:020}.checkpoint.parquet")
        assert checkpoint.column("add").drop_null().length() == 1
        assert checkpoint.column("remove").drop_null().length() == 0


async def test_a_call_that_fails_is_an_os_error_with_its_cause(tmp_path: Path) -> None:
    """Every call runs in a child process; its failure comes back as the caller's error."""
    upkeep = DeltaTableUpkeep(str(tmp_path / "no-table"))
    assert not await upkeep.exists()
    with pytest.raises(OSError, match=r"compact failed \(exit 1\): TableNotFoundError"):
        await upkeep.compact([DAY1], TARGET)
    with pytest.raises(OSError, match=r"health failed \(exit 1\): TableNotFoundError"):
        await upkeep.health(SMALL)
    assert not (tmp_path / "no-table").exists(), "nothing created"


async def test_vacuum_deletes_only_files_no_version_names(zone: Zone) -> None:
    committed = [f.path for _ in range(3) for f in await zone.land(4, DAY1)]
    orphan = await zone.orphan(DAY1)
    ids = zone.read()
    assert zone.data_files() == {*committed, orphan}

    assert (
        await zone.zone.upkeep.vacuum(1, enforce=False) == []
    )  # the orphan is younger than an hour
    assert await zone.zone.upkeep.vacuum(0, dry_run=True, enforce=False) == [orphan]
    assert zone.data_files() == {*committed, orphan}  # a dry run deletes nothing

    assert await zone.zone.upkeep.vacuum(0, enforce=False) == [orphan]

    assert zone.data_files() == set(committed)
    assert zone.read() == ids
    assert await zone.zone.upkeep.vacuum(0, enforce=False) == []


async def test_vacuum_deletes_files_compacted_away(zone: Zone) -> None:
    compacted_away = {f.path for _ in range(3) for f in await zone.land(4, DAY1)}
    await zone.zone.upkeep.compact([DAY1], TARGET)
    ids = zone.read()

    assert set(await zone.zone.upkeep.vacuum(0, enforce=False)) == compacted_away

    (merged,) = zone.data_files()
    assert merged not in compacted_away
    assert zone.read() == ids


async def test_vacuum_keeps_an_unnamed_file_younger_than_the_retention(tmp_path: Path) -> None:
    """On a disk a file's age can be set back: only the one older than the retention goes."""
    location = tmp_path / "zone"
    async with open_landing_zone(location, table=_settings()) as opened:
        zone = Zone(opened, location, set, set, lambda: (0, 0), count(1), count())
        committed = await zone.land(4, DAY1)
        old, young = await zone.orphan(DAY1), await zone.orphan(DAY2)
        two_hours_ago = time.time() - 7200
        os.utime(location / old, (two_hours_ago, two_hours_ago))
        os.utime(location / committed[0].path, (two_hours_ago, two_hours_ago))

        assert await opened.upkeep.vacuum(1, enforce=False) == [old]

        assert not (location / old).exists()
        assert (location / young).exists()
        assert (location / committed[0].path).exists()


async def test_vacuum_refuses_a_retention_a_paused_writer_could_outlast(zone: Zone) -> None:
    """At or below the table's log retention (30 h by default) a writer paused that long
    could commit files the vacuum deleted: refused, nothing deleted."""
    await zone.land(2, DAY1)
    orphan = await zone.orphan(DAY1)

    with pytest.raises(ValueError, match=r"not above the table's log retention \(30 h"):
        await zone.zone.upkeep.vacuum(1)

    assert orphan in zone.data_files()
