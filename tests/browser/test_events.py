"""The dashboard's HTTP side without a browser: the page and its assets, and the bounds of
``GET /events`` (shared reads, a cap on concurrent streams, slots given back on
disconnect, a maximum stream length, errors as events)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from services.leader.dashboard import STATIC_DIR, mount_dashboard
from tests.browser._stack import CannedSource, serve_app

pytestmark = pytest.mark.anyio

DOCUMENT: dict[str, Any] = {
    "leader": {"id": "l1", "term": 1},
    "generation": 1,
    "members": [],
    "partitions": [{"partition": 0, "owner": None, "generation": 1, "lag": None}],
    "rebalances": [],
}


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream response."""
    name, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif line == "" and data:
            yield name, data
            name, data = "message", ""


async def test_page_and_assets_are_served_with_a_strict_csp() -> None:
    app = FastAPI()
    mount_dashboard(app, CannedSource(DOCUMENT))
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        root, page = await client.get("/"), await client.get("/dashboard")
        assert root.status_code == page.status_code == 200
        assert root.content == page.content == (STATIC_DIR / "index.html").read_bytes()
        assert root.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in root.headers["content-security-policy"]
        script = await client.get("/dashboard/app.js")
        assert script.headers["content-type"].startswith("text/javascript")
        style = await client.get("/dashboard/style.css")
        assert style.headers["content-type"].startswith("text/css")
        assert (await client.get("/dashboard/../status.py")).status_code == 404


async def test_a_stream_sends_the_document_about_every_interval_and_streams_share_reads() -> None:
    app = FastAPI()
    source = CannedSource(DOCUMENT)
    mount_dashboard(app, source, interval=0.2)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        received: dict[int, list[dict[str, Any]]] = {0: [], 1: []}

        async def listen(index: int) -> None:
            async with client.stream("GET", "/events") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                async for name, data in events(response):
                    assert name == "status"
                    received[index].append(json.loads(data))
                    if len(received[index]) == 5:
                        return

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listen, 0)
                tg.start_soon(listen, 1)
    assert received[0][0] == received[1][0] == DOCUMENT
    # Two streams, five events each: fewer reads than events (one per 0.1 s at most).
    assert source.reads < 10


async def test_one_stream_too_many_is_refused_and_a_closed_stream_frees_its_slot() -> None:
    app = FastAPI()
    mount_dashboard(app, CannedSource(DOCUMENT), interval=0.1, max_streams=1)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("GET", "/events") as first:
            assert first.status_code == 200
            refused = await client.get("/events")
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
        # The server notices the disconnect and gives the slot back.
        with anyio.fail_after(5):
            while True:
                async with client.stream("GET", "/events") as again:
                    if again.status_code == 200:
                        break
                await anyio.sleep(0.05)


async def test_a_stream_ends_after_its_maximum_length() -> None:
    app = FastAPI()
    mount_dashboard(app, CannedSource(DOCUMENT), interval=0.1, max_stream_seconds=0.5)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        with anyio.fail_after(5):
            async with client.stream("GET", "/events") as response:
                count = sum([1 async for _ in events(response)])
    assert 2 <= count <= 8


class FailingSource:
    async def document(self) -> dict[str, Any]:
        raise ConnectionError("store unavailable")


async def test_an_unreadable_document_is_an_unavailable_event_and_the_stream_goes_on() -> None:
    app = FastAPI()
    mount_dashboard(app, FailingSource(), interval=0.1)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as client:
        seen: list[tuple[str, str]] = []
        with anyio.fail_after(5):
            async with client.stream("GET", "/events") as response:
                async for name, data in events(response):
                    seen.append((name, data))
                    if len(seen) == 2:
                        break
    assert seen == [("unavailable", '{"error": "ConnectionError"}')] * 2


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        mount_dashboard(FastAPI(), CannedSource(DOCUMENT), max_streams=0)
