"""The landing path under faults, with a leader and a handler in one process over the
in-memory adapters (contract-tested like the real ones) and a real Parquet sink:

- a sink that fails for longer than max deliveries x ack wait loses nothing and
  dead-letters nothing: the batch stays buffered, kept alive, and is written again;
- a handler stalled between its ownership check and its rename, past its lease, makes
  nothing visible, and the messages land (once) after it rejoins;
- a failure in one partition (the broker refusing to open it) stays in that partition.
"""

from __future__ import annotations

import errno
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
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
from core.errors import OwnershipLostError
from core.ingest import stamp
from core.messages import LandedRow
from core.model import Partition
from core.ports import Sink, Subscription
from services.common.settings import HandlerSettings, LeaderSettings
from services.handler.metrics import HandlerMetrics
from services.handler.worker import Handler
from services.leader.coordinator import Coordinator

pytestmark = pytest.mark.anyio

PARTITIONS = 4
ACK_WAIT = 1.0
MAX_DELIVER = 3


class FailingSink:
    """A real ParquetSink behind a switch: while ``failing()`` says so, every write fails
    the way a full disk does, before anything reaches the disk."""

    def __init__(self, inner: Sink, failing: Callable[[], bool]) -> None:
        self.inner = inner
        self.failing = failing
        self.failures = 0

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> int:
        if self.failing():
            self.failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return await self.inner.write(rows, still_valid=still_valid)


class StallingSink(ParquetSink):
    """The real ParquetSink, whose first write stalls in its worker thread (as a paused
    process or a hung volume would) after the data is staged and before the final
    ownership check, until the handler's lease has expired."""

    def __init__(self, settings: ParquetSettings, expired: Callable[[], bool]) -> None:
        super().__init__(settings)
        self.expired = expired
        self.outcomes: list[str] = []
        self.stalled = threading.Event()

    def _stage(self, folder: Path, stem: str, rows: list[LandedRow]) -> Path:
        staged = super()._stage(folder, stem, rows)
        if len(self.outcomes) == 1:
            self.stalled.set()
        deadline = time.monotonic() + 10
        while len(self.outcomes) == 1 and not self.expired() and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker thread is what stalls here
        return staged

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> int:
        self.outcomes.append("started")
        index = len(self.outcomes) - 1
        try:
            written = await super().write(rows, still_valid=still_valid)
        except OwnershipLostError:
            self.outcomes[index] = "ownership lost"
            raise
        except BaseException:
            self.outcomes[index] = "cancelled"
            raise
        self.outcomes[index] = "written"
        return written


