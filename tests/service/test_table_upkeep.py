"""The landing table's upkeep by the active leader (issue 30), over a real Delta table on
disk: the leader compacts what handlers land and shows it (``GET /status``'s ``table``,
``/metrics`` on its metrics port); only the active leader keeps the table up, and the
standby takes over when it steps down; a round that fails is logged, counted and retried,
and leadership stays."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry

from adapters.delta import TableSettings
from adapters.memory import InMemoryAssignmentStore, InMemoryElection, InMemoryMembership
from core.assignment import strategy_named
from core.messages import Envelope, LandedRow
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.metrics import metrics_app
from services.common.settings import LeaderSettings
from services.common.upkeep import TableKeeper, TableMetrics, utc_day
from services.leader.backlog import BacklogReader
from services.leader.leader_loop import LeaderLoop
from services.leader.status import LiveStatus, create_status_app
from tests.service._world import World, status_reader, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 2
CLOSED_DAY = "2026-11-21"
ROUNDS = 0.1  # seconds between two rounds of upkeep


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path / "zone", partitions=PARTITIONS) as w:
        yield w


def _settings(**overrides: Any) -> TableSettings:
    return TableSettings(upkeep_interval=ROUNDS, **overrides)


def _keeper(world: World, registry: CollectorRegistry, **overrides: Any) -> TableKeeper:
    return TableKeeper.at(world.data_dir, _settings(**overrides), metrics=TableMetrics(registry))


async def _start_leader(world: World, leader_id: str, keeper: TableKeeper) -> LeaderLoop:
    """A leader replica over the world's stores that keeps the table up with ``keeper``."""

    async def run(*, task_status: TaskStatus[LeaderLoop] = anyio.TASK_STATUS_IGNORED) -> None:
        async with (
            InMemoryElection(world.state) as election,
            InMemoryMembership(world.state) as membership,
            InMemoryAssignmentStore(world.state) as store,
        ):
            loop = LeaderLoop(
                settings=LeaderSettings(id=leader_id, lease_ttl=1.0, debounce=0.05),
                partitions=world.partitions,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
                upkeep=keeper,
            )
            world.leader_loops[leader_id] = loop
            task_status.started(loop)
            await loop.run(world.stops[leader_id])

    world.stops[leader_id] = anyio.Event()
    loop: LeaderLoop = await world.tg.start(run)
    return loop


async def _until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    # The keeper works on its own schedule and offers no event: its record is the outcome.
    # A ceiling, not a wait: a round runs in a child process that imports delta-rs, which
    # took more than 20 s beside the contract and e2e lanes of CI.
    try:
        with anyio.fail_after(within):
            while not check():  # noqa: ASYNC110
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {within:g} s") from None


async def _land_commits(zone: LandingZone, commits: int, day: str = CLOSED_DAY) -> set[str]:
    """``commits`` handler commits of 3 rows received on ``day``: their message ids."""
    received = datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC).timestamp()
    positions = count((await zone.table.refresh()) * 100)
    ids: set[str] = set()
    for _ in range(commits):
        rows = []
        for position in [next(positions) for _ in range(3)]:
            envelope = Envelope(f"m{position}", "p", 0, "gw", position + 1, received, b"{}")
            rows.append(LandedRow(envelope, 1, "h1", received, "L", position))
            ids.add(envelope.message_id)
        files = await zone.sink.write(rows)
        version = await zone.table.refresh()
        await zone.table.commit(files, {"L#0": version + 1})
    return ids


def _round_done_with(keeper: TableKeeper, rows: int) -> bool:
    """A round read ``rows`` and ended: its last health read follows its checkpoint."""
    health, checkpoint = keeper.last_health, keeper.last_checkpoint
    return (
        health is not None
        and health.rows == rows
        and checkpoint is not None
        and keeper.health_read_at is not None
        and keeper.health_read_at >= checkpoint.at
    )


