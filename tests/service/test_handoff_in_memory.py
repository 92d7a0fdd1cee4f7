"""Leader and handlers wired in one process over the in-memory adapters: balanced
assignment, data landing, failover of a handler and of the leader, and a clean leave.
The same flows run on real processes and servers in tests/e2e."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pyarrow.dataset as ds
import pytest
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import CollectorRegistry

from adapters.memory import (
    InMemoryAssignmentStore,
    InMemoryCoordination,
    InMemoryElection,
    InMemoryMembership,
    InMemoryTransport,
)
from adapters.parquet import ParquetSettings, ParquetSink
from core.assignment import strategy_named
from core.ingest import stamp
from core.model import Assignment
from services.common.settings import HandlerSettings, LeaderSettings
from services.handler.metrics import HandlerMetrics
from services.handler.worker import Handler
from services.leader.coordinator import Coordinator

pytestmark = pytest.mark.anyio

PARTITIONS = 12


@dataclass
class World:
    state: InMemoryCoordination
    transport: InMemoryTransport
    data_dir: Path
    tg: TaskGroup
    stops: dict[str, anyio.Event] = field(default_factory=dict)
    coordinators: dict[str, Coordinator] = field(default_factory=dict)

    async def start_handler(self, handler_id: str) -> None:
        self.stops[handler_id] = anyio.Event()
        await self.tg.start(self._run_handler, handler_id)

    async def _run_handler(
        self, handler_id: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # Adapters are entered and left by the task that uses them (task-group rule).
        async with (
            InMemoryMembership(self.state) as membership,
            InMemoryAssignmentStore(self.state) as store,
        ):
            handler = Handler(
                settings=HandlerSettings(
                    id=handler_id, lease_ttl=1.0, stats_interval=0.5, fetch_timeout=0.05
                ),
                membership=membership,
                store=store,
                transport=self.transport,
                sink=ParquetSink(ParquetSettings(data_dir=self.data_dir)),
                metrics=HandlerMetrics(CollectorRegistry()),
            )
            task_status.started()
            await handler.run(self.stops[handler_id])

    async def start_leader(self, leader_id: str) -> Coordinator:
        self.stops[leader_id] = anyio.Event()
        coordinator: Coordinator = await self.tg.start(self._run_leader, leader_id)
        return coordinator

    async def _run_leader(
        self, leader_id: str, *, task_status: TaskStatus[Coordinator] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with (
            InMemoryElection(self.state) as election,
            InMemoryMembership(self.state) as membership,
            InMemoryAssignmentStore(self.state) as store,
        ):
            coordinator = Coordinator(
                settings=LeaderSettings(id=leader_id, lease_ttl=1.0, debounce=0.05),
                partitions=PARTITIONS,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
            )
            self.coordinators[leader_id] = coordinator
            task_status.started(coordinator)
            await coordinator.run(self.stops[leader_id])

    async def publish(self, count: int) -> set[str]:
        ids = {uuid.uuid4().hex for _ in range(count)}
        by_project = [f"proj-{i % 7}" for i in range(count)]
        for offset, (message_id, project) in enumerate(zip(sorted(ids), by_project, strict=True)):
            await self.transport.publish(
                stamp(
                    project,
                    [b"{}"],
                    gateway_id="gw",
                    first_sequence=offset + 1,
                    message_ids=[message_id],
                    received_at=0.0,
                    partitions=PARTITIONS,
                )
            )
        return ids

    def landed(self) -> list[dict[str, object]]:
        if not any(self.data_dir.rglob("*.parquet")):
            return []
        table = ds.dataset(self.data_dir, format="parquet", partitioning="hive").to_table()
        rows: list[dict[str, object]] = table.to_pylist()
        return rows

    async def assignment_where(self, check: Callable[[Assignment], bool]) -> Assignment:
        async with InMemoryAssignmentStore(self.state) as store:
            with anyio.fail_after(10):
                async for assignment in store.watch():
                    if check(assignment):
                        return assignment
        raise AssertionError("unreachable")

    async def until_landed(self, ids: set[str]) -> None:
        with anyio.fail_after(20):
            # Files on disk are the outcome under test; there is no event to await.
            while not ids <= {str(r["message_id"]) for r in self.landed()}:  # noqa: ASYNC110
                await anyio.sleep(0.05)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with InMemoryTransport(ack_wait=1.0) as transport, anyio.create_task_group() as tg:
        yield World(InMemoryCoordination(), transport, tmp_path, tg)
        tg.cancel_scope.cancel()


def _balanced(members: set[str]) -> Callable[[Assignment], bool]:
    def check(assignment: Assignment) -> bool:
        loads = [len(p) for p in assignment.by_member().values()]
        return set(assignment.by_member()) == members and max(loads) - min(loads) <= 1

    return check


async def test_data_lands_once_per_message_when_three_handlers_share_partitions(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2", "h3"):
        await world.start_handler(h)
    assignment = await world.assignment_where(_balanced({"h1", "h2", "h3"}))
    assert sorted(len(p) for p in assignment.by_member().values()) == [4, 4, 4]
    ids = await world.publish(300)
    await world.until_landed(ids)
    rows = world.landed()
    assert len(rows) == len({r["message_id"] for r in rows}) == 300
    for row in rows:
        assert assignment.owners[int(str(row["partition"]))] == (row["handler_id"],)


async def test_partitions_move_and_nothing_is_lost_when_a_handler_lease_expires(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2", "h3"):
        await world.start_handler(h)
    before = await world.assignment_where(_balanced({"h1", "h2", "h3"}))
    lost_partitions = set(before.owned_by("h2"))
    world.stops["h2"].set()  # stop its process loop...
    world.state.expire("h2")  # ...as a crash would: no drain, no release
    after = await world.assignment_where(_balanced({"h1", "h3"}))
    assert not set(after.owned_by("h2"))
    ids = await world.publish(200)
    await world.until_landed(ids)
    takers = {r["handler_id"] for r in world.landed() if r["partition"] in lost_partitions}
    assert takers <= {"h1", "h3"} and takers


async def test_standby_takes_over_with_higher_term_when_leader_lease_expires(
    world: World,
) -> None:
    first = await world.start_leader("l1")
    await world.start_handler("h1")
    await world.assignment_where(_balanced({"h1"}))
    second = await world.start_leader("l2")
    assert first.leadership is not None
    old_term = first.leadership.term
    world.state.expire("l1")
    world.stops["l1"].set()
    await world.start_handler("h2")
    await world.assignment_where(_balanced({"h1", "h2"}))
    assert second.leadership is not None and second.leadership.term > old_term


async def test_rebalance_is_immediate_and_all_partitions_released_when_handler_leaves(
    world: World,
) -> None:
    await world.start_leader("l1")
    for h in ("h1", "h2"):
        await world.start_handler(h)
    await world.assignment_where(_balanced({"h1", "h2"}))
    world.stops["h2"].set()
    after = await world.assignment_where(_balanced({"h1"}))
    assert len(after.owned_by("h1")) == PARTITIONS
    async with InMemoryAssignmentStore(world.state) as store:
        with anyio.fail_after(5):
            async for holds in store.watch_holds():
                if {h.member_id for h in holds.values()} == {"h1"} and len(holds) == PARTITIONS:
                    break
