"""The landing path under faults, with a leader and a handler in one process over the
in-memory adapters (contract-tested like the real ones) and a real Parquet sink:

- a sink that fails for longer than max deliveries x ack wait loses nothing and
  dead-letters nothing: the batch stays buffered, kept alive, and is written again;
- a handler stalled between its ownership check and its rename, past its lease, makes
  nothing visible, and the messages land (once) after it rejoins;
- a handler whose commit is refused while its lease runs out (a zombie fenced by the
  table) deletes the files of that commit all the same;
- a failure in one partition (the broker refusing to open it) stays in that partition.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from adapters.delta.table import DeltaLandedTable
from adapters.parquet import ParquetSettings, ParquetSink
from adapters.parquet._sink import _Handoff
from core.errors import CommitConflictError, OwnershipLostError
from core.messages import LandedRow
from core.model import Partition
from core.partitioning import partition_for
from core.ports import Sink, Subscription
from core.table import LandedFile, LogKey
from tests.service._world import World, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 4
ACK_WAIT = 1.0
MAX_DELIVER = 3
LIMIT = 15.0


class FailingSink:
    """A real ParquetSink behind a switch: while ``failing()`` says so, every write fails
    the way a full disk does, before anything reaches the disk."""

    def __init__(self, inner: Sink, failing: Callable[[], bool]) -> None:
        self.inner = inner
        self.failing = failing
        self.failures = 0

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        if self.failing():
            self.failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return await self.inner.write(rows, still_valid=still_valid)

    async def discard(self, files: Sequence[LandedFile]) -> None:
        await self.inner.discard(files)


class StallingSink(ParquetSink):
    """The real ParquetSink, whose first write stalls in its worker thread (as a paused
    process would) after the data is encoded and before the ownership check that precedes
    storing it, until the handler's lease has expired."""

    def __init__(self, settings: ParquetSettings, expired: Callable[[], bool]) -> None:
        super().__init__(settings)
        self.expired = expired
        self.outcomes: list[str] = []
        self.stalled = threading.Event()

    def _write_sync(
        self, rows: list[LandedRow], valid: Callable[[], bool], handoff: _Handoff
    ) -> tuple[LandedFile, ...]:
        def stalling_valid() -> bool:
            if len(self.outcomes) == 1:
                self.stalled.set()
            deadline = time.monotonic() + 10
            while len(self.outcomes) == 1 and not self.expired() and time.monotonic() < deadline:
                time.sleep(0.01)  # the worker thread is what stalls here
            return valid()

        return super()._write_sync(rows, stalling_valid, handoff)

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
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


class FencedTable(DeltaLandedTable):
    """The real table, whose first commit is refused the way the table fences a zombie,
    once the handler's lease is lost (its renewals paused while the commit was on its
    way): the handler learns both at once."""

    def __init__(self, uri: str, pause: Callable[[], None], lost: Callable[[], bool]) -> None:
        super().__init__(uri)
        self.pause, self.lost = pause, lost
        self.refused: list[LandedFile] = []

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        if not self.refused:
            self.refused.extend(files)
            self.pause()
            # Shielded as the real commit is: it ends whatever its caller's fate.
            with anyio.CancelScope(shield=True), anyio.fail_after(LIMIT):
                while not self.lost():  # noqa: ASYNC110 (the lease offers no event here)
                    await anyio.sleep(0.02)
            raise CommitConflictError("Concurrent transaction failed (a zombie's commit)")
        await super().commit(files, tokens)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=PARTITIONS, ack_wait=ACK_WAIT) as w:
        yield w


async def start(world: World, handler_id: str, sink: Sink) -> None:
    await world.start_leader("leader")
    await world.start_handler(
        handler_id,
        sink=sink,
        keepalive_interval=0.3,
        retry_delay=0.1,
        retry_cap=0.4,
        drain_timeout=5.0,
        max_deliver=MAX_DELIVER,
    )


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
    await start(world, "h1", sink)
    ids = await world.publish(300)
    rows = await world.until_landed(ids, within=outage + 15)
    _once(rows, ids)
    assert sink.failures >= 3, "the outage was seen and retried with backoff"
    assert world.transport.dead_letters == 0
    metrics = world.metrics["h1"]
    assert metrics.redelivered._value.get() == 0, "kept alive: no message came back"
    assert metrics.sink_failures._value.get() == sink.failures
    await world.until_settled(partition_for("proj", PARTITIONS))


