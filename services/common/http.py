"""uvicorn inside a service's own task group: on the service's event loop
(``serve_until``), or on an event loop of its own in a worker thread (``serve_in_thread``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator

import anyio
import uvicorn
from fastapi import FastAPI

_SWITCH_INTERVAL = 0.001  # seconds; see serve_in_thread


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
            http="httptools",  # C parsing: h11 parses each request in Python
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


async def serve_in_thread(server: EmbeddedServer, stop: anyio.Event) -> None:
    """``serve_until``, but the server runs its own event loop in a worker thread, so its
    requests never wait behind the CPU-heavy callbacks of the caller's loop (a broker
    client decoding metadata, a log replay): a request waits at most for the
    interpreter's thread switch. The app must therefore do no I/O through the caller's
    clients and await nothing of the caller's loop: it serves data the caller publishes
    by reference (replaced, never mutated).

    The thread is this task's: cancelling the task, like setting ``stop``, stops the
    server, and the task returns once the thread has finished its in-flight requests
    (within the server's graceful shutdown timeout).

    It also shortens the interpreter's switch interval to 1 ms (from 5): a thread that
    wants the GIL waits up to the interval for the busy one to drop it, and an answer
    takes the GIL at each of its socket and event loop steps, so under load answers
    waited the interval many times over. The caller's loop pays a little more switching:
    a leader's, not a data path's."""
    sys.setswitchinterval(_SWITCH_INTERVAL)
    async with anyio.create_task_group() as tg:

        async def stopper() -> None:
            try:
                await stop.wait()
            finally:  # also when cancelled: the thread below must end for this task to
                server.should_exit = True

        tg.start_soon(stopper)
        # Not abandoned on cancellation: it returns when the server has stopped.
        await anyio.to_thread.run_sync(_serve_on_own_loop, server)
        tg.cancel_scope.cancel()


def _serve_on_own_loop(server: EmbeddedServer) -> None:
    anyio.run(server.serve, backend="asyncio")
