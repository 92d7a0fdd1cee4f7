"""The status API serves the document ``LiveStatus`` keeps up to date in the background
(issue 29): a request waits for no store and no broker however slow they are, a leader's
change shows at once rather than at the next period; while a read hangs the last document
is served (its ``age_s`` growing) for ``max_age``, and after a read that failed a 503
says why.
The leader serves the API on an event loop of its own (``serve_in_thread``): a request
is answered while the leader's loop is busy."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from adapters.memory import (
    InMemoryMembership,
)
from core.model import MemberId, Partition
from infra.local.servers import free_port
from services.common.http import embedded_server, serve_in_thread
from services.leader.backlog import BacklogReader
from services.leader.status import LiveStatus, create_status_app
from tests.service._world import World, status_reader, world_of

pytestmark = pytest.mark.anyio

PARTITIONS = 4


class SlowMembership(InMemoryMembership):
    """Every read of the members takes ``delay`` seconds (a store under load)."""

    delay = 0.0

    async def members(self) -> frozenset[MemberId]:
        await anyio.sleep(self.delay)
        return await super().members()


class SlowBacklogs:
    """A broker that takes ``delay`` seconds to tell each partition's backlog."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def backlog(self, partition: Partition) -> int:
        await anyio.sleep(self.delay)
        return 3

    async def oldest_unacked(self, partition: Partition) -> float | None:
        await anyio.sleep(self.delay)
        return time.time() - 1.0


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(tmp_path, partitions=PARTITIONS) as w:
        yield w


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://leader")


async def _timed_get(client: httpx.AsyncClient, path: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = await client.get(path)
    return time.perf_counter() - started, response


async def test_requests_are_answered_at_once_while_the_store_and_the_broker_are_slow(
    world: World,
) -> None:
    await world.start_leader("l1")
    membership = SlowMembership(world.state)
    membership.delay = 1.0
    backlog = BacklogReader(SlowBacklogs(delay=0.8), PARTITIONS, ttl=0.0)
    async with AsyncExitStack() as stack:
        reader = await status_reader(world, stack, backlog, membership)
        tg = await stack.enter_async_context(anyio.create_task_group())
        live = LiveStatus(reader, interval=0.05, first_backlog_wait=5.0)
        await tg.start(live.run)  # the first read: backlog and store, slow as they are
        took: list[float] = []
        async with _client(create_status_app(live)) as client:
            with anyio.fail_after(30):
                while True:
                    seconds, response = await _timed_get(client, "/status")
                    took.append(seconds)
                    assert response.status_code == 200, response.text
                    document: dict[str, Any] = response.json()
                    if len(took) >= 20 and document["age_s"] >= 1.0:
                        break  # asked through more than one slow read
                    await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    assert max(took) < 0.5, f"a request waited for the store or the broker: {took}"
    assert document["leader"]["id"] == "l1"
    assert [p["lag"] for p in document["partitions"]] == [3] * PARTITIONS
    assert document["group"]["total_lag"] == 3 * PARTITIONS


async def test_a_published_generation_shows_at_once_not_at_the_next_period(
    world: World,
) -> None:
    leader = await world.start_leader("l1")
    backlog = BacklogReader(world.transport, PARTITIONS)
    async with AsyncExitStack() as stack:
        reader = await status_reader(world, stack, backlog, InMemoryMembership(world.state))
        tg = await stack.enter_async_context(anyio.create_task_group())
        live = LiveStatus(reader, interval=3600.0)  # only a change can trigger a read
        with anyio.fail_after(10):
            while leader.leadership is None:  # noqa: ASYNC110 (the loop offers no event)
                await anyio.sleep(0.01)
        await tg.start(live.run)
        assert live.served()["generation"] == 0
        await world.start_handler("h1")
        with anyio.fail_after(10):
            while True:  # the outcome under test is the document; it sets no event
                document = live.served()
                if document["generation"] > 0:
                    break
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert {p["owner"] for p in document["partitions"]} == {"h1"}
    assert [m["id"] for m in document["members"]] == ["h1"]
    assert document["served_by"] == {"id": "l1", "active": True}
    assert document["rebalances"][0]["generation"] == document["generation"]


async def test_a_read_that_hangs_serves_the_last_document_for_max_age_then_a_503(
    world: World,
) -> None:
    await world.start_leader("l1")
    membership = SlowMembership(world.state)
    backlog = BacklogReader(world.transport, PARTITIONS)
    async with AsyncExitStack() as stack:
        reader = await status_reader(world, stack, backlog, membership)
        tg = await stack.enter_async_context(anyio.create_task_group())
        live = LiveStatus(reader, interval=0.05, max_age=1.0, timeout=60.0)
        await tg.start(live.run)
        membership.delay = 60.0  # every read from now on hangs (within its timeout)
        hung = time.monotonic()
        async with _client(create_status_app(live)) as client:
            ages: list[float] = []
            with anyio.fail_after(10):
                while True:  # the document ages by the clock: no event to await
                    seconds, response = await _timed_get(client, "/status")
                    assert seconds < 0.5
                    if response.status_code != 200:
                        break
                    ages.append(response.json()["age_s"])
                    await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert time.monotonic() - hung >= 0.5  # served the last document meanwhile
    assert ages == sorted(ages) and ages[-1] <= 1.0
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert "was last read" in response.json()["error"]


async def test_a_failed_read_is_a_503_that_says_why_until_a_read_succeeds(
    world: World,
) -> None:
    await world.start_leader("l1")
    backlog = BacklogReader(world.transport, PARTITIONS)
    async with AsyncExitStack() as stack:
        reader = await status_reader(world, stack, backlog, InMemoryMembership(world.state))
        tg = await stack.enter_async_context(anyio.create_task_group())
        live = LiveStatus(reader, interval=0.05)
        await tg.start(live.run)
        async with _client(create_status_app(live)) as client:
            assert (await client.get("/status")).status_code == 200
            world.state.set_available(False)
            with anyio.fail_after(10):
                while True:  # the next read fails: no event to await
                    seconds, response = await _timed_get(client, "/status")
                    assert seconds < 0.5
                    if response.status_code != 200:
                        break
                    await anyio.sleep(0.02)
            assert response.status_code == 503
            assert "cannot be read: StoreUnavailableError" in response.json()["error"]
            world.state.set_available(True)
            with anyio.fail_after(10):
                # the document is read again on the next period: no event to await
                while (await client.get("/status")).status_code != 200:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            document = (await client.get("/status", params={"local": "true"})).json()
        tg.cancel_scope.cancel()
    assert document["age_s"] < 1.0


async def test_the_server_in_its_own_thread_answers_while_the_callers_loop_is_busy() -> None:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    port = free_port()
    server = embedded_server(app, "127.0.0.1", port)
    stop = anyio.Event()
    took: list[float] = []

    def ask() -> None:
        started = time.perf_counter()
        response = httpx.get(f"http://127.0.0.1:{port}/ping", timeout=10.0)
        assert response.json() == {"ok": True}
        took.append(time.perf_counter() - started)

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_in_thread, server, stop)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to await)
                await anyio.sleep(0.02)
        asker = threading.Thread(target=ask)
        asker.start()
        time.sleep(2.0)  # noqa: ASYNC251 - this loop busy (a CPU-heavy callback) is the test
        await anyio.to_thread.run_sync(asker.join)
        stop.set()
    assert server.should_exit  # stopped by `stop`, the thread ended
    assert len(took) == 1 and took[0] < 1.0, f"the request waited for the busy loop: {took}"
