"""The leader's lag across datacenters (``ClusterBacklogs``): a partition's backlog is the
sum over every cluster, and unknown while any cluster does not answer."""

from __future__ import annotations

import pytest

from adapters.memory import InMemoryTransport
from core.errors import BrokerUnavailableError
from core.partitioning import partition_for
from services.common.clusters import ClusterBacklogs
from tests.contract._transport import envelope

pytestmark = pytest.mark.anyio


class Down(InMemoryTransport):
    async def backlog(self, partition: int) -> int:
        raise BrokerUnavailableError("no answer")


async def test_the_backlog_is_summed_over_clusters_and_unknown_while_one_is_down() -> None:
    partition = partition_for("p", 4)
    async with InMemoryTransport() as east, InMemoryTransport() as west, Down() as down:
        await east.publish([envelope(partition, "p", s) for s in (1, 2)])
        await west.publish([envelope(partition, "p", 3)])
        assert await ClusterBacklogs({"east": east, "west": west}).backlog(partition) == 3
        with pytest.raises(BrokerUnavailableError, match="cluster north: no answer"):
            await ClusterBacklogs({"east": east, "north": down}).backlog(partition)
