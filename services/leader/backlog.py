"""The broker's backlog as the leader sees it: per partition lag and oldest unacked age
(``BacklogReader``, behind the status document and the gauges), the backlog alert the
active leader logs (``BacklogAlerter``; the rule is ``core.backlog.backlog_alerts``), and
the room it makes in a broker that keeps landed messages under a size cap
(``LandedTrimmer``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge

from core.backlog import backlog_alerts, unacked_age
from core.errors import BrokerUnavailableError
from core.model import Partition
from core.ports import Transport
from services.common.clusters import Backlogs
from services.common.logs import fields

__all__ = ["Backlog", "BacklogAlerter", "BacklogReader", "LandedTrimmer", "rounded_age"]

log = logging.getLogger("shoal.leader.backlog")

_READ_TIMEOUT = 2.0  # per partition and read: one slow partition shows as unknown
# Every partition at once (up to this many): the Kafka and NATS transports answer the
# concurrent reads of a gathering with one request (``adapters._batched``), so a cap of 16
# made eight gatherings of a read of 128 partitions.
_CONCURRENT_READS = 1024


@dataclass(frozen=True, slots=True)
class Backlog:
    """One read of every partition: ``lags[p]`` (None: unreadable) and ``ages[p]``, the
    oldest unacked message's age in seconds at the read (None: nothing unacked, or
    unreadable: ``age_known[p]`` tells which)."""

    lags: tuple[int | None, ...]
    ages: tuple[float | None, ...]
    age_known: tuple[bool, ...]

    def known_ages(self) -> dict[Partition, float | None]:
        """The ages read, by partition; unreadable partitions left out."""
        return {p: age for p, age in enumerate(self.ages) if self.age_known[p]}


class BacklogReader:
    """Reads the lag and the oldest unacked message of every partition at most every
    ``ttl`` seconds (readers in between get the last read), and keeps the per partition
    gauges at the last read. An age is the ``clock`` (the wall clock) minus the broker's
    store time; a partition with no lag is not asked for its oldest message."""

    def __init__(
        self,
        transport: Backlogs,
        partitions: int,
        *,
        ttl: float = 2.0,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._transport = transport
        self._partitions = partitions
        self._ttl = ttl
        self._clock = clock
        self._last = Backlog((None,) * partitions, (None,) * partitions, (False,) * partitions)
        self._read_at = float("-inf")
        self._lock = anyio.Lock()
        self._lag_gauge = Gauge(
            "shoal_partition_lag", "Backlog per partition", ["partition"], registry=registry
        )
        self._age_gauge = Gauge(
            "shoal_partition_oldest_unacked_age_seconds",
            "Age of the oldest unacked message per partition (0: nothing unacked)",
            ["partition"],
            registry=registry,
        )

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def last(self) -> Backlog:
        """The last read, without reading (every partition unknown before the first)."""
        return self._last

    async def read(self) -> Backlog:
        async with self._lock:  # concurrent readers share one read
            if time.monotonic() - self._read_at >= self._ttl:
                self._last = await self._read()
                self._read_at = time.monotonic()
            return self._last

    async def _read(self) -> Backlog:
        lags: list[int | None] = [None] * self._partitions
        stored: list[float | None] = [None] * self._partitions
        known = [False] * self._partitions
        limiter = anyio.CapacityLimiter(_CONCURRENT_READS)

        async def read_lag(partition: int) -> None:
            async with limiter:
                try:
                    with anyio.fail_after(_READ_TIMEOUT):
                        lags[partition] = await self._transport.backlog(partition)
                except Exception as exc:  # unknown, not an error page: shown as null
                    log.debug(
                        "backlog read failed", extra=fields(partition=partition, error=repr(exc))
                    )

        async def read_age(partition: int) -> None:
            async with limiter:
                try:
                    with anyio.fail_after(_READ_TIMEOUT):
                        stored[partition] = await self._transport.oldest_unacked(partition)
                    known[partition] = True
                except Exception as exc:
                    log.debug(
                        "oldest unacked read failed",
                        extra=fields(partition=partition, error=repr(exc)),
                    )

        # Two rounds, each over every partition at once: the transports answer the reads
        # of a round with few requests (``adapters._batched``).
        async with anyio.create_task_group() as tg:
            for partition in range(self._partitions):
                tg.start_soon(read_lag, partition)
        async with anyio.create_task_group() as tg:
            for partition, lag in enumerate(lags):
                if lag:
                    tg.start_soon(read_age, partition)
                elif lag == 0:
                    known[partition] = True
        now = self._clock()
        ages = tuple(unacked_age(at, now) for at in stored)
        for p in range(self._partitions):
            if lags[p] is not None:
                self._lag_gauge.labels(partition=str(p)).set(lags[p] or 0)
            if known[p]:
                self._age_gauge.labels(partition=str(p)).set(ages[p] or 0.0)
        return Backlog(tuple(lags), ages, tuple(known))


class BacklogAlerter:
    """Logs one WARNING when a partition's oldest unacked message gets older than
    ``threshold`` seconds and one when it recovers, looking every ``interval`` seconds
    while ``is_active()`` (the active leader: standbys stay quiet, and a new leader starts
    from no alerts). Counts the alerts raised and gauges the partitions alerting."""

    def __init__(
        self,
        reader: BacklogReader,
        *,
        group: str,
        threshold: float,
        interval: float,
        is_active: Callable[[], bool],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._reader = reader
        self._group = group
        self._threshold = threshold
        self._interval = interval
        self._is_active = is_active
        self.alerting: frozenset[Partition] = frozenset()
        self._raised = Counter(
            "shoal_backlog_alerts",
            "Partitions whose oldest unacked message got older than the alert age",
            registry=registry,
        )
        self._alerting_gauge = Gauge(
            "shoal_backlog_alerting_partitions",
            "Partitions whose oldest unacked message is older than the alert age now",
            registry=registry,
        )

    async def run(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            if self._is_active():
                await self.look()
            else:
                self.alerting = frozenset()
                self._alerting_gauge.set(0)
            with anyio.move_on_after(self._interval):
                await stop.wait()

    async def look(self) -> None:
        """Read the backlog, then log and count what crossed the threshold or recovered."""
        backlog = await self._reader.read()
        outcome = backlog_alerts(backlog.known_ages(), self._threshold, self.alerting)
        self._raised.inc(len(outcome.raised))
        for message, partitions in (
            ("partition backlog too old", outcome.raised),
            ("partition backlog recovered", outcome.cleared),
        ):
            for partition in partitions:
                log.warning(
                    message,
                    extra=fields(
                        group=self._group,
                        partition=partition,
                        oldest_unacked_age_s=rounded_age(backlog.ages[partition]),
                        lag=backlog.lags[partition],
                        threshold_s=self._threshold,
                    ),
                )
        self.alerting = outcome.alerting
        self._alerting_gauge.set(len(outcome.alerting))


class LandedTrimmer:
    """While ``is_active()``, asks the transport every ``interval`` seconds to drop what
    every consumer has landed once the data stream nears its size cap
    (``Transport.trim_landed``): with limits retention and ``discard: new`` the landed
    messages would otherwise fill the stream until ``max_age`` and the gateway would
    refuse everything. A broker that does not answer is logged and asked again."""

    def __init__(
        self,
        transport: Transport,
        partitions: int,
        *,
        interval: float,
        is_active: Callable[[], bool],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._transport = transport
        self._partitions = partitions
        self._interval = interval
        self._is_active = is_active
        self._dropped = Counter(
            "shoal_leader_landed_messages_trimmed",
            "Landed messages dropped from the broker to keep room under its size cap",
            registry=registry,
        )

    async def run(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            if self._is_active():
                await self.trim()
            with anyio.move_on_after(self._interval):
                await stop.wait()

    async def trim(self) -> int:
        try:
            dropped = await self._transport.trim_landed(self._partitions)
        except BrokerUnavailableError as exc:
            log.warning("landed messages not trimmed", extra=fields(error=str(exc)))
            return 0
        if dropped:
            self._dropped.inc(dropped)
            log.info(
                "landed messages dropped from the broker to make room",
                extra=fields(dropped=dropped),
            )
        return dropped


def rounded_age(age: float | None) -> float | None:
    """An age as the status document and the log show it (tenths of a second)."""
    return None if age is None else round(age, 1)
