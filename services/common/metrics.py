"""Prometheus helpers: every service keeps its own registry (tests run several in one process)."""

from __future__ import annotations

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def metrics_response(registry: CollectorRegistry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def metrics_app(registry: CollectorRegistry) -> FastAPI:
    """``GET /metrics`` (``registry``) and nothing else: what a service serves on its
    metrics port (``SHOAL_<ROLE>_METRICS_HOST``/``_PORT``), apart from its API, so the
    ingest port and the status API show no metrics and a scraper needs no public port."""
    app = FastAPI(title="shoal metrics", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return metrics_response(registry)

    return app
