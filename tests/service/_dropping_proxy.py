"""A TCP proxy in front of an S3-compatible server that loses the answer to a Delta commit:
once armed, it lets the next ``PUT .../_delta_log/<version>.json`` reach the server and
then closes the client's connection instead of passing the server's answer on (armed
``late``: only after holding it that many seconds, past the client's timeout). The commit
is stored; the writer does not know it.

It reads just enough HTTP/1.1 to do that: a request line in what the client sends, and the
status line of the next thing the server sends on that connection (clients send one
request at a time per connection, so that is the commit's answer). Everything else is
passed through as bytes.

The proxy runs in a process of its own (``dropping_proxy``): some delta-rs calls hold the
GIL while they wait for the network, which would stall a proxy on the test's event loop
and every request it forwards with it. The test talks to it over its stdin and stdout:
``arm [SECONDS]`` in, ``listening <port>``, ``armed`` and ``answer <version> <status>
<dropped>`` out.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import Process, SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.faults._proxy import TcpProxy

__all__ = ["CommitAnswer", "ProxyProcess", "dropping_proxy"]

_COMMIT = re.compile(rb"PUT \S*/_delta_log/(\d+)\.json HTTP/1\.1\r\n")
_STATUS = re.compile(rb"^HTTP/1\.1 (\d{3})")
_TAIL = 256  # bytes of the previous read kept to find a request line cut in two
_REPO = Path(__file__).resolve().parents[2]
_STOP_WITHIN = 10.0


@dataclass(frozen=True, slots=True)
class CommitAnswer:
    """The server's answer to one commit PUT, and whether the client got it."""

    version: int
    status: int
    dropped: bool


@dataclass(slots=True)
class _Connection:
    commits: list[int] = field(default_factory=list)  # commit PUTs sent, not yet answered
    doomed: bool = False  # the answer to its commit is to be lost
    late: float = 0.0  # ...after holding it this long


class _DroppingProxy(TcpProxy):
    def __init__(
        self, target_host: str, target_port: int, on_answer: Callable[[CommitAnswer], None]
    ) -> None:
        super().__init__(target_host, target_port)
        self.armed = False
        self.late = 0.0
        self._on_answer = on_answer

    async def _forward(self, client: SocketStream) -> None:
        async with client:
            upstream = await anyio.connect_tcp(*self.target)
            connection = _Connection()
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._requests, client, upstream, connection, tg.cancel_scope)
                tg.start_soon(self._answers, upstream, client, connection, tg.cancel_scope)

    async def _requests(
        self,
        client: SocketStream,
        upstream: SocketStream,
        connection: _Connection,
        both: anyio.CancelScope,
    ) -> None:
        tail = b""
        try:
            while True:
                data = await client.receive(65536)
                seen = tail + data
                for commit in _COMMIT.finditer(seen):
                    if commit.end() > len(tail):  # not found in the previous read already
                        connection.commits.append(int(commit.group(1)))
                        if self.armed:
                            self.armed = False
                            connection.doomed, connection.late = True, self.late
                tail = seen[-_TAIL:]
                await upstream.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            both.cancel()

    async def _answers(
        self,
        upstream: SocketStream,
        client: SocketStream,
        connection: _Connection,
        both: anyio.CancelScope,
    ) -> None:
        try:
            while True:
                data = await upstream.receive(65536)
                status = _STATUS.match(data)
                if connection.commits and status is not None and status.group(1) != b"100":
                    version = connection.commits.pop(0)
                    dropped = connection.doomed
                    connection.doomed = False
                    self._on_answer(CommitAnswer(version, int(status.group(1)), dropped))
                    if dropped:
                        await anyio.sleep(connection.late)  # the client may give up first
                        return  # the connection closes with the answer unsent
                await client.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            both.cancel()


async def _serve(target_host: str, target_port: int) -> None:
    def say(line: str) -> None:
        print(line, flush=True)

    def answered(answer: CommitAnswer) -> None:
        say(f"answer {answer.version} {answer.status} {int(answer.dropped)}")

    proxy = _DroppingProxy(target_host, target_port, answered)
    async with anyio.create_task_group() as tg:
        say(f"listening {await tg.start(proxy.serve)}")
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            words = line.split()
            if words[:1] == ["arm"]:
                proxy.armed, proxy.late = True, float(words[1]) if len(words) > 1 else 0.0
                say("armed")
        tg.cancel_scope.cancel()  # stdin closed: the test is done with it


class ProxyProcess:
    """The test's handle on the proxy process."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self.port = 0
        self.answers: list[CommitAnswer] = []
        self.dropped = anyio.Event()
        self._armed = anyio.Event()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def arm(self, late: float = 0.0) -> None:
        """Lose the answer to the next commit (one only), after holding it ``late``
        seconds; returns once the proxy is armed."""
        assert self._process.stdin is not None
        await self._process.stdin.send(f"arm {late}\n".encode())
        with anyio.fail_after(_STOP_WITHIN):
            await self._armed.wait()

    async def _read(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        assert self._process.stdout is not None
        lines = BufferedByteReceiveStream(self._process.stdout)
        while True:
            try:
                word, *rest = (await lines.receive_until(b"\n", 1024)).decode().split()
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return
            if word == "listening":
                self.port = int(rest[0])
                task_status.started()
            elif word == "armed":
                self._armed.set()
            elif word == "answer":
                version, status, dropped = (int(x) for x in rest)
                self.answers.append(CommitAnswer(version, status, bool(dropped)))
                if dropped:
                    self.dropped.set()


@asynccontextmanager
async def dropping_proxy(target_host: str, target_port: int) -> AsyncIterator[ProxyProcess]:
    """The proxy, in its own process, listening once entered; stopped on leaving."""
    command = [sys.executable, "-m", __name__, target_host, str(target_port)]
    async with await anyio.open_process(command, cwd=_REPO) as process:
        handle = ProxyProcess(process)
        try:
            async with anyio.create_task_group() as tg:
                with anyio.fail_after(_STOP_WITHIN):
                    await tg.start(handle._read)
                yield handle
                tg.cancel_scope.cancel()
        finally:
            assert process.stdin is not None
            with anyio.CancelScope(shield=True):
                await process.stdin.aclose()  # the proxy's signal to stop
                with anyio.move_on_after(_STOP_WITHIN) as waited:
                    await process.wait()
                if waited.cancelled_caught:
                    process.kill()


if __name__ == "__main__":
    anyio.run(_serve, sys.argv[1], int(sys.argv[2]))
