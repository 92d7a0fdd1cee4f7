"""ServerGroup: stop exactly the servers one started, in sync and async code."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, Protocol, Self, TypeVar


class Stoppable(Protocol):
    def stop(self, timeout: float = 10.0) -> None: ...


T = TypeVar("T", bound=Stoppable)
P = ParamSpec("P")


class ServerGroup:
    """Stops exactly the servers started (or added) through it, last first, even on errors."""

    def __init__(self, *, stop_timeout: float = 10.0) -> None:
        self.stop_timeout = stop_timeout
        self._servers: list[Stoppable] = []

    @property
    def servers(self) -> tuple[Stoppable, ...]:
        return tuple(self._servers)

    def add(self, server: T) -> T:
        self._servers.append(server)
        return server

    def start(self, starter: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """group.start(start_nats, jetstream=False): start and remember."""
        return self.add(starter(*args, **kwargs))

    async def astart(self, starter: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like start(), in a worker thread so the event loop keeps running."""
        import anyio.to_thread  # noqa: PLC0415

        return self.add(await anyio.to_thread.run_sync(functools.partial(starter, *args, **kwargs)))

    def stop_all(self) -> None:
        errors: list[BaseException] = []
        while self._servers:
            server = self._servers.pop()
            try:
                server.stop(self.stop_timeout)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    async def aclose(self) -> None:
        import anyio  # noqa: PLC0415
        import anyio.to_thread  # noqa: PLC0415

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop_all)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
