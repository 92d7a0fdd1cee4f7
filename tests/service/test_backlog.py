"""Backlog monitoring (issue 15, point 3) over the in-memory adapters: the alert is logged
once when a partition's oldest unacked message passes the threshold and once when it
recovers; the status document shows each partition's oldest age, the group's totals, and
the projects ranked by the rows the handlers landed."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from adapters.memory import (
    InMemoryTransport,
)
from core.ingest import announcement
from core.messages import Envelope
from services.leader.backlog import BacklogAlerter, BacklogReader
from tests.service._world import World, status_reader, world_of

pytestmark = pytest.mark.anyio


class Clock:
    """A wall clock the test moves: the broker's store times and the leader's ages."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _message(partition: int, n: int) -> Envelope:
    return Envelope(
        message_id=uuid.uuid4().hex,
        project_id="p",
        partition=partition,
        gateway_id="gw",
        sequence=n,
        received_at=time.time(),
        payload=b"{}",
    )


def _alert_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.getMessage(), getattr(r, "fields", {}))
        for r in caplog.records
        if r.name == "shoal.leader.backlog" and r.levelno == logging.WARNING
    ]


async def test_the_alert_is_logged_once_when_crossed_and_once_when_recovered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(1000.0)
    registry = CollectorRegistry()
    async with InMemoryTransport(clock=clock) as transport:
        reader = BacklogReader(transport, 2, ttl=0.0, clock=clock, registry=registry)
        alerter = BacklogAlerter(
            reader,
            group="g1",
            threshold=60.0,
            interval=1.0,
            is_active=lambda: True,
            registry=registry,
        )
        await transport.publish([_message(1, n) for n in (1, 2, 3)])
        clock.now = 1060.0  # at the threshold: not past it
        await alerter.look()
        assert _alert_lines(caplog) == []
        clock.now = 1061.0
        await alerter.look()
        clock.now = 1070.0
        await alerter.look()  # still too old: nothing more is logged
        assert _alert_lines(caplog) == [
            (
                "partition backlog too old",
                {
                    "group": "g1",
                    "partition": 1,
                    "oldest_unacked_age_s": 61.0,
                    "lag": 3,
                    "threshold_s": 60.0,
                },
            )
        ]
        assert registry.get_sample_value("shoal_backlog_alerting_partitions") == 1
        assert registry.get_sample_value("shoal_backlog_alerts_total") == 1
        assert (
            registry.get_sample_value(
                "shoal_partition_oldest_unacked_age_seconds", {"partition": "1"}
            )
            == 70.0
        )
        assert registry.get_sample_value("shoal_partition_lag", {"partition": "1"}) == 3

        sub = await transport.open(1, "h1")
        await sub.ack(await sub.fetch(3, 1.0))
        caplog.clear()
        await alerter.look()
        await alerter.look()
        assert _alert_lines(caplog) == [
            (
                "partition backlog recovered",
                {
                    "group": "g1",
                    "partition": 1,
                    "oldest_unacked_age_s": None,
                    "lag": 0,
                    "threshold_s": 60.0,
                },
            )
        ]
        assert registry.get_sample_value("shoal_backlog_alerting_partitions") == 0
        assert registry.get_sample_value("shoal_backlog_alerts_total") == 1
        assert (
            registry.get_sample_value(
                "shoal_partition_oldest_unacked_age_seconds", {"partition": "1"}
            )
            == 0.0
        )


async def test_a_standby_logs_no_alert_and_alerts_once_it_leads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(1000.0)
    active = False
    async with InMemoryTransport(clock=clock) as transport:
        reader = BacklogReader(transport, 1, ttl=0.0, clock=clock)
        alerter = BacklogAlerter(
            reader, group="g1", threshold=1.0, interval=0.01, is_active=lambda: active
        )
        await transport.publish([_message(0, 1)])
        clock.now = 2000.0
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(alerter.run, stop)
            # An absence has no event: ten intervals pass, an active alerter would have
            # alerted in the first.
            await anyio.sleep(0.1)
            assert _alert_lines(caplog) == []
            active = True
            with anyio.fail_after(5):
                while True:  # the alerter's state is the outcome; it sets no event
                    if alerter.alerting:
                        break
                    await anyio.sleep(0.01)
            stop.set()
        assert [message for message, _ in _alert_lines(caplog)] == ["partition backlog too old"]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=1) as w:
        yield w


async def test_the_status_document_ranks_projects_by_the_rows_landed(world: World) -> None:
    """Handlers rank their registered projects by rows landed; the leader merges the
    reports. ``unknown`` is never announced, so it is not ranked though it sends more
    than ``mid``."""
    await world.start_leader("l1")
    await world.start_handler("h1", top_projects=2)
    await world.transport.publish(
        [
            announcement(
                p,
                gateway_id="gw",
                message_id=uuid.uuid4().hex,
                received_at=time.time(),
                partitions=1,
            )
            for p in ("big", "mid", "small")
        ]
    )
    ids = await world.publish(6, ["big"])
    ids |= await world.publish(3, ["mid"])
    ids |= await world.publish(1, ["small"])
    ids |= await world.publish(5, ["unknown"])
    await world.until_landed(ids)
    async with AsyncExitStack() as stack:
        backlog = BacklogReader(world.transport, 1, ttl=0.0)
        reader = await status_reader(world, stack, backlog, group="g1", top_projects=3)
        expected = [{"project": "big", "messages": 6}, {"project": "mid", "messages": 3}]
        with anyio.fail_after(10):
            while True:  # load reports are polled by design: there is no event to await
                document = await reader.document()
                if document["top_projects"] == expected:
                    break
                await anyio.sleep(0.05)
        assert document["group"] == {
            "name": "g1",
            "mode": "exclusive",
            "total_lag": 0,
            "unknown_lag": 0,
            "max_oldest_unacked_age_s": None,
            "alert_age_s": 60.0,
            "alerting": [],
        }
        assert document["partitions"][0]["oldest_unacked_age_s"] is None
        assert "top_projects" not in document["members"][0]


async def test_the_status_document_shows_the_oldest_age_and_the_alerting_partitions(
    world: World,
) -> None:
    """No handler: the messages stay unacked; ages by the leader's clock."""
    await world.start_leader("l1")
    stored_at = time.time()
    await world.transport.publish([_message(0, 1), _message(0, 2)])
    async with AsyncExitStack() as stack:
        backlog = BacklogReader(world.transport, 1, ttl=0.0, clock=lambda: stored_at + 90.0)
        reader = await status_reader(world, stack, backlog, alert_age=30.0)
        document = await reader.document()
    (partition,) = document["partitions"]
    assert partition["lag"] == 2
    assert 89.0 <= partition["oldest_unacked_age_s"] <= 90.0  # stored just after stored_at
    group = document["group"]
    assert (group["name"], group["total_lag"], group["alerting"]) == ("default", 2, [0])
    assert group["max_oldest_unacked_age_s"] == partition["oldest_unacked_age_s"]
