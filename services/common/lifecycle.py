"""Process lifecycle: SIGTERM/SIGINT become a stop event; a second signal forces exit."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from dependency_injector import containers, providers
from pydantic_settings import BaseSettings

from core.errors import ShoalError
from services.common.backends import check_backend_settings
from services.common.logs import REFUSAL, configure_logging
from services.common.settings import ShoalSettings, load_settings

log = logging.getLogger("shoal")


async def stop_on_signals(stop: anyio.Event, grace: float) -> None:
    """Set ``stop`` on the first SIGTERM/SIGINT; exit the process if the graceful stop has
    not finished ``grace`` seconds later, or at once on a second signal. The caller
    cancels this task when its graceful stop is done."""
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if stop.is_set():
                    log.warning("second signal: exiting now")
                    os._exit(1)
                log.info("signal %s: stopping gracefully", signal.Signals(signum).name)
                stop.set()
                tg.start_soon(_exit_after, grace)


async def _exit_after(grace: float) -> None:
    await anyio.sleep(grace)
    log.error("graceful stop took longer than %.0f s: exiting", grace)
    os._exit(1)


def sole_error(exc: BaseException) -> BaseException:
    """The one error inside task-group wrappers (each adapter's task group adds one)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


ContainerT = TypeVar("ContainerT", bound=containers.DeclarativeContainer)


def boot(
    container: ContainerT,
    role: providers.Singleton[Any],
    role_settings: type[BaseSettings],
    serve: Callable[[ContainerT], Awaitable[None]],
) -> None:
    """Every service's ``main``: read settings (exit 2 with a clear message when one is
    bad), configure the container's backend selection and logging, run ``serve``."""
    shoal = load_settings(ShoalSettings)
    container.shoal.override(shoal)
    role.override(load_settings(role_settings))
    check_backend_settings(shoal.coordination, shoal.transport)
    container.config.from_dict(  # type: ignore[attr-defined]
        {
            "coordination": shoal.coordination,
            "transport": shoal.transport,
            "group": shoal.group,
            "partitions": shoal.partitions,
            "strategy": shoal.strategy,
        }
    )
    configure_logging(shoal.log_format, shoal.log_level)
    try:
        # uvloop: the event loop's own work (callbacks, sockets) in C, about a tenth of
        # a loaded service's CPU (tests/bench --baseline).
        anyio.run(serve, container, backend_options={"use_uvloop": True})
    except BaseException as raised:
        exc = sole_error(raised)
        if isinstance(exc, ShoalError | ConnectionError | PermissionError | TimeoutError):
            log.error("%s", exc, extra=REFUSAL)  # a backend refused or is missing: one line
            raise SystemExit(1) from None
        raise
