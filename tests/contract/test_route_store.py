"""The RouteStore contract, run against the route file and the in-memory store; then what
only the file does: another process's write shows at the next read and in watch, two
writers cannot both follow one version, and a bad file keeps the last good table."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from adapters.memory import InMemoryRouteStore
from adapters.routes import RouteFile
from core.errors import RouteConflictError, RouteError
from core.ports import RouteStore
from core.routing import RouteTable, default_table, parse_cluster_map, plan_migration, tables_of

pytestmark = pytest.mark.anyio

CLUSTERS = parse_cluster_map("east=nats://127.0.0.1:4222,west=nats://127.0.0.1:5222")


def migrated(table: RouteTable) -> tuple[RouteTable, ...]:
    """The tables of moving 'a' to west then back to east (they follow ``table``)."""
    west = tables_of(plan_migration(table, CLUSTERS, "a", "west", ordered=False))
    return west + tables_of(plan_migration(west[-1], CLUSTERS, "a", "east", ordered=True))


def first() -> RouteTable:
    """A first table to store: the default one, version 1."""
    table = default_table(CLUSTERS)
    return RouteTable(1, table.default, table.routes)


@pytest.fixture(params=["file", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RouteStore]:
    if request.param == "memory":
        yield InMemoryRouteStore()
        return
    async with RouteFile(tmp_path / "routes.json", poll_interval=0.01) as routes:
        yield routes


async def test_nothing_is_stored_at_first(store: RouteStore) -> None:
    assert await store.current() is None


async def test_tables_come_back_as_stored(store: RouteStore) -> None:
    await store.put(first())
    assert await store.current() == first()
    for table in migrated(first()):
        await store.put(table)
        assert await store.current() == table


@pytest.mark.parametrize("version", [0, 2, 5])
async def test_a_table_that_does_not_follow_is_refused(store: RouteStore, version: int) -> None:
    table = first()
    with pytest.raises(RouteConflictError, match="does not follow the stored 0"):
        await store.put(RouteTable(version, table.default))
    assert await store.current() is None
    await store.put(table)
    with pytest.raises(RouteConflictError, match="does not follow the stored 1"):
        await store.put(table)
    assert await store.current() == table


async def test_watch_yields_the_current_table_then_newer_ones(store: RouteStore) -> None:
    """A watcher may skip a table it was too slow to see (the file is polled), never go
    back, and always reaches the last one stored."""
    await store.put(first())
    tables = migrated(first())
    seen: list[RouteTable | None] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def follow(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                async for table in store.watch():
                    seen.append(table)
                    if len(seen) == 1:
                        task_status.started()
                    if table == tables[-1]:
                        tg.cancel_scope.cancel()

            await tg.start(follow)
            for table in tables:
                await store.put(table)
    assert seen[0] == first()
    versions = [t.version for t in seen if t is not None]
    assert versions == sorted(set(versions)) and seen[-1] == tables[-1]


# -- the file only ---------------------------------------------------------------------------


async def test_another_writer_shows_at_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    async with RouteFile(path) as reader, RouteFile(path) as writer:
        await writer.put(first())
        assert await reader.current() == first()


async def test_two_writers_of_one_version_store_one(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    table = first()
    outcomes: list[str] = []

    def write() -> None:
        try:
            RouteFile(path)._put(table)
            outcomes.append("stored")
        except RouteConflictError:
            outcomes.append("refused")

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["stored"]


async def test_a_bad_file_keeps_the_last_good_table(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    async with RouteFile(path) as routes:
        await routes.put(first())
        path.write_text("{not json")
        assert await routes.current() == first()
        path.unlink()
        assert await routes.current() == first()


async def test_a_bad_file_at_start_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    path.write_text('{"format": 9}')
    with pytest.raises(RouteError, match="not a format 1"):
        async with RouteFile(path):
            pass
