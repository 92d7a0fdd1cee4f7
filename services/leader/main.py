"""The leader's composition root: campaign and lead, and serve the status API meanwhile.

The scaler is picked by ``SHOAL_SCALING_SCALER`` (a Selector): ``none``, ``local``
(``LocalProcessScaler``, ``SHOAL_LOCAL_*``) or ``kubernetes`` (``KubernetesScaler``,
``SHOAL_K8S_*``). It is entered only when autoscaling is on, so a leader without it
never touches a cluster or starts a process.

With ``SHOAL_LEADER_DATA_DIR`` set (the handlers' landing zone), the active leader keeps
the landing table up (``services.common.upkeep``, tuned by ``SHOAL_TABLE_*``): not in
broadcast mode, where every handler lands a table of its own.
"""

from __future__ import annotations

import functools
import logging
import sys
from contextlib import AsyncExitStack

import anyio
from dependency_injector import containers, providers
from prometheus_client import CollectorRegistry

from adapters.delta import TableSettings
from adapters.kubernetes import KubernetesSettings
from adapters.local import LocalProcessScaler, LocalScalerSettings
from adapters.spark import read_weights_file
from core.assignment import strategy_named
from core.modes import ConsumptionMode, autoscaling_problem
from core.ports import Scaler
from core.table import vacuum_retention_problem
from services.common.backends import Backends, deferred
from services.common.clusters import ClusterBacklogs, enter_datacenters
from services.common.http import embedded_server, serve_in_thread
from services.common.lifecycle import boot, stop_on_signals
from services.common.logs import REFUSAL, fields
from services.common.metrics import metrics_app
from services.common.settings import (
    HandlerSettings,
    LeaderSettings,
    ShoalSettings,
    load_settings,
)
from services.common.table_address import check_zone_store
from services.common.upkeep import TableKeeper, TableMetrics
from services.leader.backlog import BacklogAlerter, BacklogReader, LandedTrimmer
from services.leader.leader_loop import LeaderLoop
from services.leader.scaling import ScalingLoop
from services.leader.settings import AutoscalingSettings, TableUpkeepSettings
from services.leader.status import LiveStatus, StatusReader, create_status_app

log = logging.getLogger("shoal.leader")


class LeaderContainer(containers.DeclarativeContainer):
    shoal = providers.Singleton(ShoalSettings)
    leader = providers.Singleton(LeaderSettings)
    scaling = providers.Singleton(AutoscalingSettings)
    upkeep = providers.Singleton(TableUpkeepSettings)
    table = providers.Singleton(TableSettings)
    local_scaler_settings = providers.Singleton(LocalScalerSettings)
    kubernetes_settings = providers.Singleton(KubernetesSettings)
    config = providers.Configuration(strict=True)
    backends = providers.Container(Backends, config=config)
    registry = providers.Singleton(CollectorRegistry)
    scaler = providers.Selector(
        scaling.provided.scaler,
        none=providers.Object(None),
        local=providers.Factory(LocalProcessScaler, local_scaler_settings),
        # lightkube, imported only where it is the scaler
        kubernetes=providers.Factory(
            deferred("adapters.kubernetes:KubernetesScaler"), kubernetes_settings
        ),
    )