async def test_a_message_back_after_max_deliver_deliveries_is_dead_lettered_and_the_rest_lands(
    world: World,
) -> None:
    partition = partition_for("proj", PARTITIONS)
    (poison,) = await world.publish(1)
    # Handlers that crashed on it: each delivery is left to expire.
    crashed = await world.transport.open(partition, "crashed")
    attempts: list[int] = []
    with anyio.fail_after(LIMIT + MAX_DELIVER * ACK_WAIT):
        while len(attempts) < MAX_DELIVER:
            attempts.extend(d.attempt for d in await crashed.fetch(1, ACK_WAIT))
    # never closed: a crash gives nothing back knowingly, so its deliveries count
    assert attempts == list(range(1, MAX_DELIVER + 1))
    assert world.transport.dead_letters == 0, "the transport itself never gives up"
    ids = await world.publish(40)
    await start(world, "h1", world.parquet())
    with anyio.fail_after(ACK_WAIT + LIMIT):
        # The transport's dead-letter count is the point of truth; it offers no event.
        while world.transport.dead_letters < 1:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    rows = await world.until_landed(ids)
    _once(rows, ids)
    assert poison not in {str(r["message_id"]) for r in rows}
    assert world.transport.dead_letters == 1
    assert world.metrics["h1"].dead_lettered._value.get() == 1
    await world.until_settled(partition)


async def test_a_handler_stalled_before_storing_its_file_past_its_lease_makes_nothing_visible(
    world: World,
) -> None:
    sink = StallingSink(
        ParquetSettings(data_dir=world.data_dir),
        expired=lambda: "h1" not in world.state.model.members,
    )
    await start(world, "h1", sink)
    ids = await world.publish(50)
    assert await anyio.to_thread.run_sync(sink.stalled.wait, 10), "the first write stalled"
    # The whole process pauses: its lease stops being renewed too.
    world.state.member_leases["h1"].pause_renewal()
    with anyio.fail_after(10):
        while not sink.outcomes or sink.outcomes[0] == "started":  # noqa: ASYNC110
            await anyio.sleep(0.02)
    # The stalled write either saw its lease gone at the check or was abandoned when the
    # handler noticed the loss; in neither case may its rows have become visible.
    assert sink.outcomes[0] in {"ownership lost", "cancelled"}
    stale = await world.landed()
    assert stale == [], f"the stalled write made {len(stale)} rows visible"
    rows = await world.until_landed(ids, within=ACK_WAIT * 2 + 15)
    _once(rows, ids)
    assert world.metrics["h1"].lease_losses._value.get() >= 1


async def test_a_commit_refused_as_the_lease_runs_out_leaves_none_of_its_files(
    world: World,
) -> None:
    def pause() -> None:  # h1's lease is there only once it has joined
        world.state.member_leases["h1"].pause_renewal()

    table = FencedTable(
        str(world.data_dir), pause=pause, lost=lambda: "h1" not in world.state.model.members
    )
    await world.start_leader("leader")
    await world.start_handler("h1", table=table, keepalive_interval=0.3, retry_delay=0.1)
    ids = await world.publish(50)
    rows = await world.until_landed(ids, within=ACK_WAIT * 2 + LIMIT)
    _once(rows, ids)
    assert table.refused, "the first commit was refused"
    left = [f.path for f in table.refused if (world.data_dir / f.path).exists()]
    assert left == [], "the refused commit's files were deleted"
    assert world.metrics["h1"].lease_losses._value.get() >= 1


async def test_a_partition_that_fails_to_open_does_not_stop_the_others(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = partition_for("proj-a", PARTITIONS)
    healthy_project = next(
        p for p in (f"proj-{i}" for i in range(100)) if partition_for(p, PARTITIONS) != broken
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
    await start(world, "h1", world.parquet())
    healthy = await world.publish(40, projects=[healthy_project])
    await world.until_landed(healthy)
    assert refusals >= 1, "the broken partition was tried"
    broken_ids = await world.publish(40, projects=["proj-a"])
    rows = await world.until_landed(broken_ids)  # it recovered after its backoff
    _once(rows, healthy | broken_ids)
    assert refusals == 3


async def test_a_message_whose_partition_is_dropped_20_times_unlanded_is_not_dead_lettered(
    tmp_path: Path,
) -> None:
    """Shoal's own redeliveries spend no attempt: the partition's handler loses its lease
    20 times in a row while the sink fails, each time holding the message unlanded (the
    subscription is closed on purpose and excuses it). Then the sink heals and the
    message lands; nothing was dead-lettered although it was delivered 21 times."""
    healed = False
    async with world_of(tmp_path, partitions=PARTITIONS, ack_wait=0.5) as world:
        sink = FailingSink(world.parquet(), lambda: not healed)
        await start(world, "h1", sink)
        ids = await world.publish(1)
        delivered = world.metrics["h1"].delivered
        for drops in range(20):
            with anyio.fail_after(LIMIT):
                # The handler's delivery count is the point of truth; it offers no event.
                while delivered._value.get() <= drops or sink.failures <= drops:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            world.state.expire("h1")  # the lease drops; the process lives on and rejoins
        healed = True
        rows = await world.until_landed(ids, within=LIMIT)
        _once(rows, ids)
        assert delivered._value.get() > MAX_DELIVER * 5
        assert world.transport.dead_letters == 0
        assert world.metrics["h1"].dead_lettered._value.get() == 0
