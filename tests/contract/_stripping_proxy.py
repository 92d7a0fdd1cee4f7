"""A TCP proxy in front of an S3-compatible server that plays a store ignoring conditional
writes: it drops named headers from every HTTP/1.1 request it forwards (``If-None-Match``,
and ``Authorization`` with it: the header was signed, so the request goes on anonymously,
into a bucket whose policy lets anyone write). Answers pass through untouched.

It reads the requests' framing only: a header block, then ``Content-Length`` bytes of body.
"""

from __future__ import annotations

from collections.abc import Collection

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.faults._proxy import TcpProxy

__all__ = ["HeaderStrippingProxy"]

_HEADERS_END = b"\r\n\r\n"
_MAX_HEADERS = 64 * 1024
_LENGTH = b"content-length"


def _name(header: bytes) -> bytes:
    return header.split(b":", 1)[0].strip().lower()


class HeaderStrippingProxy(TcpProxy):
    def __init__(self, target_host: str, target_port: int, strip: Collection[str]) -> None:
        super().__init__(target_host, target_port)
        self._strip = {name.lower().encode() for name in strip}
        self.stripped = 0  # header lines dropped so far

    async def _forward(self, client: SocketStream) -> None:
        async with client:
            upstream = await anyio.connect_tcp(*self.target)
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._requests, client, upstream, tg.cancel_scope)
                tg.start_soon(self._pump, upstream, client, tg.cancel_scope)

    async def _requests(
        self, client: SocketStream, upstream: SocketStream, both: anyio.CancelScope
    ) -> None:
        reader = BufferedByteReceiveStream(client)
        try:
            while True:
                head = await reader.receive_until(_HEADERS_END, _MAX_HEADERS)
                request_line, *headers = head.split(b"\r\n")
                kept = [
                    h for h in headers if h.split(b":", 1)[0].strip().lower() not in self._strip
                ]
                self.stripped += len(headers) - len(kept)
                await upstream.send(b"\r\n".join([request_line, *kept]) + _HEADERS_END)
                length = next((int(h.split(b":", 1)[1]) for h in kept if _name(h) == _LENGTH), 0)
                if length:
                    await upstream.send(await reader.receive_exactly(length))
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            pass
        finally:
            both.cancel()
