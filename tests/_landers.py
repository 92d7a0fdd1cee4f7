"""One handler's landing path in a test: its ``Lander`` over a zone's sink and table and a
lease, fed by the test (fetch, add, flush), so every landing is one step of the test."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from prometheus_client import CollectorRegistry

from core.ingest import stamp
from core.landing import RollPolicy
from core.messages import LandedRow
from core.model import MemberId, Partition
from core.ports import Delivery, LandedTable, MembershipLease, Sink, Subscription, Transport
from services.handler.landing import Lander, LandingOptions
from services.handler.metrics import HandlerMetrics
from tests._landing_zones import ZoneUnderTest

__all__ = [
    "OPTIONS",
    "WITHIN",
    "HeldLease",
    "LandingPath",
    "PassThroughSubscription",
    "assert_once",
    "publish",
    "running",
]

WITHIN = 60.0  # bounds every wait: a hang fails the test instead of the run
# Batches roll only when the test flushes them: each landing is one step of the test.
OPTIONS = LandingOptions(
    policy=RollPolicy(max_age=3600.0, idle_age=3600.0),
    write_timeout=30.0,
    ownership_margin=0.0,
    keepalive_interval=0.3,
    retry_base=0.05,
    retry_cap=0.2,
    floor_interval=0.2,
)


class HeldLease:
    """A membership lease as its holder sees it: valid until ``leave``. A zombie whose
    machine was suspended sees this (the monotonic clock stood still), whatever the store
    decided meanwhile."""

    def __init__(self, member_id: MemberId) -> None:
        self._member_id = member_id
        self._lost = anyio.Event()

    @property
    def member_id(self) -> MemberId:
        return self._member_id

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set()

    async def wait_lost(self) -> None:
        await self._lost.wait()

    async def leave(self) -> None:
        self._lost.set()


@dataclass
class LandingPath:
    """One handler's landing path: its lander over its own sink, table and lease."""

    name: str
    lander: Lander
    metrics: HandlerMetrics

    async def land(
        self,
        subscription: Subscription,
        count: int,
        within: float = WITHIN,
        partition: Partition = 0,
    ) -> None:
        """Fetch ``count`` deliveries, buffer them, and land (or drop) them now."""
        deliveries: list[Delivery] = []
        with anyio.fail_after(within):
            while len(deliveries) < count:
                deliveries.extend(await subscription.fetch(count - len(deliveries), 0.5))
        rows = [
            LandedRow(
                d.envelope,
                1,
                self.name,
                time.time(),
                log_id=subscription.log_id,
                position=d.position,
            )
            for d in deliveries
        ]
        self.lander.add(partition, subscription, deliveries, rows)
        with anyio.fail_after(WITHIN):
            await self.lander.flush(subscription)


@asynccontextmanager
async def running(
    name: str, sink: Sink, table: LandedTable, lease: MembershipLease
) -> AsyncIterator[LandingPath]:
    metrics = HandlerMetrics(CollectorRegistry())
    lander = Lander(
        sink=sink,
        table=table,
        lease=lease,
        options=OPTIONS,
        metrics=metrics,
        on_landed=lambda rows: None,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(lander.run)
        yield LandingPath(name, lander, metrics)
        tg.cancel_scope.cancel()


class PassThroughSubscription:
    """A Subscription handing every call to ``inner``: a test overrides what it watches."""

    def __init__(self, inner: Subscription) -> None:
        self.inner = inner

    @property
    def log_id(self) -> str:
        return self.inner.log_id

    @property
    def ack_wait(self) -> float:
        return self.inner.ack_wait

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109
        return await self.inner.fetch(max_messages, timeout)

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await self.inner.ack(deliveries)

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        await self.inner.keep_alive(deliveries)

    async def acked_below(self) -> int:
        return await self.inner.acked_below()

    async def close(self) -> None:
        await self.inner.close()


async def publish(transport: Transport, count: int) -> list[str]:
    """``count`` messages of one project to partition 0 (one partition), their ids: one
    publish each, so each holds a position of its own (published together they would share
    one pack, ``core.packing``), as the tests of reused positions count them."""
    ids = [uuid.uuid4().hex for _ in range(count)]
    envelopes = stamp(
        "proj",
        [b'{"n": 1}'] * count,
        gateway_id="gw",
        first_sequence=1,
        message_ids=ids,
        received_at=time.time(),
        partitions=1,
    )
    for envelope in envelopes:
        await transport.publish([envelope])
    return ids


def assert_once(zone: ZoneUnderTest, ids: Collection[str]) -> None:
    """The zone's table holds each of ``ids`` once, and nothing else."""
    landed = Counter(zone.message_ids())
    assert set(ids) - set(landed) == set(), "every message landed"
    assert [m for m, n in landed.items() if n > 1] == [], "a message landed twice"
    assert set(landed) == set(ids), "nothing else landed"
