"""The handler's landing path (``services.handler.landing.Lander`` with the zone's real
sink and ``DeltaLandedTable``, fed from the in-memory transport) under the two faults the
landed table's fence exists for, checked at the point of truth: the Delta table read
fresh, the broker's acks, the files in the zone's folder.

- A commit whose answer is lost (MinIO behind a proxy that lets the commit's PUT through
  and closes the connection instead of answering): the batch lands once, is acked once.
- A commit stored and then answered with an error that is not a conflict (a failed
  post-commit step, a store's 5xx after the write): the lander reads the table back, finds
  its commit, acks the batch once and deletes none of the files the version names.
- Two handlers racing on one partition: a zombie paused past its lease with its files
  written while the partition's next owner lands the same messages. Exactly one commit
  wins; the zombie deletes its own uncommitted files and nothing a version names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from adapters.memory import InMemoryCoordination, InMemoryMembership, InMemoryTransport
from core.errors import CommitConflictError
from core.messages import LandedRow
from core.model import Partition
from core.ports import Delivery, LandedTable, MembershipLease, Sink, Subscription
from core.table import LandedFile, LogKey
from infra.local._testservers import ServerInfo
from tests._landers import WITHIN, HeldLease, PassThroughSubscription, assert_once, publish, running
from tests._landing_zones import ZONE_KINDS, PassThroughTable, ZoneUnderTest, zone_of_kind
from tests.contract._s3 import fresh_bucket, settings_for
from tests.service._dropping_proxy import CommitAnswer, dropping_proxy

pytestmark = pytest.mark.anyio

PARTITION: Partition = 0
ACK_WAIT = 1.0


@dataclass
class Pause:
    """Where a zombie stops, as a process the OS stopped would, and when it goes on."""

    reached: anyio.Event = field(default_factory=anyio.Event)
    over: anyio.Event = field(default_factory=anyio.Event)

    async def here(self) -> None:
        self.reached.set()
        await self.over.wait()

    async def if_paused(self) -> None:
        if self.reached.is_set():
            await self.over.wait()


class RecordingSink:
    """The zone's sink, keeping every batch of files it wrote; the ``pause_at``-th write
    pauses once its files are durable."""

    def __init__(self, inner: Sink, pause: Pause | None = None, pause_at: int = 0) -> None:
        self.inner, self.pause, self.pause_at = inner, pause, pause_at
        self.written: list[Sequence[LandedFile]] = []

    async def write(
        self, rows: Sequence[LandedRow], *, still_valid: Callable[[], bool] | None = None
    ) -> Sequence[LandedFile]:
        files = await self.inner.write(rows, still_valid=still_valid)
        self.written.append(files)
        if self.pause is not None and len(self.written) == self.pause_at:
            await self.pause.here()
        return files

    async def discard(self, files: Sequence[LandedFile]) -> None:
        await self.inner.discard(files)


class RecordingTable(PassThroughTable):
    """The zone's table, counting commits and refusals; the ``pause_at``-th commit pauses
    before it reaches the table (after the lander's last ownership check)."""

    def __init__(self, inner: LandedTable, pause: Pause | None = None, pause_at: int = 0) -> None:
        super().__init__(inner)
        self.pause, self.pause_at = pause, pause_at
        self.commits = 0
        self.refused = 0

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        self.commits += 1
        if self.pause is not None and self.commits == self.pause_at:
            await self.pause.here()
        try:
            await self.inner.commit(files, tokens)
        except CommitConflictError:
            self.refused += 1
            raise


class WatchedSubscription(PassThroughSubscription):
    """A real subscription, counting the deliveries of each ack call; while its handler is
    paused nothing it sends reaches the broker (its keep-alives neither)."""

    def __init__(self, inner: Subscription, pause: Pause | None = None) -> None:
        super().__init__(inner)
        self.pause = pause or Pause()
        self.acks: list[int] = []

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await self.pause.if_paused()
        self.acks.append(len(deliveries))
        await self.inner.ack(deliveries)

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        await self.pause.if_paused()
        await self.inner.keep_alive(deliveries)

    async def acked_below(self) -> int:
        await self.pause.if_paused()
        return await self.inner.acked_below()


async def test_a_commit_whose_answer_is_lost_lands_once_and_is_acked_once(
    minio_server: ServerInfo, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shoal.handler")
    client, location = fresh_bucket(minio_server)
    zone = ZoneUnderTest(str(location), settings_for(minio_server), client)
    store = urlsplit(minio_server.url)
    assert store.hostname is not None and store.port is not None
    assert zone.s3 is not None
    async with (
        dropping_proxy(store.hostname, store.port) as proxy,
        InMemoryTransport(ack_wait=ACK_WAIT) as transport,
        zone.open(zone.s3.model_copy(update={"endpoint_url": proxy.endpoint_url})) as landing,
    ):
        assert await landing.table.refresh() == 0  # the table exists: the next commit is ours
        await proxy.arm()
        ids = await publish(transport, 200)
        subscription = WatchedSubscription(await transport.open(PARTITION, "h1"))
        async with running("h1", landing.sink, landing.table, HeldLease("h1")) as handler:
            await handler.land(subscription, len(ids))
        backlog = await transport.backlog(PARTITION)

    assert proxy.dropped.is_set(), f"no answer was lost: {proxy.answers}"
    # The commit stored once, its answer lost; delta-rs's own retry of the PUT got 412.
    stored_commits = [a for a in proxy.answers if a.status == 200 and a.version > 0]
    assert stored_commits == [CommitAnswer(1, 200, dropped=True)], proxy.answers
    assert_once(zone, ids)
    assert zone.table().version() == 1, "one commit: no second copy of the batch"
    assert subscription.acks == [len(ids)], "acked once, in one call"
    assert backlog == 0
    assert "an unconfirmed commit landed after all" in caplog.text
    assert zone.named() <= zone.stored()


@pytest.fixture(params=ZONE_KINDS)
def zone(request: pytest.FixtureRequest, tmp_path: Path) -> ZoneUnderTest:
    return zone_of_kind(request.param, tmp_path, request)


class StoredThenFailingTable(RecordingTable):
    """The zone's table whose first commit is stored, then raises an error that is not a
    conflict, as delta-rs does when its post-commit checkpoint fails."""

    async def commit(self, files: Sequence[LandedFile], tokens: Mapping[LogKey, int]) -> None:
        await super().commit(files, tokens)
        if self.commits == 1:
            raise OSError("Delta table: the store answered 500 after the commit was written")


async def test_a_commit_stored_then_answered_with_an_error_lands_once_and_keeps_its_files(
    zone: ZoneUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shoal.handler")
    async with InMemoryTransport(ack_wait=ACK_WAIT) as transport, zone.open() as landing:
        table = StoredThenFailingTable(landing.table)
        sink = RecordingSink(landing.sink)
        ids = await publish(transport, 120)
        subscription = WatchedSubscription(await transport.open(PARTITION, "h1"))
        async with running("h1", sink, table, HeldLease("h1")) as handler:
            await handler.land(subscription, len(ids))
        backlog = await transport.backlog(PARTITION)

    assert_once(zone, ids)
    assert table.commits == 1, "the stored commit was found, not made again"
    assert zone.table().version() == 1
    assert subscription.acks == [len(ids)], "acked once, after the table was read back"
    assert backlog == 0
    (written,) = sink.written
    assert {f.path for f in written} <= zone.stored(), "the committed files are kept"
    assert zone.named() <= zone.stored(), "no file a version names was deleted"
    assert "an unconfirmed commit landed after all" in caplog.text


@pytest.mark.parametrize("paused_in", ["write", "commit"])
async def test_of_a_zombie_and_the_partitions_next_owner_exactly_one_commit_wins(
    zone: ZoneUnderTest, paused_in: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``write``: the zombie stops once its files are durable, and its lease still looks
    valid to it when it goes on (a suspended machine); ``commit``: it stops after its last
    ownership check, right before its commit, while its lease expires at the store. Either
    way only the table's fence stands between its commit and a duplicate."""
    caplog.set_level(logging.INFO, logger="shoal.handler")
    pause = Pause()
    state = InMemoryCoordination()
    async with (
        InMemoryTransport(ack_wait=ACK_WAIT) as transport,
        InMemoryMembership(state) as membership,
        zone.open() as zombie_zone,
        zone.open() as next_zone,
        anyio.create_task_group() as tg,
    ):
        zombie_lease: MembershipLease = (
            HeldLease("zombie") if paused_in == "write" else await membership.join("zombie", 5.0)
        )
        zombie_sink = RecordingSink(zombie_zone.sink, pause, 2 if paused_in == "write" else 0)
        zombie_table = RecordingTable(zombie_zone.table, pause, 2 if paused_in == "commit" else 0)
        zombie_subscription = WatchedSubscription(await transport.open(PARTITION, "zombie"), pause)
        async with running("zombie", zombie_sink, zombie_table, zombie_lease) as zombie:
            first = await publish(transport, 20)
            await zombie.land(zombie_subscription, len(first))
            second = await publish(transport, 30)
            zombie_done = anyio.Event()

            async def zombie_lands_the_second_batch() -> None:
                await zombie.land(zombie_subscription, len(second))
                zombie_done.set()

            tg.start_soon(zombie_lands_the_second_batch)
            with anyio.fail_after(WITHIN):
                await pause.reached.wait()
            paused_with = {f.path for f in zombie_sink.written[-1]}
            assert paused_with <= await anyio.to_thread.run_sync(zone.stored), "written, durable"
            if paused_in == "commit":
                state.expire("zombie")
            next_lease = await membership.join("next", 5.0)
            next_sink = RecordingSink(next_zone.sink)
            next_subscription = WatchedSubscription(await transport.open(PARTITION, "next"))
            async with running("next", next_sink, next_zone.table, next_lease) as next_owner:
                # The zombie's deliveries expire (it sends no keep-alive while paused).
                await next_owner.land(next_subscription, len(second), within=ACK_WAIT + WITHIN)
            pause.over.set()
            with anyio.fail_after(WITHIN):
                await zombie_done.wait()
        backlog = await transport.backlog(PARTITION)

    assert_once(zone, first + second)
    assert backlog == 0
    assert zombie_table.commits == 2 and zombie_table.refused == 1, "the fence refused it"
    assert zone.table().version() == 2, "versions: the table, the zombie's first, the next's"
    assert next_subscription.acks == [len(second)]
    zombies_committed, zombies_refused = zombie_sink.written
    assert {f.path for f in zombies_refused} == paused_with
    stored = zone.stored()
    assert paused_with.isdisjoint(stored), "the loser's files are gone"
    assert {f.path for f in zombies_committed} <= stored
    assert {f.path for batch in next_sink.written for f in batch} <= stored
    assert zone.named() <= stored, "no file a version names was deleted"
    assert "commit refused" in caplog.text
    if paused_in == "commit":
        assert zombie.metrics.dropped._value.get() == len(second), "the zombie acked nothing"
