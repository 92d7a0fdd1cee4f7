"""The gateway's HTTP API. It answers 202 only after the broker stored every message."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from core.errors import PublishError
from core.ingest import IngestLimits, InvalidRequestError, announcement, parse_body, stamp
from core.messages import PROJECT_ID_PATTERN, LedgerEntry, Outcome, is_valid_project_id
from core.ports import AcceptanceLedger, Transport
from services.common.logs import fields
from services.common.metrics import metrics_response

log = logging.getLogger("shoal.gateway")


@dataclass
class GatewayState:
    """Per-process state: sequence counters and which projects were announced.

    Sequences live in memory, so every gateway process has its own ``gateway_id``:
    after a restart the audit sees a new (gateway, project) series starting at 1.
    """

    gateway_id: str
    partitions: int
    next_sequence: dict[str, int] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)

    def reserve(self, project_id: str, count: int) -> int:
        first = self.next_sequence.get(project_id, 1)
        self.next_sequence[project_id] = first + count
        return first


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.accepted = Counter(
            "shoal_gateway_messages_accepted", "Messages answered 202", registry=registry
        )
        self.published = Counter(
            "shoal_gateway_messages_published", "Messages the broker confirmed", registry=registry
        )
        self.rejected = Counter(
            "shoal_gateway_requests_rejected", "Requests refused", ["status"], registry=registry
        )
        self.publish_seconds = Histogram(
            "shoal_gateway_publish_seconds", "Time to broker confirmation", registry=registry
        )


def bulk_message_ids(count: int) -> list[str]:
    """``count`` unique ids from one random draw: 96 random bits shared by the request,
    then its index (32 hex characters in all, as a uuid4 hex)."""
    base = uuid.uuid4().hex[:24]
    return [f"{base}{index:08x}" for index in range(count)]


def create_app(
    transport: Transport,
    *,
    gateway_id: str,
    partitions: int,
    limits: IngestLimits,
    publish_timeout: float,
    retry_after_seconds: int,
    ledger: AcceptanceLedger | None = None,
) -> FastAPI:
    """The FastAPI app; the caller owns ``transport`` and ``ledger`` (entered before,
    closed after). With a ledger, every reserved sequence range is recorded as accepted
    or refused before the answer is sent."""
    app = FastAPI(title="shoal gateway", docs_url=None, redoc_url=None)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    state = GatewayState(gateway_id=gateway_id, partitions=partitions)

    def refuse(status: int, message: str, **headers: str) -> JSONResponse:
        metrics.rejected.labels(status=str(status)).inc()
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    @app.post("/v1/projects/{project_id}/messages", status_code=202)
    async def ingest(project_id: str, request: Request) -> Response:
        body = await request.body()
        received_at = time.time()
        try:
            if not is_valid_project_id(project_id):
                raise InvalidRequestError(
                    f"project id {project_id!r} must match {PROJECT_ID_PATTERN.pattern}"
                )
            payloads = parse_body(body, limits)
        except InvalidRequestError as exc:
            return refuse(exc.status, str(exc))
        envelopes = stamp(
            project_id,
            payloads,
            gateway_id=gateway_id,
            first_sequence=state.reserve(project_id, len(payloads)),
            message_ids=bulk_message_ids(len(payloads)),
            received_at=received_at,
            partitions=partitions,
        )
        first_time = project_id not in state.announced
        batch = envelopes
        if first_time:
            state.announced.add(project_id)
            batch = [
                announcement(
                    project_id,
                    gateway_id=gateway_id,
                    message_id=uuid.uuid4().hex,
                    received_at=received_at,
                    partitions=partitions,
                ),
                *envelopes,
            ]
        started = time.perf_counter()

        async def record(outcome: Outcome) -> None:
            if ledger is not None:
                await ledger.record(
                    LedgerEntry(
                        gateway_id=gateway_id,
                        project_id=project_id,
                        first_sequence=envelopes[0].sequence,
                        last_sequence=envelopes[-1].sequence,
                        outcome=outcome,
                        received_at=received_at,
                        decided_at=time.time(),
                    )
                )

        try:
            with anyio.fail_after(publish_timeout):
                await transport.publish(batch)
        except (PublishError, TimeoutError) as exc:
            await record(Outcome.REFUSED)
            if first_time:
                state.announced.discard(project_id)
            log.warning(
                "publish failed; answering 503",
                extra=fields(project=project_id, messages=len(envelopes), error=str(exc)),
            )
            return refuse(
                503,
                f"broker did not confirm the messages: {exc}",
                **{"Retry-After": str(retry_after_seconds)},
            )
        await record(Outcome.ACCEPTED)
        metrics.publish_seconds.observe(time.perf_counter() - started)
        metrics.published.inc(len(batch))
        metrics.accepted.inc(len(envelopes))
        return JSONResponse(
            {
                "accepted": len(envelopes),
                "gateway_id": gateway_id,
                "partition": envelopes[0].partition,
                "first_sequence": envelopes[0].sequence,
                "last_sequence": envelopes[-1].sequence,
                "message_ids": [e.message_id for e in envelopes],
            },
            status_code=202,
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "gateway_id": gateway_id}

    @app.get("/readyz")
    async def readyz() -> Response:
        try:
            with anyio.fail_after(2.0):
                await transport.backlog(0)
        except Exception as exc:  # any failure means "not ready": say why
            return JSONResponse({"status": "unavailable", "error": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        return metrics_response(registry)

    return app
