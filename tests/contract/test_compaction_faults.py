"""Compaction never deletes the files its own committed version names: the errors that can
follow a stored commit, each reproduced against a real table (a local directory, MinIO),
then the table checked at the point of truth: it opens and reads, it holds the same rows,
and every active file is in storage.

- a post-commit checkpoint that fails (``_last_checkpoint`` is a directory; checkpoint
  interval 1): the compaction commits without hooks, so its commit stands, and the round's
  own checkpoint step fails alone;
- a conflict reported for an applied commit (MinIO behind a proxy that stores the commit's
  PUT and loses the answer: delta-rs re-sends it, gets 412, and says "concurrent");
- a timeout after an applied commit (the proxy holds the answer past the client's timeout);
- on a local disk the same two outcomes, the commit stored and then an error raised
  (a conflict's and any other), through a snapshot that fails after the real commit.

Then the way back for a table broken by an older shoal: ``repair`` undoes the compaction
whose file is gone, and ``missing`` lists what a broken table names.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from adapters.delta import DeltaTableUpkeep, TableSettings
from adapters.delta._maintenance import TableFolder, compact
from core.table import COMPACTION_APP_ID
from infra.local._testservers import ServerInfo
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.table_address import table_address
from services.common.upkeep import TableKeeper
from tests._landing_zones import ZoneUnderTest, landed_row
from tests.contract._s3 import fresh_bucket, settings_for
from tests.service._dropping_proxy import dropping_proxy

pytestmark = pytest.mark.anyio

DAY = "2026-11-21"
TARGET = 64 * 1024 * 1024
SMALL = 1024 * 1024
RECEIVED = datetime.fromisoformat(f"{DAY}T12:00:00+00:00").timestamp()


def _settings() -> TableSettings:
    return TableSettings(small_file_bytes=SMALL, target_file_bytes=TARGET)


async def _land(zone: LandingZone, batches: int, rows: int = 50) -> list[str]:
    """``batches`` handler commits of ``rows`` rows each on DAY: the message ids."""
    ids: list[str] = []
    for batch in range(batches):
        landed = [
            landed_row("L", batch % 3, batch * rows + n, received_at=RECEIVED) for n in range(rows)
        ]
        files = await zone.sink.write(landed)
        await zone.table.refresh()
        await zone.table.commit(files, {f"L#{batch % 3}": batch + 1})
        ids += [row.envelope.message_id for row in landed]
    return ids


def _assert_whole(zone: ZoneUnderTest, ids: list[str]) -> None:
    """The table opens and reads, holds ``ids`` once each, and storage holds every file its
    newest version names."""
    assert sorted(zone.message_ids()) == sorted(ids)
    active = set(pa.table(zone.table().get_add_actions(flatten=True)).column("path").to_pylist())
    assert active <= zone.stored(), f"active files missing from storage: {active - zone.stored()}"


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[tuple[ZoneUnderTest, LandingZone]]:
    zone = ZoneUnderTest(str(tmp_path / "zone"))
    async with open_landing_zone(zone.location, table=_settings()) as opened:
        yield zone, opened


async def test_a_failing_post_commit_checkpoint_leaves_the_compaction_standing(
    local: tuple[ZoneUnderTest, LandingZone], caplog: pytest.LogCaptureFixture
) -> None:
    """The reviewer's reproduction: checkpoint interval 1 and a directory where
    ``_last_checkpoint`` goes. Before, the post-commit checkpoint failed after the commit
    was stored, and compaction deleted the file the new version names."""
    zone, opened = local
    ids = await _land(opened, 6)
    table = zone.table()
    await anyio.to_thread.run_sync(
        lambda: table.alter.set_table_properties({"delta.checkpointInterval": "1"})
    )
    last_checkpoint = Path(zone.location) / "_delta_log" / "_last_checkpoint"
    last_checkpoint.unlink(missing_ok=True)
    last_checkpoint.mkdir()
    keeper = TableKeeper(opened.upkeep, _settings(), location=zone.location)

    with caplog.at_level(logging.WARNING, logger="shoal.table"):
        await keeper.round()

    compaction = keeper.last_compaction
    assert compaction is not None and compaction.files_removed == 6
    assert not compaction.rows_lost
    assert keeper.last_error is not None and "checkpoint failed" in keeper.last_error[1]
    _assert_whole(zone, ids)
    assert (await opened.upkeep.missing())[1] == []


@pytest.mark.parametrize("error", ["conflict", "storage"])
async def test_an_error_after_the_stored_commit_keeps_its_files(
    local: tuple[ZoneUnderTest, LandingZone], error: str
) -> None:
    """delta-rs stores the compaction's commit and then raises (a lost answer re-sent and
    refused as concurrent, or any other error): the table read back shows the commit is
    the compaction's own, so it stands and nothing it names is deleted."""
    zone, opened = local
    ids = await _land(opened, 5)
    folder = TableFolder(opened.address.uri, None)
    failing = _StoredThenFailing(opened.address.uri, error)

    answer = await anyio.to_thread.run_sync(compact, folder, failing, [DAY], TARGET)

    assert answer["removed"] == 5 and answer["added"] == 1 and not answer["refused"]
    assert "though the commit answered" in answer["warning"]
    _assert_whole(zone, ids)
    assert zone.table().transaction_version(COMPACTION_APP_ID) == 1


