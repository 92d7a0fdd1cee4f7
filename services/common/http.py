"""uvicorn inside a service's own task group."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import anyio
import uvicorn
from fastapi import FastAPI


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the service (uvicorn's own capture would
    re-raise SIGTERM after its shutdown and kill the process before the service drained)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def embedded_server(app: FastAPI, host: str, port: int) -> EmbeddedServer:
    return EmbeddedServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    )


async def serve_until(server: EmbeddedServer, stop: anyio.Event) -> None:
    """Serve until ``stop`` is set, then finish in-flight requests and return."""
    async with anyio.create_task_group() as tg:

        async def stopper() -> None:
            await stop.wait()
            server.should_exit = True

        tg.start_soon(stopper)
        await server.serve()
        tg.cancel_scope.cancel()
