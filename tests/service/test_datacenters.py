"""Across datacenters: the leader's lag (``ClusterBacklogs``) is a partition's backlog
summed over every cluster, unknown while one does not answer; a cluster down when a
process starts (``LateCluster``) is connected in the background."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import anyio
import pytest

from adapters.memory import InMemoryTransport
from core.errors import BrokerUnavailableError, PublishError
from core.partitioning import partition_for
from core.ports import Transport
from services.common.clusters import ClusterBacklogs, LateCluster
from tests.contract._transport import envelope

pytestmark = pytest.mark.anyio


class Down(InMemoryTransport):
    async def backlog(self, partition: int) -> int:
        raise BrokerUnavailableError("no answer")

    async def oldest_unacked(self, partition: int) -> float | None:
        raise BrokerUnavailableError("no answer")


async def test_the_backlog_is_summed_over_clusters_and_unknown_while_one_is_down() -> None:
    partition = partition_for("p", 4)
    async with InMemoryTransport() as east, InMemoryTransport() as west, Down() as down:
        await east.publish([envelope(partition, "p", s) for s in (1, 2)])
        await west.publish([envelope(partition, "p", 3)])
        assert await ClusterBacklogs({"east": east, "west": west}).backlog(partition) == 3
        with pytest.raises(BrokerUnavailableError, match="cluster north: no answer"):
            await ClusterBacklogs({"east": east, "north": down}).backlog(partition)


async def test_the_oldest_unacked_message_is_the_oldest_over_clusters() -> None:
    partition = partition_for("p", 4)
    async with (
        InMemoryTransport(clock=lambda: 200.0) as east,
        InMemoryTransport(clock=lambda: 100.0) as west,
        InMemoryTransport() as idle,
        Down() as down,
    ):
        await east.publish([envelope(partition, "p", 1)])
        await west.publish([envelope(partition, "p", 2)])
        assert await ClusterBacklogs({"east": east, "west": west}).oldest_unacked(partition) == 100
        assert await ClusterBacklogs({"east": east, "idle": idle}).oldest_unacked(partition) == 200
        assert await ClusterBacklogs({"idle": idle}).oldest_unacked(partition) is None
        with pytest.raises(BrokerUnavailableError, match="cluster north: no answer"):
            await ClusterBacklogs({"east": east, "north": down}).oldest_unacked(partition)


async def test_a_late_cluster_refuses_until_it_connects_then_serves() -> None:
    """``LateCluster``: a process starts while a datacenter is down; the cluster refuses as
    a down one does until a background attempt connects."""
    attempts = 0
    inner = InMemoryTransport()

    class Unreachable:
        async def __aenter__(self) -> InMemoryTransport:
            raise ConnectionRefusedError("nobody listens")

        async def __aexit__(self, *exc: object) -> None:
            return None

    def make() -> AbstractAsyncContextManager[Transport]:
        nonlocal attempts
        attempts += 1
        return inner if attempts >= 3 else Unreachable()

    late = LateCluster("east", make, InMemoryTransport.features)
    async with anyio.create_task_group() as tg:
        await tg.start(late.run)  # started after the first (failed) attempt
        with pytest.raises(PublishError, match="cluster east not connected yet"):
            await late.publish([envelope(0)])
        with pytest.raises(BrokerUnavailableError):
            await late.open(0, "h")
        with anyio.fail_after(10):
            while True:  # the background retries (0.5 s, then 1 s): no event to await
                if attempts >= 3 and late._inner is not None:
                    break
                await anyio.sleep(0.05)
        await late.publish([envelope(0)])
        assert await late.backlog(0) == 1
        tg.cancel_scope.cancel()
