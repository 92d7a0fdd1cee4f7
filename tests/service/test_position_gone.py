"""A subscription whose log no longer holds its position (``PositionGoneError``: a Kafka
offset out of range after the topic was re-created, a NATS consumer gone with its stream)
is closed by the handler's worker, and the partition opened again: every message lands
once. The transport is the in-memory one, with the first subscription of each partition
breaking after a few fetches as a re-created log breaks it."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from adapters.memory import InMemoryCoordination, InMemoryTransport
from core.errors import PositionGoneError
from core.model import Partition
from core.ports import Delivery, Subscription
from tests._landers import PassThroughSubscription
from tests.service._world import World

pytestmark = pytest.mark.anyio

PARTITIONS = 4
GOOD_FETCHES = 3


class GoneAfterAFewFetches(PassThroughSubscription):
    """A real subscription that raises ``PositionGoneError`` from its fourth fetch on."""

    def __init__(self, inner: Subscription) -> None:
        super().__init__(inner)
        self.fetches = 0

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109
        self.fetches += 1
        if self.fetches > GOOD_FETCHES:
            raise PositionGoneError("the test's log was re-created")
        return await self.inner.fetch(max_messages, timeout)


class BreakingTransport(InMemoryTransport):
    """Each partition's first subscription breaks; the ones opened after it do not."""

    def __init__(self) -> None:
        super().__init__(ack_wait=1.0)
        self.opened: Counter[Partition] = Counter()
        self.every_partition_reopened = anyio.Event()

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        inner = await super().open(partition, consumer_id)
        self.opened[partition] += 1
        if all(self.opened[p] >= 2 for p in range(PARTITIONS)):
            self.every_partition_reopened.set()
        return GoneAfterAFewFetches(inner) if self.opened[partition] == 1 else inner


async def test_a_partition_whose_position_is_gone_is_opened_again_and_lands_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="shoal.handler")
    async with BreakingTransport() as transport, anyio.create_task_group() as tg:
        world = World(InMemoryCoordination(), transport, tmp_path, tg, PARTITIONS)
        await world.start_leader("l1")
        await world.start_handler("h1")
        projects = [f"p{n}" for n in range(16)]
        ids = await world.publish(400, projects=projects)
        await world.until_landed(ids, within=60)
        with anyio.fail_after(60):  # idle fetches break every first subscription
            await transport.every_partition_reopened.wait()
        ids |= await world.publish(400, projects=projects)
        rows = await world.until_landed(ids, within=60)
        tg.cancel_scope.cancel()

    landed = Counter(str(r["message_id"]) for r in rows)
    assert set(landed) == ids
    assert [m for m, n in landed.items() if n > 1] == [], "a message landed twice"
    assert "opening the partition again" in caplog.text
