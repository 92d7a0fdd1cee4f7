"""The LandedTable contract, run against ``DeltaLandedTable`` in a local directory and on
MinIO, each writer opened as a handler opens it (``open_landing_zone``): its rows written
by the zone's sink, committed by its table, read back through the table read fresh."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

from adapters.delta.table import DeltaLandedTable
from core.errors import CommitConflictError
from core.messages import LandedRow
from core.table import log_key
from services.common.landing_zone import LandingZone
from services.common.table import landed_table
from tests._landing_zones import ZONE_KINDS, ZoneUnderTest, ids_of, landed_row, zone_of_kind

pytestmark = pytest.mark.anyio

LOG = "nats:S@t1"
K1 = log_key(LOG, 1)
K2 = log_key(LOG, 2)
K11 = log_key(LOG, 11)  # a partition whose number starts like another's
RECREATED = log_key("nats:S@t2", 1)  # the same partition of a recreated stream
HASHED = log_key("kafka:c#1/it's", 1)  # a log id holding the separator and a quote
DAY = 86_400.0
BIG_TOKEN = 2**62


@pytest.fixture(params=ZONE_KINDS)
def zone(request: pytest.FixtureRequest, tmp_path: Path) -> ZoneUnderTest:
    return zone_of_kind(request.param, tmp_path, request)


@pytest.fixture
async def writers(zone: ZoneUnderTest) -> AsyncIterator[tuple[LandingZone, LandingZone]]:
    """Two writers of the one zone, each with its own adapters."""
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(zone.open())
        second = await stack.enter_async_context(zone.open())
        yield first, second


def rows_at(key: str, positions: range | list[int], *, days_ago: float = 0.0) -> list[LandedRow]:
    log_id, _, partition = key.rpartition("#")
    at = time.time() - days_ago * DAY
    return [landed_row(log_id, int(partition), p, received_at=at) for p in positions]


async def test_refresh_creates_the_table_once(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    first, second = writers
    assert landed_table(zone.location, zone.s3) is None
    assert await first.table.refresh() == 0
    assert await second.table.refresh() == 0, "a second writer finds the table, not a new one"
    assert landed_table(zone.location, zone.s3) is not None
    assert first.table.token(K1) is None
    assert await first.table.settled({K1: 0}) == {K1: {}}
    assert await first.table.holds([])
    assert zone.message_ids() == []


async def test_a_commit_adds_its_files_and_sets_its_tokens(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    writer, _ = writers
    await writer.table.refresh()
    rows = [*rows_at(K1, range(1, 6)), *rows_at(K2, range(1, 4), days_ago=1)]
    files = await writer.sink.write(rows)
    assert len(files) == 2, "one file per day"
    paths = [f.path for f in files]
    assert not await writer.table.holds(paths), "written is not committed"
    await writer.table.commit(files, {K1: BIG_TOKEN, K2: 5})
    assert await writer.table.refresh() == 1
    assert writer.table.token(K1) == BIG_TOKEN
    assert writer.table.token(K2) == 5
    assert writer.table.token(K11) is None
    assert await writer.table.holds(paths)
    assert sorted(zone.message_ids()) == sorted(ids_of(rows))


async def test_settled_is_the_committed_positions_at_or_above_each_floor(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    writer, _ = writers
    await writer.table.refresh()
    committed = [
        *rows_at(K1, range(1, 11)),
        *rows_at(K1, [12], days_ago=2),
        *rows_at(K2, [3, 7]),
        *rows_at(K11, [40]),
        *rows_at(RECREATED, [1, 2, 3]),
        *rows_at(HASHED, [8, 9]),
    ]
    await writer.table.commit(
        await writer.sink.write(committed),
        dict.fromkeys((K1, K2, K11, RECREATED, HASHED), 1),
    )
    uncommitted = await writer.sink.write(
        [*rows_at(K1, range(13, 16)), *rows_at(log_key(LOG, 3), [1, 2])]
    )
    assert {f.path for f in uncommitted} <= zone.stored(), "the orphans are in the folder"
    await writer.table.refresh()
    settled = await writer.table.settled({K1: 5, K2: 0, K11: 41, HASHED: 9, log_key(LOG, 3): 0})
    assert {key: set(at) for key, at in settled.items()} == {
        K1: {5, 6, 7, 8, 9, 10, 12},
        K2: {3, 7},
        K11: set(),
        HASHED: {9},
        log_key(LOG, 3): set(),
    }
    held = {(log_key(r.log_id, r.envelope.partition), r.position): r for r in committed}
    assert all(
        ids == {held[key, position].envelope.message_id}
        for key, at in settled.items()
        for position, ids in at.items()
    ), "each position with the message id of its row"
    assert await writer.table.settled({}) == {}


async def test_settled_names_every_message_a_reused_position_holds(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    """A log that handed position 2 out again (restored, re-created): both rows are there,
    and a writer must see both messages to settle each only for itself."""
    writer, _ = writers
    await writer.table.refresh()
    before, after = rows_at(K1, [1, 2]), rows_at(K1, [2])
    await writer.table.commit(await writer.sink.write(before), {K1: 1})
    await writer.table.refresh()
    await writer.table.commit(await writer.sink.write(after), {K1: 2})
    await writer.table.refresh()
    settled = await writer.table.settled({K1: 2})
    assert settled == {
        K1: {2: frozenset({before[1].envelope.message_id, after[0].envelope.message_id})}
    }


async def test_a_stale_snapshot_cannot_commit_a_log_another_commit_set_since(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    first, zombie = writers
    await first.table.refresh()
    await first.table.commit(await first.sink.write(rows_at(K1, [1])), {K1: 1})
    await first.table.refresh()
    assert await zombie.table.refresh() == 1
    winner = await first.sink.write(rows_at(K1, [2, 3]))
    await first.table.commit(winner, {K1: 2})
    loser = await zombie.sink.write(rows_at(K1, [2, 3]) + rows_at(K2, [1]))
    with pytest.raises(CommitConflictError):
        await zombie.table.commit(loser, {K1: 3, K2: 3})
    assert await zombie.table.refresh() == 2, "the refused commit made no version"
    assert zombie.table.token(K1) == 2
    assert zombie.table.token(K2) is None, "nothing of the refused commit landed"
    assert not await zombie.table.holds([f.path for f in loser])
    assert await zombie.table.holds([f.path for f in winner])
    assert sorted(zone.read().column("position").to_pylist()) == [1, 2, 3]


async def test_stale_snapshots_committing_disjoint_logs_both_land(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    first, second = writers
    assert await first.table.refresh() == 0
    assert await second.table.refresh() == 0
    one = await first.sink.write(rows_at(K1, [1, 2]))
    other = await second.sink.write(rows_at(K2, [1]))
    await first.table.commit(one, {K1: 10})
    await second.table.commit(other, {K2: 20})  # planned on version 0: rebased by the library
    assert await first.table.refresh() == 2
    assert (first.table.token(K1), first.table.token(K2)) == (10, 20)
    assert await first.table.holds([f.path for f in (*one, *other)])
    assert len(zone.message_ids()) == 3


async def test_a_commit_landing_during_a_refresh_leaves_each_writers_tokens_right(
    zone: ZoneUnderTest, writers: tuple[LandingZone, LandingZone]
) -> None:
    """Another writer's commit that lands while a refresh reads the log (after it found
    the newest version, before it read the commits up to it) must not shift which commit
    set which token: it did, and a handler took another's token for its own, planned its
    landed rows as new and landed each of them twice."""
    first, second = writers
    table = first.table
    assert isinstance(table, DeltaLandedTable)  # the race is staged inside its refresh
    assert await first.table.refresh() == 0
    assert await second.table.refresh() == 0
    await first.table.commit(await first.sink.write(rows_at(K1, [1])), {K1: 10})
    other = await second.sink.write(rows_at(K2, [1]))
    newest = table._updated

    def overtaken(held: Any) -> Any:
        snapshot = newest(held)
        anyio.from_thread.run(second.table.commit, other, {K2: 20})
        return snapshot

    table._updated = overtaken  # type: ignore[method-assign]
    assert await first.table.refresh() == 1
    assert (first.table.token(K1), first.table.token(K2)) == (10, None)
    table._updated = newest  # type: ignore[method-assign]
    assert await first.table.refresh() == 2
    assert (first.table.token(K1), first.table.token(K2)) == (10, 20)


async def test_holds_answers_for_the_snapshot_and_all_of_the_paths(
    writers: tuple[LandingZone, LandingZone],
) -> None:
    writer, other = writers
    await writer.table.refresh()
    await other.table.refresh()
    committed = await writer.sink.write(rows_at(K1, [1]))
    await writer.table.commit(committed, {K1: 1})
    orphan = await writer.sink.write(rows_at(K1, [2]))
    assert not await other.table.holds([committed[0].path]), "not in its snapshot yet"
    await other.table.refresh()
    assert await other.table.holds([committed[0].path])
    assert not await other.table.holds([orphan[0].path])
    assert not await other.table.holds([committed[0].path, orphan[0].path])
    assert await other.table.holds([])
