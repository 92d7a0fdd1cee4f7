"""The gateway's ``Idempotency-Key`` flow (``core.idempotency`` holds the rules).

``accept`` is called by the ingest route once the body is parsed, when the request names
a key: a retry within the window is answered from the ``IdempotencyStore`` (200, the
original answer, ``Idempotent-Replayed: true``) and publishes nothing; the same key with
other messages is 422; a store that does not answer is 503 (nothing is published blind);
otherwise the request is stamped with its deterministic identity, published, recorded in
the ledger under its own series, remembered, and answered 202.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter

from core.idempotency import (
    IDEMPOTENCY_HEADER,
    REPLAYED_HEADER,
    IdempotentAnswer,
    check_key,
    fingerprint,
    identity,
    key_digest,
)
from core.ingest import stamp
from core.ports import IdempotencyStore
from services.common.logs import fields
from services.gateway.publishing import RecordedPublish

if TYPE_CHECKING:
    pass

__all__ = ["IdempotentIngest", "idempotency_key"]

log = logging.getLogger("shoal.gateway")

Refuse = Callable[..., JSONResponse]


def idempotency_key(request: Request) -> str | None:
    """The request's valid key, None without the header; ``InvalidRequestError`` (400)
    for a key that is not 1 to 255 visible ASCII characters."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    return None if value is None else check_key(value)


@dataclass
class IdempotentIngest:
    publish: RecordedPublish
    store: IdempotencyStore
    registry: CollectorRegistry
    partitions: int
    publish_timeout: float
    retry_after_seconds: int
    refuse: Refuse
    # One request per key at a time in this process: a second one sent while the first is
    # in flight waits for it and is answered from its record, instead of publishing too.
    _busy: dict[str, tuple[anyio.Lock, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.replayed = Counter(
            "shoal_gateway_idempotent_replays",
            "Requests answered from the idempotency store",
            registry=self.registry,
        )

    def _unavailable(self, message: str) -> JSONResponse:
        return self.refuse(503, message, **{"Retry-After": str(self.retry_after_seconds)})

    async def accept(
        self, project_id: str, key: str, payloads: Sequence[bytes], received_at: float
    ) -> Response:
        digest = key_digest(project_id, key)
        lock, users = self._busy.get(digest, (anyio.Lock(), 0))
        self._busy[digest] = (lock, users + 1)
        try:
            async with lock:
                return await self._accept(project_id, key, payloads, received_at, digest)
        finally:
            lock, users = self._busy[digest]
            if users == 1:
                del self._busy[digest]
            else:
                self._busy[digest] = (lock, users - 1)

    async def _accept(
        self,
        project_id: str,
        key: str,
        payloads: Sequence[bytes],
        received_at: float,
        digest: str,
    ) -> Response:
        body_print = fingerprint(payloads)
        try:
            with anyio.fail_after(self.publish_timeout):
                known = await self.store.recall(project_id, digest)
        except Exception as exc:  # nothing was reserved or published: refuse, never 500
            log.warning(
                "idempotency store did not answer; answering 503",
                extra=fields(project=project_id, error=repr(exc)),
            )
            return self._unavailable(f"idempotency store did not answer: {exc or repr(exc)}")
        if known is not None:
            if known.fingerprint != body_print:
                return self.refuse(
                    422,
                    f"{IDEMPOTENCY_HEADER} {key!r} was used with a different body for project "
                    f"{project_id!r} (its first request had {known.count} messages)",
                )
            self.replayed.inc()
            return JSONResponse(known.body(), status_code=200, headers={REPLAYED_HEADER: "true"})
        return await self._stamp_and_publish(
            project_id, key, payloads, received_at=received_at, digest=digest, body_print=body_print
        )

    async def _stamp_and_publish(
        self,
        project_id: str,
        key: str,
        payloads: Sequence[bytes],
        *,
        received_at: float,
        digest: str,
        body_print: str,
    ) -> Response:
        ident = identity(project_id, key, body_print)
        envelopes = stamp(
            project_id,
            payloads,
            gateway_id=ident.series_id,
            first_sequence=1,
            message_ids=ident.message_ids(len(payloads)),
            received_at=received_at,
            partitions=self.partitions,
        )
        refusal = await self.publish(
            project_id,
            envelopes,
            series=ident.series_id,
            received_at=received_at,
            announce_apart=True,
        )
        if refusal is not None:
            return refusal
        answer = IdempotentAnswer(
            project_id=project_id,
            key_digest=digest,
            fingerprint=body_print,
            series_id=ident.series_id,
            id_base=ident.id_base,
            partition=envelopes[0].partition,
            count=len(envelopes),
            accepted_at=time.time(),
        )
        try:
            with anyio.fail_after(self.publish_timeout):
                await self.store.remember(answer)
        except Exception as exc:  # stored and recorded: the answer is 202 all the same
            log.warning(
                "idempotency answer not remembered: a retry is published again (the broker's "
                "duplicate window covers it)",
                extra=fields(project=project_id, series=ident.series_id, error=repr(exc)),
            )
        return JSONResponse(answer.body(), status_code=202)
