"""A TCP proxy the fault tests control: a network partition between one process and one
server, without touching either.

``blackhole()`` stops moving bytes on every connection, open or new: nothing is closed or
reset, data waits in the sockets' buffers and new connections are accepted but not
forwarded, so the client sees what a partition looks like (silence until its own
timeouts), not a clean close. ``heal()`` lets everything flow again.
"""

from __future__ import annotations

import anyio
from anyio.abc import SocketStream, TaskStatus

__all__ = ["TcpProxy"]

HOST = "127.0.0.1"


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._open = anyio.Event()
        self._open.set()

    @property
    def blackholed(self) -> bool:
        return not self._open.is_set()

    def blackhole(self) -> None:
        if self._open.is_set():
            self._open = anyio.Event()

    def heal(self) -> None:
        self._open.set()

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        task_status.started(self.port)
        async with listener:
            await listener.serve(self._forward)

    async def _forward(self, client: SocketStream) -> None:
        async with client:
            await self._open.wait()
            try:
                upstream = await anyio.connect_tcp(*self.target)
            except OSError:
                return  # the server is down: the client sees its connection end
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, upstream, tg.cancel_scope)
                tg.start_soon(self._pump, upstream, client, tg.cancel_scope)

    async def _pump(
        self, source: SocketStream, sink: SocketStream, both: anyio.CancelScope
    ) -> None:
        try:
            while True:
                await self._open.wait()
                data = await source.receive(65536)
                await self._open.wait()  # what arrived as the partition began waits too
                await sink.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            both.cancel()  # one side ended: end the other