@dataclass
class World:
    state: InMemoryCoordination
    transport: InMemoryTransport
    data_dir: Path
    tg: TaskGroup
    stops: dict[str, anyio.Event] = field(default_factory=dict)
    metrics: dict[str, HandlerMetrics] = field(default_factory=dict)

    def parquet(self) -> ParquetSink:
        return ParquetSink(ParquetSettings(data_dir=self.data_dir))

    async def start(self, handler_id: str, sink: Sink, **settings: Any) -> None:
        self.stops["leader"] = anyio.Event()
        await self.tg.start(self._run_leader)
        self.stops[handler_id] = anyio.Event()
        await self.tg.start(self._run_handler, handler_id, sink, settings)

    async def _run_handler(
        self,
        handler_id: str,
        sink: Sink,
        settings: dict[str, Any],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with (
            InMemoryMembership(self.state) as membership,
            InMemoryAssignmentStore(self.state) as store,
        ):
            options: dict[str, Any] = {
                "id": handler_id,
                "lease_ttl": 1.0,
                "stats_interval": 0.5,
                "fetch_timeout": 0.05,
                "roll_age": 0.2,
                "keepalive_interval": 0.3,
                "retry_delay": 0.1,
                "retry_cap": 0.4,
                "drain_timeout": 5.0,
            }
            metrics = self.metrics[handler_id] = HandlerMetrics(CollectorRegistry())
            handler = Handler(
                settings=HandlerSettings(**{**options, **settings}),
                membership=membership,
                store=store,
                transport=self.transport,
                sink=sink,
                metrics=metrics,
            )
            task_status.started()
            await handler.run(self.stops[handler_id])

    async def _run_leader(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with (
            InMemoryElection(self.state) as election,
            InMemoryMembership(self.state) as membership,
            InMemoryAssignmentStore(self.state) as store,
        ):
            coordinator = Coordinator(
                settings=LeaderSettings(id="leader", lease_ttl=1.0, debounce=0.05),
                partitions=PARTITIONS,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
            )
            task_status.started()
            await coordinator.run(self.stops["leader"])

    async def publish(self, count: int, project: str = "proj") -> set[str]:
        ids = [uuid.uuid4().hex for _ in range(count)]
        await self.transport.publish(
            stamp(
                project,
                [b'{"n": 1}'] * count,
                gateway_id="gw",
                first_sequence=1,
                message_ids=ids,
                received_at=time.time(),
                partitions=PARTITIONS,
            )
        )
        return set(ids)

    def landed(self) -> list[dict[str, Any]]:
        if not any(self.data_dir.rglob("*.parquet")):
            return []
        table = ds.dataset(self.data_dir, format="parquet", partitioning="hive").to_table()
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    async def until_landed(self, ids: set[str], within: float = 20.0) -> list[dict[str, Any]]:
        with anyio.fail_after(within):
            while True:
                # Rows in files under their final names are the outcome under test.
                rows = self.landed()
                if ids <= {str(r["message_id"]) for r in rows}:
                    return rows
                await anyio.sleep(0.05)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with (
        InMemoryTransport(ack_wait=ACK_WAIT, max_deliver=MAX_DELIVER) as transport,
        anyio.create_task_group() as tg,
    ):
        yield World(InMemoryCoordination(), transport, tmp_path, tg)
        tg.cancel_scope.cancel()


def _once(rows: list[dict[str, Any]], ids: set[str]) -> None:
    landed = [str(r["message_id"]) for r in rows]
    assert sorted(landed) == sorted(ids), "every message landed, and only once"


async def test_a_sink_failing_past_max_deliveries_times_ack_wait_loses_and_dead_letters_nothing(
    world: World,
) -> None:
    outage = MAX_DELIVER * ACK_WAIT + 2.0  # longer than any redelivery budget
    healed_at: list[float] = []

    def failing() -> bool:
        if not healed_at:
            healed_at.append(time.monotonic() + outage)  # the outage starts at the first write
        return time.monotonic() < healed_at[0]

    sink = FailingSink(world.parquet(), failing)
    await world.start("h1", sink)
    ids = await world.publish(300)
    rows = await world.until_landed(ids, within=outage + 15)
    _once(rows, ids)
    assert sink.failures >= 3, "the outage was seen and retried with backoff"
    assert world.transport.dead_letters == 0
    metrics = world.metrics["h1"]
    assert metrics.redelivered._value.get() == 0, "kept alive: no message came back"
    assert metrics.sink_failures._value.get() == sink.failures
    assert await world.transport.backlog(_partition_of(world, "proj")) == 0


async def test_a_handler_stalled_before_its_rename_past_its_lease_makes_nothing_visible(
    world: World,
) -> None:
    sink = StallingSink(
        ParquetSettings(data_dir=world.data_dir), expired=lambda: "h1" not in world.state.members
    )
    await world.start("h1", sink)
    ids = await world.publish(50)
    assert await anyio.to_thread.run_sync(sink.stalled.wait, 10), "the first write stalled"
    # The whole process pauses: its lease stops being renewed too.
    world.state.members["h1"].lease.pause_renewal()
    with anyio.fail_after(10):
        while not sink.outcomes or sink.outcomes[0] == "started":  # noqa: ASYNC110
            await anyio.sleep(0.02)
    # The stalled write either saw its lease gone at the check or was abandoned when the
    # handler noticed the loss; in neither case may its rows have become visible.
    assert sink.outcomes[0] in {"ownership lost", "cancelled"}
    stale = world.landed()
    assert stale == [], f"the stalled write made {len(stale)} rows visible"
    rows = await world.until_landed(ids, within=ACK_WAIT * 2 + 15)
    _once(rows, ids)
    assert world.metrics["h1"].lease_losses._value.get() >= 1


async def test_a_partition_that_fails_to_open_does_not_stop_the_others(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _partition_of(world, "proj-a")
    healthy_project = next(
        p for p in (f"proj-{i}" for i in range(100)) if _partition_of(world, p) != broken
    )
    real_open = world.transport.open
    refusals = 0

    async def open_refusing(partition: Partition, consumer_id: str) -> Subscription:
        nonlocal refusals
        if partition == broken and refusals < 3:
            refusals += 1
            raise RuntimeError(f"broker API error for partition {partition}")
        return await real_open(partition, consumer_id)

    monkeypatch.setattr(world.transport, "open", open_refusing)
    await world.start("h1", world.parquet())
    healthy = await world.publish(40, project=healthy_project)
    await world.until_landed(healthy)
    assert refusals >= 1, "the broken partition was tried"
    broken_ids = await world.publish(40, project="proj-a")
    rows = await world.until_landed(broken_ids)  # it recovered after its backoff
    _once(rows, healthy | broken_ids)
    assert refusals == 3


def _partition_of(world: World, project: str) -> Partition:
    return stamp(
        project,
        [b"{}"],
        gateway_id="gw",
        first_sequence=1,
        message_ids=["x"],
        received_at=0.0,
        partitions=PARTITIONS,
    )[0].partition
