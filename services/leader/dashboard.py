"""The operator's dashboard: one static page and a Server-Sent Events stream of the status
document, served read-only by every leader replica (active or standby).

Routes added to the status app by ``mount_dashboard(app, reader)``:

- ``GET /`` and ``GET /dashboard``: the page (``dashboard/index.html``); its assets are
  ``GET /dashboard/app.js`` and ``GET /dashboard/style.css``. Everything is local (no
  CDN, no build step); the page uses relative URLs, so it also works behind a path prefix.
- ``GET /events``: ``text/event-stream``; an ``event: status`` with the whole ``/status``
  document about every ``interval`` seconds, ``event: unavailable`` when the document
  cannot be read (the stream goes on). A stream ends when the client disconnects, after
  ``max_stream_seconds`` (the browser's EventSource reconnects by itself), or when the
  optional ``stop`` event is set. At most ``max_streams`` run at once; one more is
  answered 503 with ``Retry-After``.

Streams share one document per ``interval``: N open dashboards cost one read, not N.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import anyio
from fastapi import FastAPI
from fastapi.responses import Response
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from services.common.logs import fields

__all__ = ["STATIC_DIR", "DocumentSource", "mount_dashboard"]

log = logging.getLogger("shoal.leader.dashboard")

#: ``services/leader/dashboard/``: index.html, app.js, style.css (package data).
STATIC_DIR = Path(__file__).with_suffix("")

_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

# The page loads nothing from anywhere else, and runs no inline script or style.
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


class DocumentSource(Protocol):
    """What the dashboard reads: the status document (``StatusReader`` is one)."""

    async def document(self) -> dict[str, Any]: ...


class _SharedDocument:
    """The latest document, read at most once per ``max_age`` whatever the stream count."""

    def __init__(self, source: DocumentSource, max_age: float) -> None:
        self._source = source
        self._max_age = max_age
        self._lock = anyio.Lock()
        self._event = b""
        self._read_at = float("-inf")

    async def event(self) -> bytes:
        async with self._lock:
            if time.monotonic() - self._read_at >= self._max_age:
                self._event = await self._read()
                self._read_at = time.monotonic()
            return self._event

    async def _read(self) -> bytes:
        try:
            document = await self._source.document()
            data = json.dumps(document, separators=(",", ":"), allow_nan=False)
        except Exception as exc:  # the page says "unavailable" and keeps listening
            log.warning("status document unavailable", extra=fields(error=repr(exc)))
            return _sse("unavailable", json.dumps({"error": type(exc).__name__}))
        return _sse("status", data)


def _sse(event: str, data: str) -> bytes:
    # json.dumps never emits a raw newline, so the data fits on one `data:` line.
    return f"event: {event}\ndata: {data}\n\n".encode()


class _Slots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def try_take(self) -> bool:
        if self.active >= self.limit:
            return False
        self.active += 1
        return True

    def give_back(self) -> None:
        self.active -= 1


class _EventStream(StreamingResponse):
    """A stream that gives its slot back however it ends (even if it never started)."""

    def __init__(self, content: AsyncIterator[bytes], slots: _Slots) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.give_back()


def mount_dashboard(
    app: FastAPI,
    reader: DocumentSource,
    *,
    interval: float = 1.0,
    max_streams: int = 16,
    max_stream_seconds: float = 300.0,
    stop: anyio.Event | None = None,
) -> None:
    """Add the page, its assets and ``GET /events`` to ``app``.

    Raises ``FileNotFoundError`` when a static file is missing (a broken install fails at
    start-up, not on the first visit), ``ValueError`` on a non-positive bound.
    """
    if interval <= 0 or max_stream_seconds <= 0 or max_streams < 1:
        raise ValueError("interval and max_stream_seconds must be > 0, max_streams >= 1")
    assets = {name: (STATIC_DIR / name).read_bytes() for name in _ASSETS}
    shared = _SharedDocument(reader, max_age=interval / 2)
    slots = _Slots(max_streams)

    def asset(name: str) -> Response:
        return Response(assets[name], media_type=_ASSETS[name], headers=_HEADERS)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return asset("index.html")

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard_page() -> Response:
        return asset("index.html")

    @app.get("/dashboard/app.js", include_in_schema=False)
    async def script() -> Response:
        return asset("app.js")

    @app.get("/dashboard/style.css", include_in_schema=False)
    async def style() -> Response:
        return asset("style.css")

    async def stream(request: Request) -> AsyncIterator[bytes]:
        # `retry`: how long the browser waits before reconnecting after the stream ends.
        yield b"retry: 1000\n\n"
        ends_at = time.monotonic() + max_stream_seconds
        while time.monotonic() < ends_at and not (stop is not None and stop.is_set()):
            if await request.is_disconnected():
                return
            yield await shared.event()
            with anyio.move_on_after(interval):
                if stop is None:
                    await anyio.sleep_forever()
                else:
                    await stop.wait()

    @app.get("/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        if not slots.try_take():
            return Response(
                f"too many dashboard streams (at most {slots.limit}); retry later\n",
                status_code=503,
                media_type="text/plain",
                headers={"Retry-After": "5"},
            )
        return _EventStream(stream(request), slots)
