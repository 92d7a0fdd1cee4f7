"""The device simulator: NDJSON batches over many projects, posted to the gateway.

Used by `shoal devices`, `shoal up` and the e2e tests.

Message ``n`` (0, 1, 2 ...) is the JSON object ``{"n": n, "project": ..., "v": ...}``;
batch ``k`` holds messages ``[k * batch, (k + 1) * batch)`` for project ``k % projects``
(ids ``proj-0001`` ...). ``concurrency`` workers send batches, at most ``rate`` messages
per second when a rate is set. Only message ids from 202 answers count as accepted; a
503 is retried after its ``Retry-After`` with the same payloads (the gateway then stamps
new ids and sequences), any other answer is counted as rejected and not retried.

With ``idempotency_keys`` (as `shoal devices` and `shoal up` send, the way a careful device
does) every batch carries an ``Idempotency-Key`` of its own, so a retry after a lost answer
(a dropped connection, a timeout) is answered 200 with the first answer's ids instead of
landing the batch twice.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio
import httpx

__all__ = ["LoadGenerator", "LoadPlan", "LoadSummary", "project_id", "run_devices"]


def project_id(index: int) -> str:
    """The id of project ``index`` (1-based): ``proj-0001``."""
    return f"proj-{index:04d}"


@dataclass(frozen=True)
class LoadPlan:
    messages: int | None = 100_000  # None: until the stop event is set
    projects: int = 1_000
    batch: int = 50
    concurrency: int = 8
    rate: float | None = None  # messages per second; None: as fast as the gateway answers
    max_attempts: int = 30  # per batch, over 503s and connection errors
    request_timeout: float = 30.0
    keep_ids: bool = True  # remember every accepted message id (tests); False: counts only
    message_bytes: int = 0  # pad each JSON message to about this many bytes (0: no padding)
    idempotency_keys: bool = False  # an Idempotency-Key per batch: a retry lands it once
    # False: once stopped, a batch waiting to be retried is given up (`shoal devices
    # --duration` ends on time); True: every batch handed out is retried to the end (tests
    # that count what was sent).
    retry_after_stop: bool = True


@dataclass
class LoadSummary:
    accepted: dict[str, int] = field(default_factory=dict)  # message id -> n (keep_ids)
    accepted_count: int = 0
    attempts: int = 0  # HTTP requests sent
    rejected: Counter[int] = field(default_factory=Counter)  # non-202 answers by status
    retried: int = 0  # 503 answers and connection errors that were retried
    replayed: int = 0  # batches whose retry was answered 200 (their first answer was lost)
    transport_errors: int = 0
    failed_batches: int = 0  # batches never accepted (gave up, or a non-503 refusal)
    last_error: str = ""  # the last connection error or refusal, as the operator should see it
    messages_sent: int = 0  # messages of the batches handed to workers
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.accepted_count / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"accepted={self.accepted_count} attempts={self.attempts} "
            f"rejected={dict(self.rejected)} retried={self.retried} replayed={self.replayed} "
            f"failed_batches={self.failed_batches} seconds={self.seconds:.1f} "
            f"rate={self.rate:.0f} msg/s"
            + (f" last_error={self.last_error!r}" if self.last_error else "")
        )


@dataclass(frozen=True)
class _Batch:
    project: str
    first: int
    count: int
    message_bytes: int = 0

    def body(self) -> bytes:
        return b"\n".join(self._message(n) for n in range(self.first, self.first + self.count))

    def _message(self, n: int) -> bytes:
        fields: dict[str, object] = {"n": n, "project": self.project, "v": n % 97}
        short = len(json.dumps(fields)) + len(', "pad": ""')
        if self.message_bytes > short:
            fields["pad"] = "x" * (self.message_bytes - short)
        return json.dumps(fields).encode()


class LoadGenerator:
    """``await LoadGenerator(url, plan).run(stop)``; ``wait_accepted(k)`` for milestones."""

    def __init__(
        self,
        base_url: str,
        plan: LoadPlan,
        api_key: str | None = None,
        *,
        http_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.plan = plan
        self._http_transport = http_transport
        # keys unique to this run: another run's batch k is other data
        self._key_prefix = uuid.uuid4().hex[:16]
        self._headers = {"content-type": "application/x-ndjson"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self.summary = LoadSummary()
        self._waiters: list[tuple[int, anyio.Event]] = []
        self._refusal_waiters: list[tuple[int, int, anyio.Event]] = []  # status, count
        self._done = anyio.Event()

    @property
    def accepted_count(self) -> int:
        return self.summary.accepted_count

    async def wait_accepted(self, count: int) -> None:
        """Return once at least ``count`` messages were accepted (or the run ended)."""
        if self.accepted_count >= count or self._done.is_set():
            return
        event = anyio.Event()
        self._waiters.append((count, event))
        await event.wait()

    async def wait_refused(self, status: int, count: int) -> None:
        """Return once at least ``count`` answers had HTTP ``status`` (or the run ended)."""
        if self.summary.rejected[status] >= count or self._done.is_set():
            return
        event = anyio.Event()
        self._refusal_waiters.append((status, count, event))
        await event.wait()

    async def wait_stopped(self) -> None:
        """Return once ``run`` has returned (every request answered or given up)."""
        await self._done.wait()

    def _batches(self) -> Iterator[_Batch]:
        plan = self.plan
        for k in itertools.count():
            first = k * plan.batch
            if plan.messages is not None and first >= plan.messages:
                return
            count = plan.batch
            if plan.messages is not None:
                count = min(count, plan.messages - first)
            yield _Batch(project_id(k % plan.projects + 1), first, count, plan.message_bytes)

    async def run(self, stop: anyio.Event | None = None) -> LoadSummary:
        """Send the plan (or until ``stop``), then return the summary."""
        plan = self.plan
        batches = self._batches()
        started = anyio.current_time()
        wall_started = time.perf_counter()
        limits = httpx.Limits(max_connections=plan.concurrency, max_keepalive_connections=64)
        try:
            async with httpx.AsyncClient(
                base_url=self.base_url,
                limits=limits,
                timeout=httpx.Timeout(plan.request_timeout),
                trust_env=False,
                headers=self._headers,
                transport=self._http_transport,
            ) as client:

                async def worker() -> None:
                    for batch in batches:
                        if stop is not None and stop.is_set():
                            return
                        if plan.rate is not None:
                            await anyio.sleep_until(started + batch.first / plan.rate)
                        self.summary.messages_sent += batch.count
                        await self._send(client, batch, stop)

                async with anyio.create_task_group() as tg:
                    for _ in range(plan.concurrency):
                        tg.start_soon(worker)
        finally:
            self.summary.seconds = time.perf_counter() - wall_started
            self._done.set()
            for _, event in self._waiters:
                event.set()
            for _, _, event in self._refusal_waiters:
                event.set()
        return self.summary

    async def _send(
        self, client: httpx.AsyncClient, batch: _Batch, stop: anyio.Event | None
    ) -> None:
        summary = self.summary
        body = batch.body()
        url = f"/v1/projects/{batch.project}/messages"
        headers = {}
        if self.plan.idempotency_keys:
            headers["idempotency-key"] = f"{self._key_prefix}-{batch.first}"
        for attempt in range(self.plan.max_attempts):
            if attempt and stop is not None and stop.is_set() and not self.plan.retry_after_stop:
                break
            summary.attempts += 1
            try:
                response = await client.post(url, content=body, headers=headers)
            except httpx.TransportError as exc:
                summary.transport_errors += 1
                summary.retried += 1
                summary.last_error = f"no answer from {self.base_url}: {type(exc).__name__}: {exc}"
                await anyio.sleep(0.5)
                continue
            replayed = response.status_code == 200 and bool(headers)
            if response.status_code == 202 or replayed:
                summary.replayed += replayed
                ids = response.json()["message_ids"]
                if len(ids) != batch.count:
                    raise AssertionError(
                        f"202 for {batch.count} messages names {len(ids)} message ids"
                    )
                summary.accepted_count += len(ids)
                if self.plan.keep_ids:
                    for offset, message_id in enumerate(ids):
                        summary.accepted[message_id] = batch.first + offset
                self._progress()
                return
            summary.rejected[response.status_code] += 1
            summary.last_error = f"HTTP {response.status_code}: {response.text[:200]}"
            self._refused(response.status_code)
            if response.status_code not in (429, 503):  # only those say "later"
                summary.failed_batches += 1
                return
            summary.retried += 1
            await anyio.sleep(float(response.headers.get("retry-after", "1")))
        summary.failed_batches += 1

    def _refused(self, status: int) -> None:
        seen = self.summary.rejected[status]
        waiting = []
        for wanted, count, event in self._refusal_waiters:
            if wanted == status and seen >= count:
                event.set()
            else:
                waiting.append((wanted, count, event))
        self._refusal_waiters = waiting

    def _progress(self) -> None:
        count = self.accepted_count
        if not any(threshold <= count for threshold, _ in self._waiters):
            return
        keep = []
        for threshold, event in self._waiters:
            if threshold <= count:
                event.set()
            else:
                keep.append((threshold, event))
        self._waiters = keep


async def run_devices(
    gateway: str,
    plan: LoadPlan,
    duration: float | None,
    report: Callable[[LoadSummary, float], None],
    *,
    report_every: float = 2.0,
    api_key: str | None = None,
) -> LoadSummary:
    """Post ``plan`` to ``gateway`` for ``duration`` seconds (None: until the plan's messages
    are sent), calling ``report(summary, elapsed)`` every ``report_every`` seconds."""
    stop = anyio.Event()
    generator = LoadGenerator(gateway, plan, api_key)
    started = anyio.current_time()
    async with anyio.create_task_group() as tg:

        async def reporter() -> None:
            while True:
                await anyio.sleep(report_every)
                report(generator.summary, anyio.current_time() - started)

        async def timer() -> None:
            if duration is not None:
                await anyio.sleep(duration)
                stop.set()

        tg.start_soon(reporter)
        tg.start_soon(timer)
        summary = await generator.run(stop)
        tg.cancel_scope.cancel()
    return summary
