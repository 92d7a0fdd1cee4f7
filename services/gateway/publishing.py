"""``RecordedPublish``: the one way the gateway publishes a request's messages.

Both ingest paths (a plain request and one with an ``Idempotency-Key``) end here: the
project's announcement goes out with the messages on its first request at this gateway,
the sequence range is recorded in the ledger as accepted or refused before the answer is
decided, and any failure is a 503 with ``Retry-After``, never a 500.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio
from fastapi.responses import JSONResponse

from core.errors import PublishError
from core.ingest import announcement
from core.messages import Envelope, LedgerEntry, Outcome
from core.ports import AcceptanceLedger
from services.common.logs import fields

if TYPE_CHECKING:
    from services.gateway.app import GatewayMetrics, GatewayState

__all__ = ["Publisher", "RecordedPublish"]

log = logging.getLogger("shoal.gateway")


class Publisher(Protocol):
    """What the gateway needs of a transport: any ``Transport``, or the multi-datacenter
    ``RoutedPublisher`` over one transport per cluster."""

    async def publish(self, envelopes: Sequence[Envelope]) -> None: ...

    async def backlog(self, partition: int) -> int: ...


@dataclass(frozen=True)
class RecordedPublish:
    transport: Publisher
    ledger: AcceptanceLedger | None
    state: GatewayState
    metrics: GatewayMetrics
    partitions: int
    publish_timeout: float
    retry_after_seconds: int
    refuse: Callable[..., JSONResponse]

    async def __call__(
        self,
        project_id: str,
        envelopes: Sequence[Envelope],
        *,
        series: str,
        received_at: float,
        announce_apart: bool = False,
    ) -> JSONResponse | None:
        """Publish ``envelopes`` (one series' consecutive sequences) and record them: None
        once the broker confirmed them, else the 503 to answer. ``announce_apart``: the
        announcement is a publish of its own, so that a retried request publishes exactly
        the same batch of messages (what an idempotent request needs)."""
        state = self.state
        first_time = project_id not in state.announced
        batches: list[list[Envelope]] = [list(envelopes)]
        if first_time:
            state.announced.add(project_id)
            announced = announcement(
                project_id,
                gateway_id=state.gateway_id,
                message_id=uuid.uuid4().hex,
                received_at=received_at,
                partitions=self.partitions,
            )
            batches = [[announced], batches[0]] if announce_apart else [[announced, *envelopes]]
        started = time.perf_counter()
        try:
            with anyio.fail_after(self.publish_timeout):
                for batch in batches:
                    await self.transport.publish(batch)
        except Exception as exc:  # a reserved range is always recorded, and never a 500
            await self._record(project_id, envelopes, series, received_at, Outcome.REFUSED)
            if first_time:
                state.announced.discard(project_id)
            expected = isinstance(exc, PublishError | TimeoutError)
            log.warning(
                "publish failed; answering 503",
                extra=fields(project=project_id, messages=len(envelopes), error=repr(exc)),
                exc_info=not expected,
            )
            reason = str(exc) if expected else f"{type(exc).__name__}: {exc}"
            return self.refuse(
                503,
                f"broker did not confirm the messages: {reason}",
                **{"Retry-After": str(self.retry_after_seconds)},
            )
        await self._record(project_id, envelopes, series, received_at, Outcome.ACCEPTED)
        self.metrics.publish_seconds.observe(time.perf_counter() - started)
        self.metrics.published.inc(len(envelopes) + first_time)
        self.metrics.accepted.inc(len(envelopes))
        return None

    async def _record(
        self,
        project_id: str,
        envelopes: Sequence[Envelope],
        series: str,
        received_at: float,
        outcome: Outcome,
    ) -> None:
        if self.ledger is not None:
            await self.ledger.record(
                LedgerEntry(
                    gateway_id=series,
                    project_id=project_id,
                    first_sequence=envelopes[0].sequence,
                    last_sequence=envelopes[-1].sequence,
                    outcome=outcome,
                    received_at=received_at,
                    decided_at=time.time(),
                )
            )
