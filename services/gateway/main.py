"""The gateway's composition root: settings -> container -> uvicorn."""

from __future__ import annotations

import logging
import secrets
import sys
from contextlib import AsyncExitStack

import anyio
from dependency_injector import containers, providers
from prometheus_client import CollectorRegistry

from adapters.keys import ApiKeyFile
from adapters.ledger import JsonlLedger
from core.ingest import IngestLimits
from core.ports import IdempotencyStore
from services.common.backends import Backends
from services.common.clusters import enter_datacenters
from services.common.http import embedded_server, serve_until
from services.common.lifecycle import boot, stop_on_signals
from services.common.logs import fields
from services.common.metrics import metrics_app
from services.common.settings import GatewaySettings, ShoalSettings
from services.gateway.app import create_app
from services.gateway.publishing import Publisher
from services.gateway.routed import RoutedPublisher

log = logging.getLogger("shoal.gateway")


class GatewayContainer(containers.DeclarativeContainer):
    shoal = providers.Singleton(ShoalSettings)
    gateway = providers.Singleton(GatewaySettings)
    config = providers.Configuration(strict=True)
    backends = providers.Container(Backends, config=config)


async def serve(container: GatewayContainer) -> None:
    shoal: ShoalSettings = container.shoal()
    settings: GatewaySettings = container.gateway()
    problem = settings.anonymous_problem()
    if problem is not None:  # before anything connects; one line, as a bad setting's
        print(f"error: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    # Sequences live in this process's memory: a restarted gateway must not reuse its old
    # series, so every process gets its own id even when SHOAL_GATEWAY_ID is fixed.
    gateway_id = f"{settings.id}.{secrets.token_hex(3)}"
    async with AsyncExitStack() as stack:
        # With SHOAL_CLUSTERS the answers are kept in every cluster, not only this gateway's
        # own: a retry may come through another datacenter, or while this one is down.
        datacenters = await enter_datacenters(
            stack, shoal.transport, idempotency_window=settings.idempotency_window
        )
        transport: Publisher
        idempotency: IdempotencyStore
        if datacenters is None:
            transport = await stack.enter_async_context(container.backends.transport())
            idempotency = await stack.enter_async_context(
                container.backends.idempotency_store(window=settings.idempotency_window)
            )
        else:
            if datacenters.local is None:
                raise SystemExit("error: SHOAL_CLUSTER: a gateway must name its own cluster")
            transport = RoutedPublisher(
                datacenters.transports, datacenters.routes, datacenters.clusters, datacenters.local
            )
            assert datacenters.idempotency is not None  # the window was given
            idempotency = datacenters.idempotency
        ledger = None
        if settings.ledger_dir is not None:
            ledger = await stack.enter_async_context(JsonlLedger(settings.ledger_dir, gateway_id))
        api_keys = None
        if settings.api_keys_file is None:  # SHOAL_GATEWAY_ALLOW_ANONYMOUS=true
            log.warning(
                "authentication is off: any client may write any project "
                "(SHOAL_GATEWAY_ALLOW_ANONYMOUS=true; set SHOAL_GATEWAY_API_KEYS_FILE, "
                "see `shoal keys`)"
            )
        else:
            api_keys = await stack.enter_async_context(ApiKeyFile(settings.api_keys_file))
        registry = CollectorRegistry()
        app = create_app(
            transport,
            gateway_id=gateway_id,
            partitions=shoal.partitions,
            limits=IngestLimits(
                max_body_bytes=settings.max_body_bytes,
                max_message_bytes=settings.max_message_bytes,
                max_messages=settings.max_messages_per_request,
            ),
            publish_timeout=settings.publish_timeout,
            publish_deadline=settings.publish_deadline,
            retry_after_seconds=settings.retry_after_seconds,
            ledger=ledger,
            max_concurrent_requests=settings.max_concurrent_requests,
            max_bytes_in_flight=settings.max_bytes_in_flight,
            api_keys=api_keys,
            key_rate=settings.key_rate,
            idempotency=idempotency,
            max_tracked_projects=settings.max_tracked_projects,
            reannounce_interval=settings.reannounce_interval,
            registry=registry,
        )
        servers = [embedded_server(app, settings.host, settings.port)]
        if settings.metrics_port:
            servers.append(
                embedded_server(metrics_app(registry), settings.metrics_host, settings.metrics_port)
            )
        stop = anyio.Event()
        log.info(
            "gateway starting",
            extra=fields(
                id=gateway_id,
                url=f"http://{settings.host}:{settings.port}",
                auth="off" if api_keys is None else f"API keys in {settings.api_keys_file}",
                metrics=f"http://{settings.metrics_host}:{settings.metrics_port}/metrics"
                if settings.metrics_port
                else "off",
            ),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, stop, 15.0)
            async with anyio.create_task_group() as serving:
                for server in servers:  # both finish their requests in flight
                    serving.start_soon(serve_until, server, stop)
            tg.cancel_scope.cancel()
    log.info("gateway stopped", extra=fields(id=gateway_id))


def main() -> None:
    container = GatewayContainer()
    boot(container, container.gateway, GatewaySettings, serve)


if __name__ == "__main__":
    main()
