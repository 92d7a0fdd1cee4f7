"""The handler's composition root: settings -> container -> run until SIGTERM, then drain."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import anyio
from dependency_injector import containers, providers
from prometheus_client import CollectorRegistry, start_http_server

from adapters.coordination import StoreHoldStore
from adapters.delta import TableSettings
from adapters.memory import InMemoryCoordinationStore
from adapters.parquet import ParquetSettings, use_memory_pool
from core.modes import (
    ConsumptionMode,
    broadcast_id_problem,
    broadcast_zone,
    contends_for_holds,
    position_of,
    retention_problem,
)
from core.table import vacuum_retention_problem
from services.common.backends import Backends, deletes_acked_messages
from services.common.clusters import enter_datacenters
from services.common.landing_zone import open_landing_zone
from services.common.lifecycle import boot, stop_on_signals
from services.common.logs import REFUSAL, fields
from services.common.settings import HandlerSettings, ShoalSettings, load_settings
from services.common.table_address import check_zone_store
from services.common.upkeep import TableKeeper, TableMetrics
from services.handler.metrics import HandlerMetrics
from services.handler.worker import Handler

log = logging.getLogger("shoal.handler")


class HandlerContainer(containers.DeclarativeContainer):
    shoal = providers.Singleton(ShoalSettings)
    handler = providers.Singleton(HandlerSettings)
    config = providers.Configuration(strict=True)
    backends = providers.Container(Backends, config=config)
    registry = providers.Singleton(CollectorRegistry)
    metrics = providers.Singleton(HandlerMetrics, registry)
    parquet = providers.Singleton(ParquetSettings)


async def serve(container: HandlerContainer) -> None:
    settings: HandlerSettings = container.handler()
    shoal: ShoalSettings = container.shoal()
    mode = shoal.consumption_mode
    problem = retention_problem(
        mode,
        deleted_on_ack=deletes_acked_messages(shoal.transport, container.backends),
    )
    if mode is ConsumptionMode.BROADCAST:
        problem = problem or broadcast_id_problem(
            settings.id, chosen="id" in settings.model_fields_set
        )
    table_settings = load_settings(TableSettings)
    problem = problem or vacuum_retention_problem(
        table_settings.vacuum_retention_hours,
        write_timeout=settings.write_timeout,
        lease_ttl=settings.lease_ttl,
    )
    if problem is not None:
        log.error("%s", problem, extra=REFUSAL)
        raise SystemExit(2)
    position = position_of(mode, settings.id)
    data_dir = settings.data_dir
    keeper = None
    if position is not None:
        # Each copy is a table of its own (in one table the copies would be duplicates of
        # each other, and all but one refused), kept up by its one writer.
        try:
            data_dir = broadcast_zone(settings.data_dir, position)
        except ValueError as exc:
            log.error("SHOAL_HANDLER_DATA_DIR: %s", exc, extra=REFUSAL)
            raise SystemExit(2) from None
        keeper = TableKeeper.at(
            data_dir, table_settings, metrics=TableMetrics(container.registry())
        )
    await check_zone_store(data_dir)
    if settings.metrics_port:
        start_http_server(
            settings.metrics_port, settings.metrics_host, registry=container.registry()
        )
    parquet: ParquetSettings = container.parquet()
    use_memory_pool(parquet.memory_pool)  # the process's, before the sink's first batch
    stop = anyio.Event()
    async with AsyncExitStack() as stack:
        membership = await stack.enter_async_context(container.backends.membership())
        reports = await stack.enter_async_context(container.backends.load_reports())
        assignments = await stack.enter_async_context(container.backends.assignment_store())
        # Outside the exclusive mode nobody else competes for what this handler consumes
        # (core.modes.contends_for_holds): its holds stay in this process.
        holds = await stack.enter_async_context(
            container.backends.hold_store()
            if contends_for_holds(mode)
            else StoreHoldStore(InMemoryCoordinationStore())
        )
        projects = await stack.enter_async_context(container.backends.project_registry())
        transport = await stack.enter_async_context(container.backends.transport(position=position))
        datacenters = await enter_datacenters(stack, container.shoal().transport, position=position)
        zone = await stack.enter_async_context(
            open_landing_zone(data_dir, parquet=parquet, table=table_settings)
        )
        handler = Handler(
            settings=settings,
            membership=membership,
            reports=reports,
            assignments=assignments,
            holds=holds,
            projects=projects,
            transport=transport,
            sink=zone.sink,
            table=zone.table,
            metrics=container.metrics(),
            datacenters=datacenters,
        )
        log.info(
            "handler starting",
            extra=fields(id=settings.id, data_dir=data_dir, consumption_mode=str(mode)),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, stop, settings.drain_timeout + 5)
            if keeper is not None:
                tg.start_soon(keeper.run)
            await handler.run(stop)
            tg.cancel_scope.cancel()
    log.info("handler stopped", extra=fields(id=settings.id))


def main() -> None:
    container = HandlerContainer()
    boot(container, container.handler, HandlerSettings, serve)


if __name__ == "__main__":
    main()
