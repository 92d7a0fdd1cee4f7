"""The gateway's HTTP API. It answers 202 only after the broker stored every message."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from adapters.memory import InMemoryIdempotencyStore
from core.access import AccessDeniedError, ApiKey, TokenBucket, authenticate, authorize, take
from core.ingest import (
    IngestLimits,
    InvalidRequestError,
    check_content_type,
    content_coding,
    declared_length,
    gunzip,
    parse_body,
    reservation_for,
    stamp,
)
from core.messages import PROJECT_ID_PATTERN, is_valid_project_id
from core.ports import AcceptanceLedger, ApiKeyStore, IdempotencyStore
from core.tracking import RecentSet, SeriesCounters
from services.common.logs import fields
from services.gateway.idempotency import IdempotentIngest, idempotency_key
from services.gateway.publishing import LedgerBook, Publisher, RecordedPublish

log = logging.getLogger("shoal.gateway")


class AnnouncedProjects:
    """The projects this gateway announced, at most ``max_size`` (least recently announced
    forgotten first); one announced more than ``max_age`` seconds ago counts as not
    announced, so it is announced again with its next message: a registration that
    expired, was refused at its partition's cap or was lost by the store is made again."""

    def __init__(
        self, max_size: int, max_age: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._recent = RecentSet(max_size)
        self._max_age = max_age
        self._clock = clock

    def __contains__(self, project_id: str) -> bool:
        at = self._recent.added_at(project_id)
        return at is not None and self._clock() - at < self._max_age

    def add(self, project_id: str) -> None:
        self._recent.add(project_id, self._clock())

    def discard(self, project_id: str) -> None:
        self._recent.discard(project_id)


@dataclass
class GatewayState:
    """Per-process state: sequence counters and which projects were announced, each
    bounded to ``max_tracked`` projects (least recently used forgotten first).

    Sequences live in memory, so every gateway process has its own ``gateway_id``:
    after a restart the audit sees a new (gateway, project) series starting at 1. A
    project whose counter was forgotten also starts a new series, under
    ``{gateway_id}~{generation}`` (``core.tracking``); a project whose announcement was
    forgotten or is older than ``reannounce_interval`` is announced again.
    """

    gateway_id: str
    partitions: int
    max_tracked: int = 100_000
    reannounce_interval: float = 3600.0
    next_sequence: SeriesCounters = field(init=False)
    announced: AnnouncedProjects = field(init=False)

    def __post_init__(self) -> None:
        self.next_sequence = SeriesCounters(self.gateway_id, self.max_tracked)
        self.announced = AnnouncedProjects(self.max_tracked, self.reannounce_interval)

    def reserve(self, project_id: str, count: int) -> tuple[str, int]:
        """(the series' gateway id, the first of ``count`` new sequences)."""
        return self.next_sequence.reserve(project_id, count)


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
        self.bytes_in_flight = Gauge(
            "shoal_gateway_bytes_in_flight",
            "Bytes the ingest requests in flight are counted for (their reservations)",
            registry=registry,
        )


def bulk_message_ids(count: int) -> list[str]:
    """``count`` unique ids from one random draw: 96 random bits shared by the request,
    then its index (32 hex characters in all, as a uuid4 hex)."""
    base = uuid.uuid4().hex[:24]
    return [f"{base}{index:08x}" for index in range(count)]


# Bodies above this are parsed in a worker thread: the event loop keeps answering.
_PARSE_INLINE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Heading:
    """What an ingest request's path and headers say, checked before its body is read."""

    idempotency_key: str | None
    gzipped: bool
    declared: int | None  # Content-Length


def read_heading(project_id: str, request: Request, limits: IngestLimits) -> Heading:
    """The request's heading, or ``InvalidRequestError`` (400, 413 for a declared length
    over the limit, 415) before anything of the body is read."""
    if not is_valid_project_id(project_id):
        raise InvalidRequestError(
            f"project id {project_id!r} must match {PROJECT_ID_PATTERN.pattern}"
        )
    key = idempotency_key(request)
    check_content_type(request.headers.get("content-type"))
    gzipped = content_coding(request.headers.get("content-encoding")) == "gzip"
    declared = declared_length(request.headers.get("content-length"))
    if declared is not None and declared > limits.max_body_bytes:
        raise InvalidRequestError(
            f"body is {declared} bytes; the limit is {limits.max_body_bytes}", status=413
        )
    return Heading(key, gzipped, declared)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body as sent, refused (413) once it passes ``limit`` bytes while it is
    read: never buffered past it."""
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise InvalidRequestError(
                f"body is over {limit} bytes; the limit is {limit}", status=413
            )
    return bytes(chunks)


def _inflate_and_parse(body: bytes, limits: IngestLimits) -> list[bytes]:
    return parse_body(gunzip(body, limits.max_body_bytes), limits)


async def read_payloads(
    request: Request, gzipped: bool, limits: IngestLimits
) -> tuple[list[bytes], float]:
    """The request's messages and when its body was in (``time.time()``). Its one gzip
    layer is undone in a worker thread (whatever the body's size: a small body may inflate
    to the limit), as is parsing a large body, so the event loop keeps answering. The body
    is released once parsed."""
    body = await read_body(request, limits.max_body_bytes)
    received_at = time.time()
    if gzipped:
        payloads = await anyio.to_thread.run_sync(_inflate_and_parse, body, limits)
    elif len(body) > _PARSE_INLINE_BYTES:
        payloads = await anyio.to_thread.run_sync(parse_body, body, limits)
    else:
        payloads = parse_body(body, limits)
    return payloads, received_at


def create_app(
    transport: Publisher,
    *,
    gateway_id: str,
    partitions: int,
    limits: IngestLimits,
    publish_timeout: float,
    retry_after_seconds: int,
    publish_deadline: float | None = None,
    ledger: AcceptanceLedger | None = None,
    max_concurrent_requests: int = 256,
    max_bytes_in_flight: int = 128 * 1024 * 1024,
    api_keys: ApiKeyStore | None = None,
    key_rate: float = 200.0,
    idempotency: IdempotencyStore | None = None,
    max_tracked_projects: int = 100_000,
    reannounce_interval: float = 3600.0,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The FastAPI app; the caller owns ``transport``, ``ledger``, ``api_keys`` and
    ``idempotency`` (entered before, closed after). With a ledger, every reserved sequence
    range is recorded as accepted or refused, whatever fails after the reservation (a
    failure then answers 503, never 500); a line the ledger refuses waits in memory
    (``LedgerBook``) and nothing new is published until it is written.

    Admission: past ``max_concurrent_requests`` ingest requests in flight, the next is
    answered 503 with Retry-After at once; so is one whose reservation
    (``core.ingest.reservation_for``, from its headers: twice its declared body, or the
    limit; gzipped, its body and twice the limit) does not fit in ``max_bytes_in_flight``
    beside the reservations of the requests in flight. Both are decided before the body
    is read, and a reservation is given back when its request ends, however it ends.

    With ``api_keys``, an ingest request needs ``Authorization: Bearer <key>`` (401 without
    a valid one, 403 for a project the key may not write), and each key may send
    ``key_rate`` requests per second (its own ``rate`` if set) with bursts of twice that
    (at least 1), per gateway process; past it, 429 with Retry-After. Nothing of a refused
    request is read, stored or recorded.

    A request with an ``Idempotency-Key`` goes through ``idempotency``
    (``services.gateway.idempotency``; without a store, one in this process's memory).

    A publish the broker did not confirm within ``publish_timeout`` is made again with the
    same messages until ``publish_deadline`` (default: one attempt), then answered 503
    (``RecordedPublish``).

    The metrics go to ``registry`` (default: one of its own); the app does not serve them
    (``services.common.metrics.metrics_app`` does, on a port of its own)."""
    # FastAPI's own OpenTelemetry spans and meters wrap every request (measured: a tenth
    # of the gateway's CPU under load); the gateway's metrics are its Prometheus ones.
    app = FastAPI(
        title="shoal gateway",
        docs_url=None,
        redoc_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    registry = registry if registry is not None else CollectorRegistry()
    metrics = GatewayMetrics(registry)
    state = GatewayState(
        gateway_id,
        partitions,
        max_tracked=max_tracked_projects,
        reannounce_interval=reannounce_interval,
    )

    def refuse(status: int, message: str, **headers: str) -> JSONResponse:
        metrics.rejected.labels(status=str(status)).inc()
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    in_flight = 0
    bytes_in_flight = 0
    buckets: dict[str, TokenBucket] = {}

    async def admit(project_id: str, request: Request) -> Response | None:
        """The refusal for a request without the right to write now, else None."""
        if api_keys is None:
            return None
        try:
            keys = await api_keys.keys()
            key = authenticate(request.headers.get("authorization"), keys)
            authorize(key, project_id)
        except AccessDeniedError as exc:
            extra = {"WWW-Authenticate": 'Bearer realm="shoal"'} if exc.status == 401 else {}
            return refuse(exc.status, str(exc), **extra)
        except (OSError, ValueError) as exc:
            log.error("API keys unreadable; answering 503", extra=fields(error=str(exc)))
            return refuse(503, "API keys unavailable", **{"Retry-After": str(retry_after_seconds)})
        if len(buckets) > len(keys):  # keys removed from the store: forget their buckets
            for gone in buckets.keys() - keys.keys():
                del buckets[gone]
        return limit(key)

    def limit(key: ApiKey) -> Response | None:
        rate = key.rate or key_rate
        buckets[key.key_id], wait = take(
            buckets.get(key.key_id), time.monotonic(), rate=rate, burst=max(1.0, 2 * rate)
        )
        if wait is None:
            return None
        return refuse(
            429,
            f"API key {key.key_id} is over its limit of {rate:g} requests per second",
            **{"Retry-After": str(max(1, math.ceil(wait)))},
        )

    book = LedgerBook(ledger) if ledger is not None else None
    publish = RecordedPublish(
        transport=transport,
        ledger=book,
        state=state,
        metrics=metrics,
        partitions=partitions,
        publish_timeout=publish_timeout,
        retry_after_seconds=retry_after_seconds,
        refuse=refuse,
        publish_deadline=publish_deadline if publish_deadline is not None else publish_timeout,
    )
    idempotent = IdempotentIngest(
        publish=publish,
        store=idempotency if idempotency is not None else InMemoryIdempotencyStore(),
        registry=registry,
        partitions=partitions,
        publish_timeout=publish_timeout,
        retry_after_seconds=retry_after_seconds,
        refuse=refuse,
    )

    async def ingest(request: Request) -> Response:
        nonlocal in_flight, bytes_in_flight
        project_id: str = request.path_params["project_id"]
        refusal = await admit(project_id, request)
        if refusal is not None:
            return refusal
        try:
            heading = read_heading(project_id, request, limits)
        except InvalidRequestError as exc:
            return refuse(exc.status, str(exc))
        busy = {"Retry-After": str(retry_after_seconds)}
        if in_flight >= max_concurrent_requests:
            return refuse(
                503, f"{in_flight} requests in flight, the most this gateway takes at once", **busy
            )
        need = reservation_for(
            heading.declared, gzipped=heading.gzipped, max_body_bytes=limits.max_body_bytes
        )
        if bytes_in_flight + need > max_bytes_in_flight:
            return refuse(
                503,
                f"the requests in flight hold {bytes_in_flight} of the {max_bytes_in_flight} "
                f"bytes this gateway takes at once; this one needs {need}",
                **busy,
            )
        in_flight += 1
        bytes_in_flight += need
        metrics.bytes_in_flight.set(bytes_in_flight)
        try:
            return await accept(project_id, request, heading)
        finally:
            in_flight -= 1
            bytes_in_flight -= need
            metrics.bytes_in_flight.set(bytes_in_flight)

    async def accept(project_id: str, request: Request, heading: Heading) -> Response:
        try:
            payloads, received_at = await read_payloads(request, heading.gzipped, limits)
        except InvalidRequestError as exc:
            return refuse(exc.status, str(exc))
        key = heading.idempotency_key
        if key is not None:
            return await idempotent.accept(project_id, key, payloads, received_at)
        series, first_sequence = state.reserve(project_id, len(payloads))
        envelopes = stamp(
            project_id,
            payloads,
            gateway_id=series,
            first_sequence=first_sequence,
            message_ids=bulk_message_ids(len(payloads)),
            received_at=received_at,
            partitions=partitions,
        )
        refusal = await publish(project_id, envelopes, series=series, received_at=received_at)
        if refusal is not None:
            return refusal
        return JSONResponse(
            {
                "accepted": len(envelopes),
                "gateway_id": series,
                "partition": envelopes[0].partition,
                "first_sequence": envelopes[0].sequence,
                "last_sequence": envelopes[-1].sequence,
                "message_ids": [e.message_id for e in envelopes],
            },
            status_code=202,
        )

    # A plain Starlette route: FastAPI's dependency solving and response handling around
    # an endpoint that takes the raw request were a quarter of the gateway's CPU.
    app.router.add_route("/v1/projects/{project_id}/messages", ingest, methods=["POST"])

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "gateway_id": gateway_id}

    @app.get("/readyz")
    async def readyz() -> Response:
        if book is not None and not await book.catch_up():
            return JSONResponse({"status": "unavailable", "error": book.problem}, status_code=503)
        try:
            with anyio.fail_after(2.0):
                await transport.backlog(0)
        except Exception as exc:  # any failure means "not ready": say why
            return JSONResponse({"status": "unavailable", "error": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    return app
