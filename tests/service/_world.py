"""Leaders and handlers wired in one process over the in-memory adapters (contract-tested
like the real ones) and a real Parquet sink in ``data_dir``: the harness of the service
tests. Every task runs in the fixture's task group; ``stops[name]`` stops one."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import CollectorRegistry

from adapters.delta.table import DeltaLandedTable
from adapters.memory import (
    InMemoryAssignmentStore,
    InMemoryCoordination,
    InMemoryElection,
    InMemoryHoldStore,
    InMemoryLoadReports,
    InMemoryMembership,
    InMemoryProjectRegistry,
    InMemoryTransport,
)
from adapters.parquet import ParquetSettings, ParquetSink
from core.assignment import strategy_named
from core.ingest import stamp
from core.model import Assignment, Partition
from core.ports import HoldStore, LandedTable, Sink, Transport
from services.common.clusters import Datacenters
from services.common.settings import HandlerSettings, LeaderSettings
from services.common.table import read_landed
from services.handler.metrics import HandlerMetrics
from services.handler.worker import Handler
from services.leader.backlog import BacklogReader
from services.leader.leader_loop import LeaderLoop
from services.leader.status import StatusReader

__all__ = ["World", "balanced", "world_of"]

# Short leases and fast rolls: the flows under test take seconds, not minutes.
HANDLER_DEFAULTS: dict[str, Any] = {
    "lease_ttl": 1.0,
    "stats_interval": 0.5,
    "fetch_timeout": 0.05,
    "roll_age": 0.2,
}


@dataclass
class World:
    state: InMemoryCoordination
    transport: InMemoryTransport
    data_dir: Path
    tg: TaskGroup
    partitions: int
    stops: dict[str, anyio.Event] = field(default_factory=dict)
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)
    leader_loops: dict[str, LeaderLoop] = field(default_factory=dict)
    metrics: dict[str, HandlerMetrics] = field(default_factory=dict)
    handlers: dict[str, Handler] = field(default_factory=dict)

    def parquet(self) -> ParquetSink:
        return ParquetSink(ParquetSettings(data_dir=self.data_dir))

    async def start_handler(
        self,
        handler_id: str,
        *,
        sink: Sink | None = None,
        table: LandedTable | None = None,
        holds: Callable[[HoldStore], HoldStore] = lambda store: store,
        datacenters: Datacenters | None = None,
        **settings: Any,
    ) -> None:
        """``holds`` wraps the handler's hold store (to inject store faults);
        ``datacenters``: read every partition from these clusters (multi-datacenter)."""
        self.stops[handler_id] = anyio.Event()
        options = {**HANDLER_DEFAULTS, "id": handler_id, **settings}
        await self.tg.start(
            self._run_handler,
            handler_id,
            sink or self.parquet(),
            table or DeltaLandedTable(str(self.data_dir)),
            holds,
            options,
            datacenters,
        )

    def kill(self, handler_id: str) -> None:
        """As SIGKILL would: the handler stops at its next await, drains nothing, acks
        nothing more, and its lease ends as a TTL would end it."""
        self.scopes[handler_id].cancel()
        self.state.expire(handler_id)

    async def _run_handler(
        self,
        handler_id: str,
        sink: Sink,
        table: LandedTable,
        wrap_holds: Callable[[HoldStore], HoldStore],
        settings: dict[str, Any],
        datacenters: Datacenters | None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        # Adapters are entered and left by the task that uses them (task-group rule).
        async with (
            InMemoryMembership(self.state) as membership,
            InMemoryLoadReports(self.state) as reports,
            InMemoryAssignmentStore(self.state) as assignments,
            InMemoryHoldStore(self.state) as holds,
            InMemoryProjectRegistry(self.state) as projects,
        ):
            metrics = self.metrics[handler_id] = HandlerMetrics(CollectorRegistry())
            handler = Handler(
                settings=HandlerSettings(**settings),
                membership=membership,
                reports=reports,
                assignments=assignments,
                holds=wrap_holds(holds),
                projects=projects,
                transport=self.transport,
                sink=sink,
                table=table,
                metrics=metrics,
                datacenters=datacenters,
            )
            self.handlers[handler_id] = handler
            with anyio.CancelScope() as self.scopes[handler_id]:
                task_status.started()
                await handler.run(self.stops[handler_id])

    async def start_leader(self, leader_id: str) -> LeaderLoop:
        self.stops[leader_id] = anyio.Event()
        leader_loop: LeaderLoop = await self.tg.start(self._run_leader, leader_id)
        return leader_loop

    async def _run_leader(
        self, leader_id: str, *, task_status: TaskStatus[LeaderLoop] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with (
            InMemoryElection(self.state) as election,
            InMemoryMembership(self.state) as membership,
            InMemoryAssignmentStore(self.state) as store,
        ):
            leader_loop = LeaderLoop(
                settings=LeaderSettings(id=leader_id, lease_ttl=1.0, debounce=0.05),
                partitions=self.partitions,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
            )
            self.leader_loops[leader_id] = leader_loop
            task_status.started(leader_loop)
            await leader_loop.run(self.stops[leader_id])

    async def publish(
        self,
        count: int,
        projects: Sequence[str] = ("proj",),
        *,
        to: Transport | None = None,
        first_sequence: int = 1,
    ) -> set[str]:
        """``count`` messages spread round-robin over ``projects`` (to ``to``, by default
        the world's transport); their message ids."""
        transport = to or self.transport
        ids: set[str] = set()
        for index, project in enumerate(projects):
            share = [uuid.uuid4().hex for _ in range(index, count, len(projects))]
            if not share:
                continue
            await transport.publish(
                stamp(
                    project,
                    [b'{"n": 1}'] * len(share),
                    gateway_id="gw",
                    first_sequence=first_sequence,
                    message_ids=share,
                    received_at=time.time(),
                    partitions=self.partitions,
                )
            )
            ids.update(share)
        return ids

    async def landed(self) -> list[dict[str, Any]]:
        """Every row of the landed table's newest version, nothing else."""
        table = await anyio.to_thread.run_sync(read_landed, self.data_dir)
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    async def until_landed(self, ids: set[str], within: float = 20.0) -> list[dict[str, Any]]:
        with anyio.fail_after(within):
            while True:
                # Rows in files under their final names are the outcome under test; there
                # is no event to await.
                rows = await self.landed()
                if ids <= {str(r["message_id"]) for r in rows}:
                    return rows
                await anyio.sleep(0.05)

    async def until_settled(self, partition: Partition, within: float = 10.0) -> None:
        """Until the transport holds nothing unsettled for ``partition``. A handler acks
        after its rename, so rows can be visible a moment before the backlog is empty."""
        with anyio.fail_after(within):
            # The transport's backlog is the point of truth; it offers no event.
            while await self.transport.backlog(partition) > 0:  # noqa: ASYNC110
                await anyio.sleep(0.05)

    async def assignment_where(self, check: Callable[[Assignment], bool]) -> Assignment:
        async with InMemoryAssignmentStore(self.state) as store:
            with anyio.fail_after(10):
                async for assignment in store.watch():
                    if check(assignment):
                        return assignment
        raise AssertionError("unreachable")


@asynccontextmanager
async def world_of(
    data_dir: Path, *, partitions: int, ack_wait: float = 1.0
) -> AsyncIterator[World]:
    async with (
        InMemoryTransport(ack_wait=ack_wait) as transport,
        anyio.create_task_group() as tg,
    ):
        yield World(InMemoryCoordination(), transport, data_dir, tg, partitions)
        tg.cancel_scope.cancel()


def balanced(members: set[str]) -> Callable[[Assignment], bool]:
    def check(assignment: Assignment) -> bool:
        loads = [len(p) for p in assignment.by_member().values()]
        return set(assignment.by_member()) == members and max(loads) - min(loads) <= 1

    return check


async def status_reader(
    world: World,
    stack: AsyncExitStack,
    backlog: BacklogReader,
    membership: InMemoryMembership | None = None,
    **options: Any,
) -> StatusReader:
    """A StatusReader of leader l1 over the world's in-memory stores (``membership``: one
    of the test's own instead, such as a slow one), entered on ``stack``."""
    state = world.state
    return StatusReader(
        leader_loop=world.leader_loops["l1"],
        election=await stack.enter_async_context(InMemoryElection(state)),
        membership=await stack.enter_async_context(membership or InMemoryMembership(state)),
        reports=await stack.enter_async_context(InMemoryLoadReports(state)),
        store=await stack.enter_async_context(InMemoryAssignmentStore(state)),
        holds=await stack.enter_async_context(InMemoryHoldStore(state)),
        transport=world.transport,
        partitions=world.partitions,
        backends={"coordination": "memory", "transport": "memory"},
        backlog=backlog,
        **options,
    )
