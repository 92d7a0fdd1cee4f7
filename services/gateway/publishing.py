"""``RecordedPublish``: the one way the gateway publishes a request's messages.

Both ingest paths (a plain request and one with an ``Idempotency-Key``) end here: the
project's announcement goes out with the messages on its first request at this gateway,
the sequence range is recorded in the ledger as accepted or refused before the answer is
decided, and any failure is a 503 with ``Retry-After``, never a 500.

The ledger never changes an answer (``LedgerBook``): a batch the broker stored is a 202
even when its ledger line cannot be written (a 500 would make a client without an
Idempotency-Key send it again: a duplicate). The line is kept and written before any
other, and until it is written the gateway publishes nothing new (503, and ``/readyz``
says why), so the answers and the ledger agree again as soon as the ledger takes writes,
and at most the requests already at the broker wait in memory.
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

from core.errors import PublishError, PublishRefusedError
from core.ingest import announcement
from core.messages import Envelope, LedgerEntry, Outcome
from core.ports import AcceptanceLedger
from core.retry import retry_delay
from services.common.logs import fields

if TYPE_CHECKING:
    from services.gateway.app import GatewayMetrics, GatewayState

__all__ = ["LedgerBook", "Publisher", "RecordedPublish"]

log = logging.getLogger("shoal.gateway")

_REPUBLISH_BASE = 0.25  # seconds before the first re-publish of unconfirmed messages
_REPUBLISH_CAP = 2.0


class Publisher(Protocol):
    """What the gateway needs of a transport: any ``Transport``, or the multi-datacenter
    ``RoutedPublisher`` over one transport per cluster."""

    async def publish(self, envelopes: Sequence[Envelope]) -> None: ...

    async def backlog(self, partition: int) -> int: ...


class LedgerBook:
    """The ledger as the gateway writes it: entries in answer order, one the ledger refused
    kept and written again before the next."""

    def __init__(self, ledger: AcceptanceLedger) -> None:
        self._ledger = ledger
        self._unwritten: list[LedgerEntry] = []
        self.problem: str | None = None  # why the ledger is behind, while it is

    async def record(self, entry: LedgerEntry) -> None:
        """Write ``entry`` after every entry still unwritten; an entry the ledger refuses
        waits (never raises)."""
        self._unwritten.append(entry)
        await self.catch_up()

    async def catch_up(self) -> bool:
        """Write what waits; True once nothing does."""
        while self._unwritten:
            try:
                await self._ledger.record(self._unwritten[0])
            except OSError as exc:
                if self.problem is None:
                    log.error(
                        "acceptance ledger refused a write; publishing nothing new until it "
                        "takes them again",
                        extra=fields(waiting=len(self._unwritten), error=str(exc)),
                    )
                self.problem = f"the acceptance ledger cannot be written: {exc}"
                return False
            del self._unwritten[0]
        if self.problem is not None:
            log.info("acceptance ledger written again; publishing resumes")
            self.problem = None
        return True


@dataclass(frozen=True)
class RecordedPublish:
    transport: Publisher
    ledger: LedgerBook | None
    state: GatewayState
    metrics: GatewayMetrics
    partitions: int
    publish_timeout: float
    retry_after_seconds: int
    refuse: Callable[..., JSONResponse]
    publish_deadline: float

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
        if self.ledger is not None and not await self.ledger.catch_up():
            # The last answers are not all in the ledger yet: a new acceptance would be
            # one more the ledger does not show.
            await self._record(project_id, envelopes, series, received_at, Outcome.REFUSED)
            return self.refuse(
                503, str(self.ledger.problem), **{"Retry-After": str(self.retry_after_seconds)}
            )
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
            await self._publish_until_answered(batches)
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

    async def _publish_until_answered(self, batches: Sequence[Sequence[Envelope]]) -> None:
        """Publish ``batches`` in order. A failed attempt may still have been stored (a
        timeout, a lost confirmation, a broker that restarted), and a 503 then would make a
        client without an Idempotency-Key send the messages again under new ids: a
        duplicate nothing can tell. So the same messages (the same ids: a second copy is
        dropped by the broker's or the subscriptions' duplicate window) are published again
        until the broker confirms them or ``publish_deadline`` passes; the caller answers
        503 only then. A refusal (``PublishRefusedError``: a full stream) of a batch no
        earlier attempt left in doubt is definite, and answered at once: nothing of it was
        stored, and the client learns to back off without waiting out the deadline."""
        deadline = anyio.current_time() + self.publish_deadline
        failures = 0
        in_doubt = False  # an earlier attempt at pending[0] may have been stored
        pending = list(batches)
        while True:
            left = deadline - anyio.current_time()
            try:
                with anyio.fail_after(max(min(self.publish_timeout, left), 0.001)):
                    while pending:
                        await self.transport.publish(pending[0])
                        del pending[0]
                        in_doubt = False
                return
            except (PublishError, TimeoutError) as exc:
                if isinstance(exc, PublishRefusedError) and not in_doubt:
                    raise
                in_doubt = True
                failures += 1
                wait = retry_delay(failures, base=_REPUBLISH_BASE, cap=_REPUBLISH_CAP)
                if anyio.current_time() + wait >= deadline:
                    raise
                log.info(
                    "publish not confirmed; publishing the same messages again",
                    extra=fields(attempt=failures, error=repr(exc), retry_in=wait),
                )
                await anyio.sleep(wait)

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
