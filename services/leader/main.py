"""The leader's composition root: campaign and lead, and serve the status API meanwhile."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import anyio
from dependency_injector import containers, providers
from prometheus_client import CollectorRegistry

from core.assignment import strategy_named
from services.common.backends import Backends
from services.common.http import embedded_server, serve_until
from services.common.lifecycle import boot, stop_on_signals
from services.common.logs import fields
from services.common.settings import LeaderSettings, ShoalSettings
from services.leader.coordinator import Coordinator
from services.leader.status import StatusReader, create_status_app

log = logging.getLogger("shoal.leader")


class LeaderContainer(containers.DeclarativeContainer):
    shoal = providers.Singleton(ShoalSettings)
    leader = providers.Singleton(LeaderSettings)
    config = providers.Configuration(strict=True)
    backends = providers.Container(Backends, config=config)
    registry = providers.Singleton(CollectorRegistry)


async def serve(container: LeaderContainer) -> None:
    shoal: ShoalSettings = container.shoal()
    settings: LeaderSettings = container.leader()
    stop = anyio.Event()
    async with AsyncExitStack() as stack:
        election = await stack.enter_async_context(container.backends.election())
        membership = await stack.enter_async_context(container.backends.membership())
        store = await stack.enter_async_context(container.backends.assignment_store())
        transport = await stack.enter_async_context(container.backends.transport())
        coordinator = Coordinator(
            settings=settings,
            partitions=shoal.partitions,
            strategy=strategy_named(shoal.strategy),
            election=election,
            membership=membership,
            store=store,
        )
        reader = StatusReader(
            coordinator=coordinator,
            election=election,
            membership=membership,
            store=store,
            transport=transport,
            partitions=shoal.partitions,
        )
        server = embedded_server(
            create_status_app(reader, container.registry()), settings.host, settings.port
        )
        log.info(
            "leader starting",
            extra=fields(id=settings.id, status=f"http://{settings.host}:{settings.port}/status"),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, stop, 10.0)
            async with anyio.create_task_group() as serving:
                serving.start_soon(serve_until, server, stop)
                await coordinator.run(stop)
            # The status server finished its in-flight requests; stop watching signals.
            tg.cancel_scope.cancel()
    log.info("leader stopped", extra=fields(id=settings.id))


def main() -> None:
    container = LeaderContainer()
    boot(container, container.leader, LeaderSettings, serve)


if __name__ == "__main__":
    main()
