"""The LandingLog contract, run against every adapter (in memory, local file system), and
``LandingTable`` (the writers' protocol over it) against each of them too."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from adapters.memory import InMemoryLandingLog
from adapters.parquet import LocalLandingLog
from adapters.s3 import S3LandingLog
from core.ports import LandingLog
from core.table import CHECKPOINT_EVERY, Commit, LandedFile, TableState
from services.common.table import LandingTable
from tests.contract._s3 import fresh_bucket

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "local", "s3"])
async def log_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], LandingLog]]:
    """Makes views of ONE log (several writers of one landing zone)."""
    if request.param == "memory":
        shared = InMemoryLandingLog()
        yield lambda: shared
    elif request.param == "local":
        yield lambda: LocalLandingLog(tmp_path)
    else:
        client, location = fresh_bucket(request.getfixturevalue("minio_server"))
        yield lambda: S3LandingLog(client, location)


def commit(version: int, writer: str = "w", **positions: tuple[int, ...]) -> Commit:
    return Commit(
        version=version,
        commit_id=uuid.uuid4().hex,
        writer=writer,
        committed_at=1_764_000_000.25,
        added=(LandedFile(f"date=2026-11-25/{writer}-{version}.parquet", 10),),
        positions={f"nats:S@t#{p.removeprefix('p')}": xs for p, xs in positions.items()},
        floors={"nats:S@t#0": 3},
    )


async def test_append_creates_each_version_once(log_factory: Callable[[], LandingLog]) -> None:
    log = log_factory()
    first = commit(1, p0=(5, 7), p12=tuple(range(100, 10_100, 3)))
    assert await log.append(first)
    assert not await log.append(commit(1, writer="other", p0=(9,)))
    assert list(await log.commits(0)) == [first]  # every field back, the loser not stored
    assert list(await log.commits(1)) == []


async def test_commits_are_read_in_order_up_to_the_first_missing_version(
    log_factory: Callable[[], LandingLog],
) -> None:
    log = log_factory()
    made = [commit(v, p1=(v,)) for v in (1, 2, 3, 5)]
    for c in made:
        assert await log.append(c)
    assert [c.version for c in await log.commits(0)] == [1, 2, 3]
    assert [c.version for c in await log.commits(2)] == [3]
    assert [c.version for c in await log.commits(4)] == [5]


async def test_of_many_writers_racing_for_one_version_exactly_one_wins(
    log_factory: Callable[[], LandingLog],
) -> None:
    wins: list[str] = []

    async def race(writer: str) -> None:
        if await log_factory().append(commit(1, writer=writer, p0=(1,))):
            wins.append(writer)

    async with anyio.create_task_group() as tg:
        for n in range(16):
            tg.start_soon(race, f"w{n}")
    assert len(wins) == 1
    (stored,) = await log_factory().commits(0)
    assert stored.writer == wins[0]


async def test_the_newest_checkpoint_is_read_back(log_factory: Callable[[], LandingLog]) -> None:
    log = log_factory()
    assert await log.checkpoint() is None
    old = TableState().apply(commit(1, p0=(1, 2)))
    new = old.apply(commit(2, p0=(3,)))
    await log.save_checkpoint(new)
    await log.save_checkpoint(old)
    await log.save_checkpoint(new)  # the same again: replaced, no error
    assert await log_factory().checkpoint() == new


async def test_a_commit_survives_a_new_process(tmp_path: Path) -> None:
    made = commit(1, p3=(1, 2, 3))
    async with LocalLandingLog(tmp_path) as log:
        assert await log.append(made)
    async with LocalLandingLog(tmp_path) as again:
        assert list(await again.commits(0)) == [made]
    assert [p.name for p in (tmp_path / "_shoal" / "log").iterdir()] == [f"{1:020d}.json"]


# -- LandingTable: writers over one log --------------------------------------------------


async def test_two_writers_settle_each_position_once(
    log_factory: Callable[[], LandingLog],
) -> None:
    a, b = LandingTable(log_factory(), "a"), LandingTable(log_factory(), "b")
    await a.refresh()
    await b.refresh()
    assert await a.commit(positions={"L#0": (1, 2, 3)})
    # b has not seen a's commit: it loses the race for version 1, reads it, and refuses
    # because position 2 is settled now.
    assert not await b.commit(positions={"L#0": (2, 4)})
    assert b.state.version == 1 and b.state.is_settled("L#0", 2)
    # Without overlap, a lost race is only a retry at the next version.
    assert await a.commit(positions={"L#1": (1,)})
    assert await b.commit(positions={"L#0": (4,)})
    assert b.state.version == 3
    final = await LandingTable(log_factory(), "reader").refresh()
    assert final.settled == {"L#0": frozenset({1, 2, 3, 4}), "L#1": frozenset({1})}


async def test_a_compaction_swap_loses_cleanly_to_another(
    log_factory: Callable[[], LandingLog],
) -> None:
    writer = LandingTable(log_factory(), "h")
    small = [LandedFile(f"date=2026-11-24/{n}.parquet", 5) for n in range(3)]
    assert await writer.commit(added=small, positions={"L#0": (1, 2, 3)})
    one, two = LandingTable(log_factory(), "c1"), LandingTable(log_factory(), "c2")
    await one.refresh()
    await two.refresh()
    merged = LandedFile("date=2026-11-24/merged.parquet", 15)
    assert await one.commit(removed=[f.path for f in small], added=[merged])
    assert not await two.commit(removed=[f.path for f in small], added=[merged])
    assert set((await writer.refresh()).files) == {merged.path}


async def test_a_new_reader_starts_from_the_checkpoint(
    log_factory: Callable[[], LandingLog],
) -> None:
    writer = LandingTable(log_factory(), "h")
    for n in range(CHECKPOINT_EVERY + 2):
        assert await writer.commit(positions={f"L#{n % 4}": (n,)}, floors={"L#0": n // 2})
    view = log_factory()
    checkpoint = await view.checkpoint()
    assert checkpoint is not None and checkpoint.version == CHECKPOINT_EVERY
    if isinstance(view, LocalLandingLog):  # the commits it covers are not needed any more
        for version in range(1, CHECKPOINT_EVERY + 1):
            (view.folder / f"{version:020d}.json").unlink()
    assert await LandingTable(log_factory(), "reader").refresh() == writer.state
