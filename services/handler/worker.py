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

from core.coordination import Hold
from core.errors import LeaseLostError, MemberExistsError, ShoalError, StoreUnavailableError
from core.handoff import ClaimAction, decide_claim, ownership_changes
from core.ingest import unprocessable
from core.landing import RollPolicy
from core.messages import LandedRow, MessageKind
from core.model import Assignment, MemberId, MemberStats, Partition
from core.ports import (
    AssignmentStore,
    Delivery,
    HoldStore,
    LandingLog,
    LoadReports,
    Membership,
    MembershipLease,
    ProjectRegistry,
    Sink,
    Subscription,
    Transport,
)
from core.retry import DeadLetterReason, deliveries_exhausted, retry_delay
from services.common.logs import fields
from services.common.observed import Observed
from services.common.settings import HandlerSettings
from services.common.table import LandingTable
from services.handler.landing import Lander, LandingOptions
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
        reports: LoadReports,
        assignments: AssignmentStore,
        holds: HoldStore,
        projects: ProjectRegistry,
        transport: Transport,
        sink: Sink,
        landing_log: LandingLog,
        metrics: HandlerMetrics,
    ) -> None:
        self._settings = settings
        self._id: MemberId = settings.id
        self._membership = membership
        self._reports = reports
        self._assignments = assignments
        self._hold_store = holds
        self._registry = projects
        self._transport = transport
        self._sink = sink
        self._table = LandingTable(landing_log, writer=settings.id)
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
        self._landing_options = LandingOptions(
            policy=RollPolicy(
                max_rows=settings.roll_rows,
                max_bytes=settings.roll_bytes,
                max_age=settings.roll_age,
                handover_age=settings.roll_handover_age,
                idle_age=settings.roll_idle_age,
            ),
            write_timeout=settings.write_timeout,
            ownership_margin=settings.margin,
            keepalive_interval=settings.keepalive_interval,
            retry_base=settings.retry_delay,
            retry_cap=settings.retry_cap,
            handover_window=4 * settings.fetch_timeout,
        )
        self._lander: Lander  # one per lease, made by _serve

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
        failures = 0
        while not stop.is_set():
            try:
                lease = await self._membership.join(self._id, self._settings.lease_ttl)
            except (MemberExistsError, StoreUnavailableError) as exc:
                failures += 1
                delay = retry_delay(failures, base=0.2, cap=max(0.2, self._settings.lease_ttl / 2))
                log.warning("cannot join yet", extra=fields(error=str(exc), retry_in=delay))
                with anyio.move_on_after(delay):
                    await stop.wait()
                continue
            log.info("joined", extra=fields(member=self._id, ttl=self._settings.lease_ttl))
            return lease
        return None

    async def _serve(self, lease: MembershipLease, stop: anyio.Event) -> bool:
        """Own partitions under ``lease``; True when it ended by ``stop`` (clean leave)."""
        clean = False
        self._lander = Lander(
            sink=self._sink,
            table=self._table,
            lease=lease,
            options=self._landing_options,
            metrics=self._metrics,
            on_landed=self._landed,
        )
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
            tg.start_soon(self._lander.run)
            tg.start_soon(self._report_load, lease)
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
        async for assignment in self._assignments.watch():
            self._apply(assignment, lease, tg)

    def _apply(self, assignment: Assignment, lease: MembershipLease, tg: TaskGroup) -> None:
        current = [p for p, o in self._owned.items() if not o.revoked.is_set()]
        changes = ownership_changes(self._id, current, assignment, accepting=not self._stopping)
        for partition in changes.revoke:
            self._owned[partition].revoked.set()
        for partition in changes.keep:
            self._owned[partition].generation = assignment.generation
        for partition in changes.grant:
            previous = self._owned.get(partition)
            ownership = _Ownership(partition, assignment.generation, time.monotonic())
            self._owned[partition] = ownership
            tg.start_soon(self._own, ownership, previous, lease)
        owned = len(changes.keep) + len(changes.grant)
        if changes.grant or changes.revoke:
            log.info(
                "assignment applied",
                extra=fields(
                    generation=assignment.generation,
                    owned=owned,
                    granted=list(changes.grant),
                    revoked=list(changes.revoke),
                ),
            )
        self._metrics.owned.set(owned)

    async def _own(
        self, ownership: _Ownership, previous: _Ownership | None, lease: MembershipLease
    ) -> None:
        """Work ``ownership``'s partition until it is revoked. A failure (the broker, the
        store, a bug) stays in this partition: it is logged and retried with backoff while
        the other partitions go on."""
        partition = ownership.partition
        failures = 0
        try:
            if previous is not None:
                await previous.done.wait()
            while not ownership.revoked.is_set():
                try:
                    await self._own_once(ownership, lease)
                    return
                except Exception as exc:
                    failures += 1
                    delay = retry_delay(
                        failures, base=self._settings.retry_delay, cap=self._settings.retry_cap
                    )
                    log.warning(
                        "partition worker failed; retrying",
                        extra=fields(partition=partition, error=repr(exc), retry_in=delay),
                        exc_info=not isinstance(exc, ShoalError | OSError | TimeoutError),
                    )
                    with anyio.move_on_after(delay):
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
            self._projects[partition] = set(await self._registry.projects(partition))
            subscription = await self._transport.open(partition, self._id)
            self._lander.opened(subscription)
            try:
                await self._consume(ownership, subscription)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._hand_back(ownership, subscription, lease)
        finally:
            # Shielded: runs on revoke, on failure and on a lost lease alike. Releasing is
            # safe in each case because consuming has stopped and nothing of this
            # partition is buffered any more; on a lost lease it lets the new owner start
            # without waiting for this member to disappear.
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._hold_store.release(partition, self._id)
                log.info(
                    "released", extra=fields(partition=partition, generation=ownership.generation)
                )

    async def _claim(self, ownership: _Ownership) -> bool:
        """Wait until the previous holder released the partition (or its lease expired)."""
        partition = ownership.partition
        while not ownership.revoked.is_set():
            decision = decide_claim(self._id, self._holds.get(partition), self._members)
            if decision.action is not ClaimAction.WAIT and await self._hold_store.claim(
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
                self._holds = dict(await self._hold_store.holds())
        return False

    async def _hand_back(
        self, ownership: _Ownership, subscription: Subscription, lease: MembershipLease
    ) -> None:
        """Land what is buffered for the partition (unless the lease is gone: then it is
        redelivered to the next owner), then close the subscription."""
        if not lease.is_lost():
            with anyio.move_on_after(self._settings.drain_timeout) as scope:
                await self._lander.flush(subscription)
            if scope.cancelled_caught:
                log.warning(
                    "partition not drained in time; its buffered messages will be redelivered",
                    extra=fields(partition=ownership.partition),
                )
        with anyio.move_on_after(5):
            await subscription.close()

    async def _consume(self, ownership: _Ownership, subscription: Subscription) -> None:
        settings = self._settings
        while not ownership.revoked.is_set():
            if not await self._lander.wait_for_room(within=settings.fetch_timeout):
                continue  # the buffer is full while the previous roll is written: hold off
            size = min(settings.fetch_batch, max(1, self._lander.room()))
            deliveries = await subscription.fetch(size, settings.fetch_timeout)
            if deliveries:
                await self._take(ownership, subscription, deliveries)

    async def _take(
        self, ownership: _Ownership, subscription: Subscription, deliveries: Sequence[Delivery]
    ) -> None:
        """Sort a fetched batch: data rows go to the lander, announcements register their
        project; a message that came back after ``max_deliver`` unsettled deliveries, or
        that cannot be processed, is dead-lettered at once (the transports only count and
        redeliver: this is the one retry budget)."""
        partition = ownership.partition
        self._metrics.delivered.inc(len(deliveries))
        rows: list[LandedRow] = []
        held: list[Delivery] = []
        now = time.time()
        seen_at = time.monotonic()
        for delivery in deliveries:
            if delivery.attempt > 1:
                self._metrics.redelivered.inc()
            envelope = delivery.envelope
            given_up = self._give_up(delivery, partition)
            if given_up is not None:
                reason, why = given_up
                log.error(
                    "message dead-lettered",
                    extra=fields(
                        partition=partition,
                        message=envelope.message_id,
                        reason=reason,
                        why=why,
                        attempt=delivery.attempt,
                    ),
                )
                await delivery.dead_letter(reason)
                self._metrics.dead_lettered.inc()
                continue
            held.append(delivery)
            if envelope.kind is MessageKind.ANNOUNCE:
                await self._register(partition, envelope.project_id)
            else:
                rows.append(LandedRow(envelope, ownership.generation, self._id, now))
                self._project_seen[envelope.project_id] = seen_at
        self._lander.add(partition, subscription, held, rows)

    def _give_up(
        self, delivery: Delivery, partition: Partition
    ) -> tuple[DeadLetterReason, str] | None:
        """Why the delivery goes to the dead letters instead of the lander, if it does."""
        if deliveries_exhausted(delivery.attempt, self._settings.max_deliver):
            return "max_deliver", f"back after {delivery.attempt - 1} deliveries never landed it"
        problem = unprocessable(delivery.envelope, partition)
        return None if problem is None else ("unprocessable", problem)

    def _landed(self, rows: Sequence[LandedRow]) -> None:
        if rows:
            self._last_message_id = rows[-1].envelope.message_id
            self._landed_times.append((time.monotonic(), len(rows)))

    async def _register(self, partition: Partition, project_id: str) -> None:
        self._projects.setdefault(partition, set()).add(project_id)
        if await self._registry.register(partition, project_id):
            log.info("project registered", extra=fields(project=project_id, partition=partition))
        await self._transport.reply_registration(partition, project_id, self._id)

    async def _report_load(self, lease: MembershipLease) -> None:
        while True:
            try:
                await self._reports.report(lease, self._stats())
            except (LeaseLostError, StoreUnavailableError) as exc:
                log.warning("load report failed", extra=fields(error=str(exc)))
            await anyio.sleep(self._settings.stats_interval)

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
        async for holds in self._hold_store.watch_holds():
            self._holds = dict(holds)
            self._coordination.set(self._coordination.value + 1)

    async def _watch_members(self) -> None:
        async for members in self._membership.watch():
            self._members = members
            self._coordination.set(self._coordination.value + 1)