async def test_the_active_leader_compacts_what_handlers_land_and_shows_it(
    world: World,
) -> None:
    registry = CollectorRegistry()
    async with AsyncExitStack() as stack:
        keeper = _keeper(world, registry, open_day_files=3)
        leader = await _start_leader(world, "l1", keeper)
        await world.start_handler("h1")
        ids: set[str] = set()
        for _ in range(4):  # a commit (or more) each: the open day fills with small files
            ids |= await world.publish(20, ("a", "b"))
            await world.until_landed(ids)
        await _until(lambda: keeper.last_compaction is not None, "a compaction")
        await _until(lambda: _round_done_with(keeper, len(ids)), "a round after the last commit")

        live = LiveStatus(await status_reader(world, stack, BacklogReader(world.transport, 2)))
        tg = await stack.enter_async_context(anyio.create_task_group())
        await tg.start(live.run)
        app = create_status_app(live)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://leader") as client:
            table = (await client.get("/status")).json()["table"]
            assert (await client.get("/metrics")).status_code == 404  # on a port of its own
        scraper = httpx.ASGITransport(app=metrics_app(registry))
        async with httpx.AsyncClient(transport=scraper, base_url="http://leader") as client:
            metrics = (await client.get("/metrics")).text
        tg.cancel_scope.cancel()

    compaction = keeper.last_compaction
    assert compaction is not None
    assert compaction.days == (utc_day(time.time()),)
    assert compaction.files_removed >= 3 and compaction.files_added == 1
    landed = Counter(str(r["message_id"]) for r in await world.landed())
    assert set(landed) == ids and set(landed.values()) == {1}
    assert leader.leadership is not None
    assert table["enabled"] and table["active"]
    assert table["location"] == str(world.data_dir.absolute())
    assert table["compactions"] >= 1 and table["files_compacted"] >= 3
    assert table["last_compaction"]["days"] == [utc_day(time.time())]
    assert table["files"] >= 1 and table["rows"] == len(ids)
    assert table["log_files"] >= 5 and table["log_bytes"] > 0
    assert table["last_checkpoint"] is not None and table["last_error"] is None
    assert table["last_vacuum"] == {  # the first round vacuums; nothing was left behind
        "at": table["last_vacuum"]["at"],
        "retention_hours": 36.0,
        "files_removed": 0,
        "dry_run": False,
    }
    samples = _samples(metrics)
    assert samples["shoal_table_compactions_total"] == keeper.compactions
    assert samples["shoal_table_files_compacted_total"] == keeper.files_compacted
    assert samples["shoal_table_rows"] == len(ids)
    assert samples["shoal_table_log_files"] > 0
    assert samples["shoal_table_last_compaction_timestamp"] == compaction.at


def _samples(exposition: str) -> dict[str, float]:
    return {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in exposition.splitlines())
        if name.startswith("shoal_table_")
    }


async def test_only_the_active_leader_keeps_the_table_up(world: World) -> None:
    async with AsyncExitStack() as stack:
        first = _keeper(world, CollectorRegistry())
        second = _keeper(world, CollectorRegistry())
        zone = await stack.enter_async_context(open_landing_zone(world.data_dir))
        ids = await _land_commits(zone, 3)
        l1 = await _start_leader(world, "l1", first)
        await _until(lambda: l1.leadership is not None, "l1 elected")
        l2 = await _start_leader(world, "l2", second)
        await _until(lambda: first.last_compaction is not None, "l1 compacts")
        assert (first.active, second.active) == (True, False)
        assert second.health_read_at is None  # the standby never touched the table

        world.stops["l1"].set()  # l1 steps down: l2 is elected and keeps the table up
        await _until(lambda: l2.leadership is not None, "l2 elected")
        ids |= await _land_commits(zone, 2)

        def merged_by_l2() -> bool:
            health = second.last_health
            return health is not None and health.rows == len(ids) and health.files == 1

        await _until(merged_by_l2, "l2 merges the new commits")

    assert not first.active
    assert first.compactions == 1 and second.compactions >= 1
    assert {str(r["message_id"]) for r in await world.landed()} == ids


async def test_a_failing_round_is_logged_counted_and_retried_and_leadership_stays(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    async with AsyncExitStack() as stack:
        keeper = _keeper(world, registry)
        zone = await stack.enter_async_context(open_landing_zone(world.data_dir))
        ids = await _land_commits(zone, 2)
        # A commit file nobody can read: every read of the table fails until it goes.
        broken = world.data_dir / "_delta_log" / f"{await zone.table.refresh() + 1:020}.json"
        broken.write_text("not json\n")
        with caplog.at_level(logging.WARNING, logger="shoal.table"):
            leader = await _start_leader(world, "l1", keeper)
            await _until(lambda: keeper.failures >= 3, "three failed rounds")
        term = leader.leadership.term if leader.leadership else None
        failing = keeper.status()

        broken.unlink()
        await _until(
            lambda: keeper.last_compaction is not None and keeper.last_error is None,
            "a round that succeeds",
        )

    assert term is not None and leader.leadership is not None
    assert leader.leadership.term == term  # never stepped down
    assert failing["last_error"]["error"].startswith("OSError: Delta table:")
    assert failing["failures"] >= 3 and failing["active"]
    assert registry.get_sample_value("shoal_table_upkeep_failures_total") == keeper.failures
    logged = [r for r in caplog.records if r.getMessage().startswith("table upkeep failed")]
    assert len(logged) >= 3
    assert logged[0].__dict__["fields"]["table"] == str(world.data_dir.absolute())
    assert {str(r["message_id"]) for r in await world.landed()} == ids