async def serve(container: LeaderContainer) -> None:
    shoal: ShoalSettings = container.shoal()
    settings: LeaderSettings = container.leader()
    scaling_settings: AutoscalingSettings = container.scaling()
    problem = autoscaling_problem(shoal.consumption_mode) if scaling_settings.active else None
    if problem is not None:
        log.error("%s", problem, extra=REFUSAL)
        raise SystemExit(2)
    keeper = _table_keeper(container, shoal.consumption_mode)
    if keeper is not None:
        await check_zone_store(keeper.location)
    stop = anyio.Event()
    async with AsyncExitStack() as stack:
        election = await stack.enter_async_context(container.backends.election())
        membership = await stack.enter_async_context(container.backends.membership())
        reports = await stack.enter_async_context(container.backends.load_reports())
        store = await stack.enter_async_context(container.backends.assignment_store())
        holds = await stack.enter_async_context(container.backends.hold_store())
        transport = await stack.enter_async_context(container.backends.transport())
        datacenters = await enter_datacenters(stack, shoal.transport)
        # lag over every datacenter when there are several (scaling, status)
        lags = transport if datacenters is None else ClusterBacklogs(datacenters.transports)
        scaler: Scaler | None = None
        if scaling_settings.active:
            # Left first (the stack unwinds in reverse), after the signal watcher: local
            # children drain within the scaler's own bound (SHOAL_LOCAL_STOP_TIMEOUT).
            scaler = await stack.enter_async_context(container.scaler())
        scaling = ScalingLoop(
            settings=scaling_settings,
            partitions=shoal.partitions,
            scaler=scaler,
            membership=membership,
            reports=reports,
            transport=lags,
            registry=container.registry(),
        )
        leader_loop = LeaderLoop(
            settings=settings,
            partitions=shoal.partitions,
            strategy=strategy_named(shoal.strategy),
            election=election,
            membership=membership,
            store=store,
            scaling=scaling,
            weights=None
            if settings.weights_file is None
            else functools.partial(read_weights_file, settings.weights_file, shoal.partitions),
            registry=container.registry(),
            upkeep=keeper,
        )
        backlog = BacklogReader(lags, shoal.partitions, registry=container.registry())
        alerter = BacklogAlerter(
            backlog,
            group=shoal.group,
            threshold=settings.backlog_alert_age,
            interval=settings.backlog_interval,
            is_active=lambda: leader_loop.leadership is not None,
            registry=container.registry(),
        )
        trimmer = LandedTrimmer(
            transport,
            shoal.partitions,
            interval=settings.backlog_interval,
            is_active=lambda: leader_loop.leadership is not None,
            registry=container.registry(),
        )
        reader = StatusReader(
            leader_loop=leader_loop,
            election=election,
            membership=membership,
            reports=reports,
            store=store,
            holds=holds,
            transport=lags,
            partitions=shoal.partitions,
            backends={"coordination": shoal.coordination, "transport": shoal.transport},
            peers=settings.peers,
            backlog=backlog,
            group=shoal.group,
            mode=shoal.consumption_mode,
            alert_age=settings.backlog_alert_age,
            top_projects=settings.top_projects,
        )
        # The API serves what `live` read in the background: no request waits for a store.
        live = LiveStatus(reader)
        servers = [embedded_server(create_status_app(live), settings.host, settings.port)]
        if settings.metrics_port:
            servers.append(
                embedded_server(
                    metrics_app(container.registry()), settings.metrics_host, settings.metrics_port
                )
            )
        log.info(
            "leader starting",
            extra=fields(
                id=settings.id,
                status=f"http://{settings.host}:{settings.port}/status",
                metrics=f"http://{settings.metrics_host}:{settings.metrics_port}/metrics"
                if settings.metrics_port
                else "off",
                scaler=scaling_settings.scaler if scaling.enabled else "none",
            ),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, stop, 10.0)
            async with anyio.create_task_group() as serving:
                # Each on its own event loop in a thread: the broker clients' CPU-heavy
                # callbacks on this one (metadata, log replay) hold no request back.
                for server in servers:
                    serving.start_soon(serve_in_thread, server, stop)
                serving.start_soon(alerter.run, stop)
                serving.start_soon(trimmer.run, stop)
                serving.start_soon(live.run, stop)
                await leader_loop.run(stop)
            # The status server finished its in-flight requests; stop watching signals.
            tg.cancel_scope.cancel()
    log.info("leader stopped", extra=fields(id=settings.id))


def _table_keeper(container: LeaderContainer, mode: ConsumptionMode) -> TableKeeper | None:
    """The keeper of the landing table; None when this leader keeps no table up (and the
    log says why)."""
    location = container.upkeep().data_dir
    if location is None:
        log.info("table upkeep off: SHOAL_LEADER_DATA_DIR names no landing zone")
        return None
    if mode is ConsumptionMode.BROADCAST:
        # One table per handler, beside the zone (core.modes.broadcast_zone): each keeps
        # its own up.
        log.warning(
            "table upkeep off: in broadcast mode every handler lands a table of its own "
            "and keeps it up",
            extra=fields(data_dir=location),
        )
        return None
    settings: TableSettings = container.table()
    return TableKeeper.at(location, settings, metrics=TableMetrics(container.registry()))


def configure_scaling(container: LeaderContainer) -> None:
    """Read ``SHOAL_SCALING_*`` and the selected scaler's settings; exit 2 on a bad value."""
    scaling = load_settings(AutoscalingSettings)
    container.scaling.override(scaling)
    if scaling.active and scaling.scaler == "local":
        container.local_scaler_settings.override(load_settings(LocalScalerSettings))
    elif scaling.active and scaling.scaler == "kubernetes":
        container.kubernetes_settings.override(load_settings(KubernetesSettings))


def configure_upkeep(container: LeaderContainer) -> None:
    """Read ``SHOAL_LEADER_DATA_DIR`` and ``SHOAL_TABLE_*``; exit 2 on a bad value, or a
    vacuum retention a handler's write (``SHOAL_HANDLER_*``, the handlers' settings) could
    outlast."""
    container.upkeep.override(load_settings(TableUpkeepSettings))
    table = load_settings(TableSettings)
    handlers = load_settings(HandlerSettings)
    problem = vacuum_retention_problem(
        table.vacuum_retention_hours,
        write_timeout=handlers.write_timeout,
        lease_ttl=handlers.lease_ttl,
    )
    if problem is not None:
        print(f"error: SHOAL_TABLE_VACUUM_RETENTION_HOURS: {problem}", file=sys.stderr)
        raise SystemExit(2)
    container.table.override(table)


def main() -> None:
    container = LeaderContainer()
    configure_scaling(container)
    configure_upkeep(container)
    boot(container, container.leader, LeaderSettings, serve)


if __name__ == "__main__":
    main()
