"""The handler's run loop: follow the assignment, own partitions with a safe handoff, land
data and ack after the write.

Ownership of a partition has three guards, so no two handlers process it at once:
the assignment (which generation says it is ours), the hold (a per-partition lock the
previous owner releases after draining, or that lapses with its lease), and the lease
deadline (checked with no I/O right before every write, so a paused process that wakes
up after its lease expired writes nothing).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import psutil
from anyio.abc import TaskGroup

from core.errors import LeaseLostError, MemberExistsError, ShoalError, StoreUnavailableError
from core.handoff import ClaimAction, decide_claim
from core.messages import LandedRow, MessageKind
from core.model import Assignment, MemberId, MemberStats, Partition
from core.ports import (
    AssignmentStore,
    Delivery,
    Hold,
    Membership,
    MembershipLease,
    Sink,
    Subscription,
    Transport,
)
from services.common.logs import fields
from services.common.observed import Observed
from services.common.settings import HandlerSettings
from services.handler.metrics import HandlerMetrics

log = logging.getLogger("shoal.handler")


@dataclass
class _Ownership:
    """One owned partition: its current generation, and the signal to give it back."""

    partition: Partition
    generation: int
    granted_at: float
    revoked: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


class Handler:
    def __init__(
        self,
        *,
        settings: HandlerSettings,
        membership: Membership,
        store: AssignmentStore,
        transport: Transport,
        sink: Sink,
        metrics: HandlerMetrics,
    ) -> None:
        self._settings = settings
        self._id: MemberId = settings.id
        self._membership = membership
        self._store = store
        self._transport = transport
        self._sink = sink
        self._metrics = metrics
        self._owned: dict[Partition, _Ownership] = {}
        self._holds: dict[Partition, Hold] = {}
        self._members: frozenset[MemberId] = frozenset()
        # Ticks whenever holds or live members change: what a waiting claim wakes on.
        self._coordination: Observed[int] = Observed(0)
        self._stopping = False
        self._projects: dict[Partition, set[str]] = {}
        self._project_seen: dict[str, float] = {}  # project -> last data message (monotonic)
        self._landed_times: deque[tuple[float, int]] = deque(maxlen=64)
        self._last_message_id = ""
        self._process = psutil.Process()

    @property
    def handler_id(self) -> MemberId:
        return self._id

    def owned(self) -> dict[Partition, int]:
        """Partitions this handler owns now, with their generation."""
        return {p: o.generation for p, o in self._owned.items() if not o.revoked.is_set()}

    async def run(self, stop: anyio.Event) -> None:
        """Serve until ``stop`` is set, then drain every partition, leave, and return.

        A lost lease stops every partition at once (nothing more is written or acked) and
        the handler joins again with a fresh lease.
        """
        async with anyio.create_task_group() as watchers:
            watchers.start_soon(self._watch_holds)
            watchers.start_soon(self._watch_members)
            while not stop.is_set():
                lease = await self._join(stop)
                if lease is None:
                    break
                left_cleanly = await self._serve(lease, stop)
                if not left_cleanly:
                    self._metrics.lease_losses.inc()
                    log.warning("lease lost: stopped every partition; joining again")
            watchers.cancel_scope.cancel()

    async def _join(self, stop: anyio.Event) -> MembershipLease | None:
        delay = 0.2
        while not stop.is_set():
            try:
                lease = await self._membership.join(
                    self._id, self._stats(), self._settings.lease_ttl
                )
            except (MemberExistsError, StoreUnavailableError) as exc:
                log.warning("cannot join yet", extra=fields(error=str(exc), retry_in=delay))
                with anyio.move_on_after(delay):
                    await stop.wait()
                delay = min(delay * 2, self._settings.lease_ttl / 2)
                continue
            log.info("joined", extra=fields(member=self._id, ttl=self._settings.lease_ttl))
            return lease
        return None

    async def _serve(self, lease: MembershipLease, stop: anyio.Event) -> bool:
        """Own partitions under ``lease``; True when it ended by ``stop`` (clean leave)."""
        clean = False
        async with anyio.create_task_group() as tg:

            async def on_lease_lost() -> None:
                await lease.wait_lost()
                tg.cancel_scope.cancel()

            async def on_stop() -> None:
                nonlocal clean
                await stop.wait()
                self._stopping = True
                await self._drain_all()
                clean = True
                # Shielded: leaving marks the lease lost, which wakes on_lease_lost and
                # cancels this group; the revoke must still reach the store.
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await lease.leave()
                tg.cancel_scope.cancel()

            tg.start_soon(on_lease_lost)
            tg.start_soon(on_stop)
            tg.start_soon(self._report_stats, lease)
            tg.start_soon(self._follow_assignment, lease, tg)
        self._owned.clear()
        self._metrics.owned.set(0)
        return clean

    async def _drain_all(self) -> None:
        """Revoke every partition and wait (bounded) until each is drained and released."""
        draining = list(self._owned.values())
        for ownership in draining:
            ownership.revoked.set()
        with anyio.move_on_after(self._settings.drain_timeout) as scope:
            for ownership in draining:
                await ownership.done.wait()
        if scope.cancelled_caught:
            log.warning("drain timed out; unacked messages will be redelivered")
        log.info("drained", extra=fields(partitions=len(draining)))

    async def _follow_assignment(self, lease: MembershipLease, tg: TaskGroup) -> None:
        async for assignment in self._store.watch():
            self._apply(assignment, lease, tg)

    def _apply(self, assignment: Assignment, lease: MembershipLease, tg: TaskGroup) -> None:
        mine = set(assignment.owned_by(self._id))
        current = {p for p, o in self._owned.items() if not o.revoked.is_set()}
        for partition in sorted(current - mine):
            self._owned[partition].revoked.set()
        for partition in sorted(mine & current):
            self._owned[partition].generation = assignment.generation
        granted = [] if self._stopping else sorted(mine - current)
        for partition in granted:
            previous = self._owned.get(partition)
            ownership = _Ownership(partition, assignment.generation, time.monotonic())
            self._owned[partition] = ownership
            tg.start_soon(self._own, ownership, previous, lease)
        if granted or current - mine:
            log.info(
                "assignment applied",
                extra=fields(
                    generation=assignment.generation,
                    owned=len(mine),
                    granted=granted,
                    revoked=sorted(current - mine),
                ),
            )
        self._metrics.owned.set(len(mine))

    async def _own(
        self, ownership: _Ownership, previous: _Ownership | None, lease: MembershipLease
    ) -> None:
        partition = ownership.partition
        try:
            if previous is not None:
                await previous.done.wait()
            while not ownership.revoked.is_set():
                try:
                    await self._own_once(ownership, lease)
                    return
                except (ShoalError, OSError, TimeoutError) as exc:
                    log.warning(
                        "partition worker failed; retrying",
                        extra=fields(partition=partition, error=repr(exc)),
                    )
                    with anyio.move_on_after(1.0):
                        await ownership.revoked.wait()
        finally:
            ownership.done.set()
            if self._owned.get(partition) is ownership:
                del self._owned[partition]
                self._projects.pop(partition, None)

    async def _own_once(self, ownership: _Ownership, lease: MembershipLease) -> None:
        partition = ownership.partition
        if not await self._claim(ownership):
            return
        self._metrics.handoff_seconds.observe(time.monotonic() - ownership.granted_at)
        try:
            self._projects[partition] = set(await self._store.projects(partition))
            subscription = await self._transport.open(partition, self._id)
            try:
                await self._consume(ownership, subscription, lease)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await subscription.close()
        finally:
            # Shielded: runs on revoke, on failure and on a lost lease alike. Releasing is
            # safe in each case because consuming has stopped; on a lost lease it lets the
            # new owner start without waiting for this member to disappear.
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._store.release(partition, self._id)
                log.info(
                    "released", extra=fields(partition=partition, generation=ownership.generation)
                )

    async def _claim(self, ownership: _Ownership) -> bool:
        """Wait until the previous holder released the partition (or its lease expired)."""
        partition = ownership.partition
        while not ownership.revoked.is_set():
            decision = decide_claim(self._id, self._holds.get(partition), self._members)
            if decision.action is not ClaimAction.WAIT and await self._store.claim(
                partition, self._id, ownership.generation, decision.replacing
            ):
                log.info(
                    "claimed",
                    extra=fields(
                        partition=partition,
                        generation=ownership.generation,
                        reason=decision.reason,
                    ),
                )
                return True
            # The hold or the member set changes when the previous owner releases or
            # expires; the timeout re-reads in case a change was missed.
            if not await self._coordination.wait_change(within=1.0):
                self._holds = dict(await self._store.holds())
        return False

    async def _consume(
        self, ownership: _Ownership, subscription: Subscription, lease: MembershipLease
    ) -> None:
        settings = self._settings
        while not ownership.revoked.is_set():
            deliveries = await subscription.fetch(settings.fetch_batch, settings.fetch_timeout)
            if not deliveries:
                continue
            await self._process_batch(ownership, deliveries, lease)

    async def _process_batch(
        self, ownership: _Ownership, deliveries: Sequence[Delivery], lease: MembershipLease
    ) -> None:
        self._metrics.delivered.inc(len(deliveries))
        rows: list[LandedRow] = []
        announcements: list[Delivery] = []
        now = time.time()
        seen: set[str] = set()
        for delivery in deliveries:
            if delivery.attempt > 1:
                self._metrics.redelivered.inc()
            envelope = delivery.envelope
            if envelope.message_id in seen:
                continue  # a redelivery can arrive in the same fetch as its first copy
            seen.add(envelope.message_id)
            if envelope.kind is MessageKind.ANNOUNCE:
                announcements.append(delivery)
            else:
                rows.append(LandedRow(envelope, ownership.generation, self._id, now))
                self._project_seen[envelope.project_id] = time.monotonic()
        # Shielded: once a batch is fetched it is written and acked as a unit, unless the
        # lease is lost (then nothing is written and everything will be redelivered).
        with anyio.CancelScope(shield=True):
            if lease.is_lost():
                return
            for delivery in announcements:
                await self._register(ownership.partition, delivery.envelope.project_id)
            if rows:
                try:
                    await self._sink.write(rows)
                except OSError as exc:
                    log.error("sink write failed; nak", extra=fields(error=str(exc)))
                    await self._settle(deliveries, nak_delay=self._settings.retry_delay)
                    self._metrics.nakd.inc(len(deliveries))
                    return
            await self._settle(deliveries)
        self._metrics.acked.inc(len(deliveries))
        self._metrics.landed.inc(len(rows))
        if rows:
            self._last_message_id = rows[-1].envelope.message_id
            self._landed_times.append((time.monotonic(), len(rows)))

    async def _settle(self, deliveries: Sequence[Delivery], nak_delay: float | None = None) -> None:
        """Ack (or nak) a batch concurrently. An unconfirmed ack is logged, not raised: the
        rows are already written, so at worst the message is redelivered and lands twice."""
        failures = 0

        async def settle(delivery: Delivery) -> None:
            nonlocal failures
            try:
                if nak_delay is None:
                    await delivery.ack()
                else:
                    await delivery.nak(nak_delay)
            except (TimeoutError, ShoalError, ConnectionError) as exc:
                failures += 1
                if failures == 1:
                    log.warning("settle not confirmed", extra=fields(error=repr(exc)))

        limiter = anyio.CapacityLimiter(64)

        async def bounded(delivery: Delivery) -> None:
            async with limiter:
                await settle(delivery)

        async with anyio.create_task_group() as tg:
            for delivery in deliveries:
                tg.start_soon(bounded, delivery)
        if failures:
            log.warning(
                "some settlements unconfirmed; those messages may be redelivered",
                extra=fields(unconfirmed=failures, of=len(deliveries)),
            )

    async def _register(self, partition: Partition, project_id: str) -> None:
        self._projects.setdefault(partition, set()).add(project_id)
        if await self._store.register_project(partition, project_id):
            log.info("project registered", extra=fields(project=project_id, partition=partition))
        await self._transport.reply_registration(partition, project_id, self._id)

    async def _report_stats(self, lease: MembershipLease) -> None:
        while True:
            await anyio.sleep(self._settings.stats_interval)
            try:
                await lease.update(self._stats())
            except (LeaseLostError, StoreUnavailableError) as exc:
                log.warning("stats update failed", extra=fields(error=str(exc)))

    def _stats(self) -> MemberStats:
        return MemberStats(
            cpu=self._process.cpu_percent(interval=None),
            project_count=self._active_projects(),
            last_message_id=self._last_message_id,
            rate=self._rate(),
        )

    def _active_projects(self) -> int:
        """Projects of owned partitions that sent data within ``project_idle`` seconds: the
        load the scaling policy weighs (registered projects only ever accumulate)."""
        horizon = time.monotonic() - self._settings.project_idle
        self._project_seen = {p: t for p, t in self._project_seen.items() if t >= horizon}
        return sum(
            1
            for partition in self.owned()
            for project in self._projects.get(partition, ())
            if project in self._project_seen
        )

    def _rate(self) -> float:
        horizon = time.monotonic() - 10.0
        recent = [(t, n) for t, n in self._landed_times if t >= horizon]
        return round(sum(n for _, n in recent) / 10.0, 1)

    async def _watch_holds(self) -> None:
        async for holds in self._store.watch_holds():
            self._holds = dict(holds)
            self._coordination.set(self._coordination.value + 1)

    async def _watch_members(self) -> None:
        async for members in self._membership.watch():
            self._members = frozenset(members)
            self._coordination.set(self._coordination.value + 1)
