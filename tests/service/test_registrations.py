"""Project registrations in the handler: capped per partition, refreshed while the project
sends data, expired when it stops (issue 13, point 5), over the in-memory adapters."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from adapters.memory import InMemoryProjectRegistry
from core.ingest import announcement
from tests.service._world import World, world_of

pytestmark = pytest.mark.anyio


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=1) as w:
        yield w


async def _announce(world: World, *projects: str) -> None:
    await world.transport.publish(
        [
            announcement(
                p,
                gateway_id="gw",
                message_id=uuid.uuid4().hex,
                received_at=time.time(),
                partitions=1,
            )
            for p in projects
        ]
    )


async def test_registrations_past_the_cap_are_refused_and_idle_ones_expire(world: World) -> None:
    """A cap of 2 on the one partition: of three announced projects the third is refused
    (counted; its data lands all the same). With a 2 s TTL (refreshed every 0.5 s), the
    project that keeps sending data stays registered; the idle one expires."""
    await world.start_leader("l1")
    await world.start_handler("h1", registration_ttl=2.0, max_projects_per_partition=2)
    await _announce(world, "busy", "idle", "late")
    ids = await world.publish(3, ["busy", "late"])
    await world.until_landed(ids)
    metrics = world.metrics["h1"].registry
    assert metrics.get_sample_value("shoal_handler_registrations_refused_total") == 1
    async with InMemoryProjectRegistry(world.state) as registry:
        assert await registry.projects(0, now=time.time()) == {"busy", "idle"}
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # "busy" keeps sending, "idle" does not
            ids = await world.publish(1, ["busy"])
            await anyio.sleep(0.2)
        await world.until_landed(ids)
        assert await registry.projects(0, now=time.time()) == {"busy"}
