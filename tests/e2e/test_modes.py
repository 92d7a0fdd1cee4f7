"""Consumption modes end to end, on real processes (gateway, leader, handlers on etcd and
NATS): a shared group with more handlers than partitions lands every accepted message
exactly once, several handlers landing each partition, also when one of them is killed
under load; each handler of a broadcast group
lands every accepted message once, in a table of its own (on NATS and on Kafka), and
one stopped meanwhile catches up from its own position when it comes back."""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection

import anyio
import pyarrow.compute as pc
import pytest

from core.modes import broadcast_zone
from tests.e2e._cluster import Cluster, StatusDoc, member_ids
from tests.e2e._landed import LandingZone, duplicates
from tests.e2e._load import LoadGenerator, LoadPlan

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SMALL_ROLLS = {"SHOAL_HANDLER_ROLL_ROWS": "300"}
MESSAGES = 4_000
LOAD = LoadPlan(messages=MESSAGES, projects=200, batch=20, concurrency=4, rate=2_000.0)


def assigned(doc: StatusDoc, members: Collection[str], per_partition: int) -> bool:
    """A leader leads exactly ``members``, and every partition has ``per_partition``
    owners, among whom every member."""
    if doc.get("leader") is None or member_ids(doc) != set(members):
        return False
    seen: set[str] = set()
    for entry in doc["partitions"]:
        owner = entry["owner"]
        names = {owner} if isinstance(owner, str) else set(owner or ())
        if len(names) != per_partition:
            return False
        seen |= names
    return seen == set(members)


async def send(cluster: Cluster) -> set[str]:
    """Send ``LOAD`` through the gateway; the accepted message ids (all of them)."""
    summary = await LoadGenerator(cluster.process("gateway").url, LOAD).run()
    accepted = set(summary.accepted)
    assert len(accepted) == MESSAGES, summary.line()
    return accepted


async def wait_landed(zone: LandingZone, ids: set[str], within: float) -> None:
    """Return once ``zone`` holds every one of ``ids``; fail after ``within`` seconds."""
    with anyio.fail_after(within):
        while True:
            await anyio.to_thread.run_sync(zone.refresh)
            if ids <= zone.ids().keys():
                return
            await anyio.sleep(0.3)  # the zone is a folder: no event to await


@pytest.mark.nats
async def test_a_shared_group_with_more_handlers_than_partitions_lands_everything_once(
    make_cluster: Callable[..., Cluster],
) -> None:
    handlers = ("h1", "h2", "h3", "h4")
    cluster = make_cluster(
        "shared",
        partitions=2,
        settings={"SHOAL_CONSUMPTION_MODE": "shared", "SHOAL_STRATEGY": "fan-out"},
    )
    with anyio.fail_after(110):
        async with cluster:
            await cluster.start_gateway(ready=False)
            await cluster.start_leader("leader-a", ready=False)
            for name in handlers:
                await cluster.start_handler(name, ready=False)
            for name in ("gateway", "leader-a"):
                await cluster.wait_ready(name, within=60.0)
            await cluster.wait_for(
                lambda d: assigned(d, handlers, per_partition=2), 60.0, "2 owners per partition"
            )
            zone = LandingZone(cluster.data_dir)
            accepted = await send(cluster)
            await wait_landed(zone, accepted, within=60.0)
    ids = zone.ids()
    assert not duplicates(ids), f"landed twice: {sorted(duplicates(ids))[:5]}"
    assert set(ids) == accepted
    table = zone.table()
    for partition in (0, 1):
        rows = table.filter(pc.equal(table["partition"], partition))
        landers = set(rows["handler_id"].to_pylist())
        assert len(landers) == 2, f"partition {partition} landed by {landers}: no competition"