@pytest.mark.parametrize("late", [0.0, 3.0], ids=["answer-lost", "answer-past-timeout"])
async def test_on_s3_a_commit_whose_answer_never_came_stands(
    minio_server: ServerInfo, late: float
) -> None:
    """MinIO behind a proxy that stores the compaction's commit and loses its answer, at
    once or after the client's 1 s timeout: delta-rs re-sends the PUT, is refused (412),
    and reports a conflict, or reports the timeout. Before, compaction took either for
    "nothing landed" and deleted the file the stored version names."""
    client, location = fresh_bucket(minio_server)
    zone = ZoneUnderTest(str(location), settings_for(minio_server), client)
    endpoint = urlsplit(minio_server.url)
    assert endpoint.hostname is not None and endpoint.port is not None and zone.s3 is not None
    async with open_landing_zone(zone.location, s3=zone.s3, table=_settings()) as opened:
        ids = await _land(opened, 5)
    async with dropping_proxy(endpoint.hostname, endpoint.port) as proxy:
        through = zone.s3.model_copy(
            update={"endpoint_url": proxy.endpoint_url, "request_timeout": 1.0}
        )
        address = table_address(zone.location, through)
        upkeep = DeltaTableUpkeep(address.uri, address.storage_options)
        await proxy.arm(late)

        removed, added = await upkeep.compact([DAY], TARGET)

    assert proxy.dropped.is_set(), f"no answer was lost: {proxy.answers}"
    assert (removed, added) == (5, 1)
    _assert_whole(zone, ids)
    assert zone.table().transaction_version(COMPACTION_APP_ID) == 1


async def test_repair_restores_what_a_broken_compaction_removed(
    local: tuple[ZoneUnderTest, LandingZone],
) -> None:
    """A table an older shoal broke (its compaction's file deleted after the commit): the
    check names the missing file, the repair undoes that version, and the table reads
    every row again; a second repair of it is refused with nothing changed."""
    zone, opened = local
    ids = await _land(opened, 4)
    assert await opened.upkeep.compact([DAY], TARGET) == (4, 1)
    broken_at = zone.table().version()
    (compacted,) = (p for p in zone.stored() if "compacted-" in p)
    (Path(zone.location) / compacted).unlink()  # what the old compact() did after an error
    keeper = TableKeeper(opened.upkeep, _settings(), location=zone.location)

    assert await keeper.missing() == (broken_at, [compacted])
    restored, dropped = await keeper.repair(broken_at)

    assert len(restored) == 4 and dropped == [compacted]
    _assert_whole(zone, ids)
    assert await keeper.missing() == (broken_at + 1, [])
    with pytest.raises(ValueError, match="a later version removed"):
        await keeper.repair(broken_at)
    with pytest.raises(ValueError, match="changed data"):
        await keeper.repair(1)  # a handler's append: undoing it would drop landed rows
    assert sorted(zone.message_ids()) == sorted(ids)


async def test_repair_refuses_when_the_removed_files_were_vacuumed(
    local: tuple[ZoneUnderTest, LandingZone],
) -> None:
    zone, opened = local
    await _land(opened, 3)
    await opened.upkeep.compact([DAY], TARGET)
    version = zone.table().version()
    for path in zone.stored():
        if "compacted-" not in path and not path.startswith("_delta_log/"):
            (Path(zone.location) / path).unlink()
    before = zone.table().version()

    with pytest.raises(ValueError, match="gone from storage"):
        await opened.upkeep.repair(version)

    assert zone.table().version() == before, "nothing committed"


async def test_vacuum_refuses_a_table_with_another_table_inside(
    local: tuple[ZoneUnderTest, LandingZone],
) -> None:
    """delta-rs hides only the top-level ``_`` and ``.`` folders from a full vacuum: a
    table nested in another's folder (a broadcast handler's, once) would lose its files."""
    zone, opened = local
    await _land(opened, 2)
    inner = ZoneUnderTest(str(Path(zone.location) / "h1"))
    async with open_landing_zone(inner.location, table=_settings()) as nested:
        inner_ids = await _land(nested, 2)

    with pytest.raises(ValueError, match=r"other Delta table\(s\) live inside"):
        await opened.upkeep.vacuum(0, enforce=False)

    assert sorted(inner.message_ids()) == sorted(inner_ids)
    shutil.rmtree(inner.location)
    assert await opened.upkeep.vacuum(0, enforce=False) == []


class _StoredThenFailing(DeltaTable):
    """A snapshot whose commit is stored, then raises ``error``: what delta-rs does when a
    post-commit step fails, or when a lost answer is re-sent and refused."""

    def __init__(self, uri: str, error: str) -> None:
        super().__init__(uri)
        self._error = error

    def create_write_transaction(self, *args: Any, **kwargs: Any) -> None:
        super().create_write_transaction(*args, **kwargs)
        if self._error == "conflict":
            raise CommitFailedError("Concurrent transaction failed.")
        raise OSError("the store answered 500 Internal Server Error")
