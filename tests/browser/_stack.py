"""A whole shoal in one process for the browser tests: a leader (leader_loop + its status
app, dashboard included, served by uvicorn on a free loopback port) and handlers, over
the in-memory adapters. Phase 2 runs the same page against a real ``shoal up`` stack."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from fastapi import FastAPI
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
from core.model import Assignment
from services.common.http import embedded_server
from services.common.settings import HandlerSettings, LeaderSettings
from services.handler.metrics import HandlerMetrics
from services.handler.worker import Handler
from services.leader.leader_loop import LeaderLoop
from services.leader.status import LiveStatus, StatusReader, create_status_app

PARTITIONS = 128
# Long enough that no lease lapses while Chromium and the landing share two loaded cores
# (a 1 s lease once lapsed in CI and re-elected the leader mid-test); a crash ends its
# leases explicitly (``Stack.crash``), so no test waits for a TTL.
LEASE_TTL = 10.0


@asynccontextmanager
async def serve_app(app: FastAPI) -> AsyncIterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port; yields its base URL (no trailing slash)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = embedded_server(app, "127.0.0.1", port)
    stopped = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve([sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to await)
                    await anyio.sleep(0.02)
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
                # Shielded: this also runs when the stack is being cancelled. An event
                # stream still open would hold the graceful shutdown for its whole timeout.
                with anyio.move_on_after(1, shield=True):
                    await stopped.wait()
                tg.cancel_scope.cancel()
    finally:
        sock.close()


@dataclass
class Stack:
    state: InMemoryCoordination
    transport: InMemoryTransport
    data_dir: Path
    tg: TaskGroup
    url: str = ""
    stops: dict[str, anyio.Event] = field(default_factory=dict)
    leader_loops: dict[str, LeaderLoop] = field(default_factory=dict)

    async def start_leader(self, leader_id: str) -> LeaderLoop:
        """Start a leader replica and its status app; ``url`` is the first one's."""
        self.stops[leader_id] = anyio.Event()
        leader_loop: LeaderLoop = await self.tg.start(self._run_leader, leader_id)
        return leader_loop

    async def _run_leader(
        self, leader_id: str, *, task_status: TaskStatus[LeaderLoop] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with (
            InMemoryElection(self.state) as election,
            InMemoryMembership(self.state) as membership,
            InMemoryLoadReports(self.state) as reports,
            InMemoryAssignmentStore(self.state) as store,
            InMemoryHoldStore(self.state) as holds,
        ):
            leader_loop = LeaderLoop(
                settings=LeaderSettings(id=leader_id, lease_ttl=LEASE_TTL, debounce=0.05),
                partitions=PARTITIONS,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
            )
            reader = StatusReader(
                leader_loop=leader_loop,
                election=election,
                membership=membership,
                reports=reports,
                store=store,
                holds=holds,
                transport=self.transport,
                partitions=PARTITIONS,
                backends={"coordination": "memory", "transport": "memory"},
                lag_ttl=0.5,
            )
            live = LiveStatus(reader, interval=0.25)
            async with anyio.create_task_group() as status_tasks:
                await status_tasks.start(live.run, self.stops[leader_id])
                async with serve_app(create_status_app(live)) as url:
                    self.url = self.url or url
                    self.leader_loops[leader_id] = leader_loop
                    task_status.started(leader_loop)
                    await leader_loop.run(self.stops[leader_id])

    async def start_handler(self, handler_id: str) -> None:
        self.stops[handler_id] = anyio.Event()
        await self.tg.start(self._run_handler, handler_id)

    async def _run_handler(
        self, handler_id: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with (
            InMemoryMembership(self.state) as membership,
            InMemoryLoadReports(self.state) as reports,
            InMemoryAssignmentStore(self.state) as assignments,
            InMemoryHoldStore(self.state) as holds,
            InMemoryProjectRegistry(self.state) as projects,
        ):
            handler = Handler(
                settings=HandlerSettings(
                    id=handler_id, lease_ttl=LEASE_TTL, stats_interval=0.5, fetch_timeout=0.05
                ),
                membership=membership,
                reports=reports,
                assignments=assignments,
                holds=holds,
                projects=projects,
                transport=self.transport,
                sink=ParquetSink(ParquetSettings(data_dir=self.data_dir)),
                table=DeltaLandedTable(str(self.data_dir)),
                metrics=HandlerMetrics(CollectorRegistry()),
            )
            task_status.started()
            await handler.run(self.stops[handler_id])

    def crash(self, member_id: str) -> None:
        """Stop a handler's loop and expire its lease, as a SIGKILL would."""
        self.stops[member_id].set()
        self.state.expire(member_id)

    async def publish(self, count: int, projects: int = 40) -> None:
        for i in range(count):
            await self.transport.publish(
                stamp(
                    f"proj-{i % projects}",
                    [b'{"t": 1}'],
                    gateway_id="gw",
                    first_sequence=i + 1,
                    message_ids=[uuid.uuid4().hex],
                    received_at=0.0,
                    partitions=PARTITIONS,
                )
            )

    async def assignment_where(self, check: Callable[[Assignment], bool]) -> Assignment:
        async with InMemoryAssignmentStore(self.state) as store:
            with anyio.fail_after(15):
                async for assignment in store.watch():
                    if check(assignment):
                        return assignment
        raise AssertionError("unreachable")


def balanced_over(*members: str) -> Callable[[Assignment], bool]:
    def check(assignment: Assignment) -> bool:
        loads = [len(p) for p in assignment.by_member().values()]
        return set(assignment.by_member()) == set(members) and max(loads) - min(loads) <= 1

    return check


@asynccontextmanager
async def in_process_stack(data_dir: Path) -> AsyncIterator[Stack]:
    async with InMemoryTransport(ack_wait=1.0) as transport, anyio.create_task_group() as tg:
        stack = Stack(InMemoryCoordination(), transport, data_dir, tg)
        try:
            yield stack
        finally:
            for stop in stack.stops.values():
                stop.set()
            tg.cancel_scope.cancel()


class CannedSource:
    """A status document that a test sets by hand (``mount_dashboard`` takes any source)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document_value = document
        self.reads = 0

    async def document(self) -> dict[str, Any]:
        self.reads += 1
        return self.document_value