@pytest.mark.nats
async def test_a_shared_group_lands_everything_once_when_a_handler_is_killed_mid_load(
    make_cluster: Callable[..., Cluster],
) -> None:
    """SIGKILL one of a partition's two owners while messages arrive: what it held unacked
    goes to its partition's other owner after the ack wait (they share the durable
    consumer), and what it had landed but not acked is acked by whoever gets it again,
    not landed twice."""
    handlers = ["h1", "h2", "h3", "h4"]
    cluster = make_cluster(
        "shared-kill",
        partitions=2,
        settings={"SHOAL_CONSUMPTION_MODE": "shared", "SHOAL_STRATEGY": "fan-out"},
    )
    with anyio.fail_after(110):
        async with cluster, anyio.create_task_group() as tg:
            await cluster.start_gateway(ready=False)
            await cluster.start_leader("leader-a", ready=False)
            for name in handlers:
                # a roll every 300 rows: the kill falls between some write, commit and ack
                await cluster.start_handler(name, ready=False, env=SMALL_ROLLS)
            for name in ("gateway", "leader-a"):
                await cluster.wait_ready(name, within=60.0)
            await cluster.wait_for(
                lambda d: assigned(d, handlers, per_partition=2), 60.0, "2 owners per partition"
            )
            zone = LandingZone(cluster.data_dir)
            load = LoadGenerator(cluster.process("gateway").url, LOAD)
            tg.start_soon(load.run)
            await load.wait_accepted(MESSAGES // 3)
            cluster.kill("h1", signal.SIGKILL)
            assert await cluster.wait_exit("h1", 5.0) == -signal.SIGKILL
            await load.wait_stopped()
            accepted = set(load.summary.accepted)
            assert len(accepted) == MESSAGES, load.summary.line()
            await wait_landed(zone, accepted, within=60.0)
    ids = zone.ids()
    assert not duplicates(ids), f"landed twice: {sorted(duplicates(ids))[:5]}"
    assert set(ids) == accepted


@pytest.mark.parametrize(
    ("coordination", "transport"),
    [
        pytest.param("etcd", "nats", marks=pytest.mark.nats),
        pytest.param("kafka", "kafka", marks=pytest.mark.kafka),
    ],
)
async def test_every_handler_of_a_broadcast_group_lands_every_message_once(
    make_cluster: Callable[..., Cluster], coordination: str, transport: str
) -> None:
    handlers = ("ha", "hb")
    cluster = make_cluster(
        f"broadcast-{transport}",
        coordination=coordination,
        transport=transport,
        partitions=4,
        settings={"SHOAL_CONSUMPTION_MODE": "broadcast", "SHOAL_STRATEGY": "broadcast"},
    )
    with anyio.fail_after(110):
        async with cluster:
            await cluster.start_gateway(ready=False)
            await cluster.start_leader("leader-a", ready=False)
            for name in handlers:
                await cluster.start_handler(name, ready=False)
            for name in ("gateway", "leader-a"):
                await cluster.wait_ready(name, within=60.0)
            await cluster.wait_for(
                lambda d: assigned(d, handlers, per_partition=2), 60.0, "both own everything"
            )
            zones = {
                name: LandingZone(broadcast_zone(str(cluster.data_dir), name)) for name in handlers
            }
            accepted = await send(cluster)
            for zone in zones.values():
                await wait_landed(zone, accepted, within=60.0)
            # hb stops; what arrives meanwhile waits at its position, not only at ha's
            cluster.kill("hb", signal.SIGTERM)
            assert await cluster.wait_exit("hb", 30.0) == 0
            await cluster.wait_for(lambda d: assigned(d, ["ha"], 1), 30.0, "ha alone")
            later = await send(cluster)
            await wait_landed(zones["ha"], later, within=60.0)
            await cluster.start_handler("hb")
            await wait_landed(zones["hb"], later, within=60.0)
            accepted |= later
    for name, zone in zones.items():
        ids = zone.ids()
        assert not duplicates(ids), f"{name} landed twice: {sorted(duplicates(ids))[:5]}"
        assert set(ids) == accepted
        assert set(zone.table()["handler_id"].to_pylist()) == {name}
