"""The handler's run loop: follow the assignment, own partitions with a safe handoff, land
data and ack after the write.

Ownership of a partition has three guards, so no two handlers process it at once:
the assignment (which generation says it is ours), the hold (a per-partition lock the
previous owner releases after draining, or that lapses with its lease, or that is taken
over after ``claim_patience``), and the lease deadline (checked with no I/O right before
every write, so a paused process that wakes up after its lease expired writes nothing).
The order of the handoff is ``core.handoff.PartitionHandoff``'s; this module performs it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import psutil
from anyio.abc import TaskGroup, TaskStatus

from core.backlog import ProjectVolume, top_projects
from core.coordination import Hold
from core.errors import (
    LeaseLostError,
    MemberExistsError,
    PositionGoneError,
    ShoalError,
    StoreUnavailableError,
)
from core.handoff import (
    AwaitPredecessor,
    BackOff,
    Claim,
    ClaimSettled,
    Consume,
    Failed,
    Finish,
    HandBack,
    HandedBack,
    HandoffEvent,
    HoldObserved,
    LeaseLost,
    Observe,
    PartitionHandoff,
    PredecessorDone,
    Release,
    Released,
    RetryDue,
    Revoked,
    ownership_changes,
    stale_holds,
)
from core.ingest import unprocessable
from core.landing import RollPolicy
from core.messages import LandedRow, MessageKind
from core.model import Assignment, MemberId, MemberStats, Partition
from core.ports import (
    AssignmentStore,
    Delivery,
    HoldStore,
    LandedTable,
    LoadReports,
    Membership,
    MembershipLease,
    ProjectRegistry,
    Sink,
    Subscription,
    Transport,
)
from core.retry import DeadLetterReason, deliveries_exhausted, retry_delay
from core.routing import RouteTable, held_back, names_cluster, subscribed_clusters
from services.common.clusters import Datacenters, RouteView
from services.common.logs import fields
from services.common.observed import Observed
from services.common.settings import HandlerSettings
from services.handler.landing import Lander, LandingOptions
from services.handler.metrics import HandlerMetrics

log = logging.getLogger("shoal.handler")

_REFRESHES_PER_TTL = 4  # active projects' registrations are refreshed 4 times per TTL
_REGISTER_BATCH = 500  # project ids per registration request when refreshing
_FULL_LOG_INTERVAL = 60.0  # seconds between two warnings that one partition is at its cap
_STORE_CALL_BOUND = 5.0  # seconds one claim, release or close may take before it failed


@dataclass
class _Ownership:
    """One owned partition: its current generation, and the signal to give it back."""

    partition: Partition
    generation: int
    granted_at: float
    revoked: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    # open while consuming, until handed back: one per cluster read ("" with one cluster)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    refresh_at: float = 0.0  # monotonic time of the next refresh of its registrations
    started: bool = False  # consumed at least once (the handoff time is measured)
    # projects that sent data since the last refresh of their registrations (at most the cap)
    active: set[str] = field(default_factory=set)


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
        table: LandedTable,
        metrics: HandlerMetrics,
        datacenters: Datacenters | None = None,
    ) -> None:
        self._settings = settings
        # Multi-datacenter routing: every owned partition is read from each cluster the
        # route table consumes; None: from ``transport`` only.
        self._datacenters = datacenters
        self._routes: Observed[RouteTable | None] = Observed(None)
        self._route_view = None if datacenters is None else RouteView(datacenters.clusters)
        self._id: MemberId = settings.id
        self._membership = membership
        self._reports = reports
        self._assignments = assignments
        self._hold_store = holds
        self._registry = projects
        self._transport = transport
        self._sink = sink
        self._table = table
        self._metrics = metrics
        self._owned: dict[Partition, _Ownership] = {}
        self._holds: dict[Partition, Hold] = {}
        self._members: frozenset[MemberId] = frozenset()
        # Ticks whenever holds or live members change: what a waiting claim wakes on.
        self._coordination: Observed[int] = Observed(0)
        self._stopping = False
        self._projects: dict[Partition, set[str]] = {}
        self._project_seen: dict[str, float] = {}  # project -> last data message (monotonic)
        self._refusals_logged: dict[Partition, float] = {}  # when the cap was last logged
        self._landed_times: deque[tuple[float, int]] = deque(maxlen=64)
        # Rows landed per registered project, one Counter per load report: together the
        # last project_window seconds. Registered only, like _project_seen (bounded).
        self._volume: deque[Counter[str]] = deque(
            [Counter()], maxlen=max(1, math.ceil(settings.project_window / settings.stats_interval))
        )
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
            if self._datacenters is not None:
                await watchers.start(self._watch_routes)
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
            await self._release_stale_holds()
            return lease
        return None

    async def _release_stale_holds(self) -> None:
        """Release what an earlier run of this id still holds, all at once, each within
        ``_STORE_CALL_BOUND``: one after the other under one bound, a store slow right
        after its restart (Kafka's log) let 43 of them run out of time, and their next
        owners waited ``claim_patience`` for every one."""
        try:
            with anyio.fail_after(_STORE_CALL_BOUND):
                stale = stale_holds(self._id, await self._hold_store.holds())
        except (StoreUnavailableError, TimeoutError) as exc:
            log.warning(
                "holds of an earlier run not read; their next owners take them over "
                "after claim_patience",
                extra=fields(error=repr(exc)),
            )
            return
        left: dict[Partition, str] = {}

        async def release(partition: Partition) -> None:
            try:
                with anyio.fail_after(_STORE_CALL_BOUND):
                    await self._hold_store.release(partition, self._id)
            except (StoreUnavailableError, TimeoutError) as exc:
                left[partition] = repr(exc)

        async with anyio.create_task_group() as releases:
            for partition in stale:
                releases.start_soon(release, partition)
        if left:
            log.warning(
                "holds of an earlier run not released; their next owners take them over "
                "after claim_patience",
                extra=fields(partitions=sorted(left), error=next(iter(left.values()))),
            )
        if released := [p for p in stale if p not in left]:
            log.info("released holds of an earlier run", extra=fields(partitions=released))

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
        """Drive ``ownership``'s partition through ``core.handoff.PartitionHandoff``: the
        machine decides (claim, consume, hand back, release, back off); this performs.
        A failure (the broker, the store, a bug) stays in this partition."""
        handoff = PartitionHandoff.granted(
            ownership.partition,
            self._id,
            predecessor=previous is not None,
            patience=self._settings.claim_patience,
        )
        try:
            while not handoff.done:
                if lease.is_lost() and not handoff.lease_lost:
                    handoff = handoff.on(LeaseLost())
                    continue
                if ownership.revoked.is_set() and not handoff.revoked:
                    handoff = handoff.on(Revoked())
                    continue
                handoff = handoff.on(await self._perform(handoff, ownership, previous, lease))
        finally:
            # Cancelled: the lease is lost (or the stop's drain timed out and the member
            # left). Shielded and bounded: close and release still reach the broker and
            # the store, so the next owner starts without waiting for this lease to lapse.
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_bound()):
                if not handoff.done:
                    handoff = handoff.on(LeaseLost())
                while not handoff.done:
                    handoff = handoff.on(await self._perform(handoff, ownership, previous, lease))
            ownership.done.set()
            if self._owned.get(ownership.partition) is ownership:
                del self._owned[ownership.partition]
                self._projects.pop(ownership.partition, None)

    def _cleanup_bound(self) -> float:
        return self._settings.drain_timeout + 2 * _STORE_CALL_BOUND

    async def _perform(
        self,
        handoff: PartitionHandoff,
        ownership: _Ownership,
        previous: _Ownership | None,
        lease: MembershipLease,
    ) -> HandoffEvent:
        """Carry out the machine's command; what happened is the next event."""
        partition = ownership.partition
        command = handoff.command
        if isinstance(command, Finish):
            raise RuntimeError("a finished handoff has nothing left to perform")
        try:
            match command:
                case AwaitPredecessor():
                    if previous is not None:
                        await previous.done.wait()
                    return PredecessorDone()
                case Observe(after_change=after_change):
                    # The hold or the member set changes when the previous owner releases
                    # or expires; the timeout re-reads in case a change was missed.
                    if after_change and not await self._coordination.wait_change(within=1.0):
                        self._holds = dict(await self._hold_store.holds())
                    return HoldObserved(self._holds.get(partition), self._members, time.monotonic())
                case Claim(replacing=replacing, reason=reason):
                    with anyio.fail_after(_STORE_CALL_BOUND):
                        accepted = await self._hold_store.claim(
                            partition, self._id, ownership.generation, replacing
                        )
                    if accepted:
                        log.info(
                            "claimed",
                            extra=fields(
                                partition=partition, generation=ownership.generation, reason=reason
                            ),
                        )
                    return ClaimSettled(accepted)
                case Consume():
                    await self._consume(ownership)
                    return Revoked()
                case HandBack(flush=flush):
                    await self._hand_back(ownership, flush=flush)
                    return HandedBack()
                case Release():
                    with anyio.fail_after(_STORE_CALL_BOUND):
                        await self._hold_store.release(partition, self._id)
                    log.info(
                        "released",
                        extra=fields(partition=partition, generation=ownership.generation),
                    )
                    return Released()
                case BackOff(failures=failures, interruptible=interruptible):
                    delay = retry_delay(
                        failures, base=self._settings.retry_delay, cap=self._settings.retry_cap
                    )
                    if not interruptible:
                        await anyio.sleep(delay)
                        return RetryDue()
                    with anyio.move_on_after(delay):
                        await ownership.revoked.wait()
                    return RetryDue()
        except Exception as exc:
            log.warning(
                "partition worker failed; handing back and retrying",
                extra=fields(
                    partition=partition,
                    phase=str(handoff.phase),
                    error=repr(exc),
                    failures=handoff.failures + 1,
                ),
                exc_info=not isinstance(exc, ShoalError | OSError | TimeoutError),
            )
            return Failed(repr(exc))

    async def _hand_back(self, ownership: _Ownership, *, flush: bool) -> None:
        """Land what is buffered for the partition if ``flush`` (bounded; otherwise it is
        redelivered to the next owner), then close its subscriptions."""
        subscriptions, ownership.subscriptions = list(ownership.subscriptions.values()), {}
        try:
            if flush and subscriptions:
                with anyio.move_on_after(self._settings.drain_timeout) as scope:
                    for subscription in subscriptions:
                        await self._lander.flush(subscription)
                if scope.cancelled_caught:
                    log.warning(
                        "partition not drained in time; its buffered messages will be redelivered",
                        extra=fields(partition=ownership.partition),
                    )
        finally:
            with anyio.move_on_after(_STORE_CALL_BOUND):
                for subscription in subscriptions:
                    await subscription.close()

    async def _consume(self, ownership: _Ownership) -> None:
        """Open the partition and land its messages until the ownership is revoked: from
        the one transport, or from every cluster the route table consumes (one reader per
        cluster, started and stopped as the table changes)."""
        partition = ownership.partition
        settings = self._settings
        if not ownership.started:
            ownership.started = True
            self._metrics.handoff_seconds.observe(time.monotonic() - ownership.granted_at)
        self._projects[partition] = set(await self._registry.projects(partition, now=time.time()))
        ownership.refresh_at = time.monotonic() + settings.registration_ttl / _REFRESHES_PER_TTL
        if self._datacenters is None:
            while not ownership.revoked.is_set():
                subscription = await self._transport.open(partition, self._id)
                ownership.subscriptions[""] = subscription
                self._lander.opened(subscription)
                try:
                    while not ownership.revoked.is_set():
                        await self._consume_once(ownership, subscription)
                except PositionGoneError as exc:
                    await self._close_gone(ownership, "", subscription, exc)
            return
        transports = self._datacenters.transports
        async with anyio.create_task_group() as tg:
            reading: set[str] = set()
            while not ownership.revoked.is_set():
                for cluster in subscribed_clusters(self._route_table()):
                    if cluster not in reading:
                        reading.add(cluster)
                        tg.start_soon(
                            self._consume_cluster, ownership, cluster, transports[cluster], reading
                        )
                await self._routes.wait_change(within=settings.fetch_timeout)

    async def _consume_once(
        self,
        ownership: _Ownership,
        subscription: Subscription,
        keep: Callable[[Sequence[Delivery]], Awaitable[Sequence[Delivery]]] | None = None,
    ) -> None:
        """One fetch, landed (``keep`` first picks the deliveries to land now)."""
        settings = self._settings
        if time.monotonic() >= ownership.refresh_at:
            ownership.refresh_at = time.monotonic() + settings.registration_ttl / _REFRESHES_PER_TTL
            await self._refresh(ownership)
        if not await self._lander.wait_for_room(within=settings.fetch_timeout):
            return  # the buffer is full while the previous roll is written: hold off
        size = min(settings.fetch_batch, max(1, self._lander.room()))
        deliveries = await subscription.fetch(size, settings.fetch_timeout)
        if keep is not None:
            deliveries = await keep(deliveries)
        if deliveries:
            await self._take(ownership, subscription, deliveries)

    async def _consume_cluster(
        self, ownership: _Ownership, cluster: str, transport: Transport, reading: set[str]
    ) -> None:
        """Read the partition from ``cluster`` while it is owned and the route table
        consumes the cluster. A cluster that fails (a datacenter down) is retried with
        backoff here, alone: the other clusters' readers go on.

        An ordered route being migrated holds its new cluster's messages back
        (``core.routing.held_back``): they wait here, unacked but kept alive (no delivery
        attempt is spent), and land in fetch order once the table releases them."""
        partition = ownership.partition
        settings = self._settings
        waiting: list[Delivery] = []
        kept_alive = time.monotonic()
        subscription: Subscription | None = None
        failures = 0

        async def keep(fetched: Sequence[Delivery]) -> Sequence[Delivery]:
            # One table for the waiting and the fetched: a project's messages stay in order.
            table = self._route_table()
            if any(not names_cluster(d.envelope.project_id, cluster, table) for d in fetched):
                table = await self._read_routes()
            before = len(waiting)
            pending, release = [*waiting, *fetched], list[Delivery]()
            waiting.clear()
            for delivery in pending:
                held = held_back(delivery.envelope.project_id, cluster, table)
                (waiting if held else release).append(delivery)
            if before and not waiting:
                log.info(
                    "held-back messages released",
                    extra=fields(partition=partition, cluster=cluster, messages=before),
                )
            elif waiting and not before:
                log.info(
                    "holding messages back", extra=fields(partition=partition, cluster=cluster)
                )
            return release

        try:
            while not ownership.revoked.is_set() and cluster in subscribed_clusters(
                self._route_table()
            ):
                try:
                    if subscription is None:
                        subscription = await transport.open(partition, self._id)
                        ownership.subscriptions[cluster] = subscription
                        self._lander.opened(subscription)
                    await self._consume_once(ownership, subscription, keep)
                    if waiting and time.monotonic() - kept_alive > subscription.ack_wait / 3:
                        kept_alive = time.monotonic()
                        await subscription.keep_alive(waiting)
                    failures = 0
                except PositionGoneError as exc:
                    assert subscription is not None
                    waiting.clear()  # the next subscription delivers what is still stored
                    await self._close_gone(ownership, cluster, subscription, exc)
                    subscription = None
                except Exception as exc:  # this cluster only: a DC down must not stop the rest
                    failures += 1
                    delay = retry_delay(failures, base=settings.retry_delay, cap=settings.retry_cap)
                    log.warning(
                        "cluster unavailable; retrying",
                        extra=fields(
                            partition=partition, cluster=cluster, error=repr(exc), retry_in=delay
                        ),
                    )
                    with anyio.move_on_after(delay):
                        await ownership.revoked.wait()
            if subscription is not None and not ownership.revoked.is_set():
                # no longer consumed (a migration ended): land what is buffered, then close
                ownership.subscriptions.pop(cluster, None)
                with anyio.move_on_after(settings.drain_timeout):
                    await self._lander.flush(subscription)
                with anyio.move_on_after(_STORE_CALL_BOUND):
                    await subscription.close()
        finally:
            reading.discard(cluster)

    async def _close_gone(
        self,
        ownership: _Ownership,
        cluster: str,
        subscription: Subscription,
        exc: PositionGoneError,
    ) -> None:
        """Land what is buffered from a subscription whose log no longer holds its position,
        then close it: the caller opens the partition again, from what is stored."""
        log.error(
            "the partition's log no longer holds the subscription's position (re-created, "
            "cut short, or aged out): landing what is buffered and opening the partition "
            "again",
            extra=fields(partition=ownership.partition, cluster=cluster, error=str(exc)),
        )
        ownership.subscriptions.pop(cluster, None)
        with anyio.move_on_after(self._settings.drain_timeout):
            await self._lander.flush(subscription)
        with anyio.move_on_after(_STORE_CALL_BOUND):
            await subscription.close()

    def _route_table(self) -> RouteTable:
        assert self._route_view is not None
        return self._route_view.table

    async def _read_routes(self) -> RouteTable:
        """The stored route table now, not at the watch's next poll: a gateway may have
        read a newer one already and published by it."""
        assert self._datacenters is not None and self._route_view is not None
        table = self._route_view.apply(await self._datacenters.routes.current())
        if table is not self._routes.value:
            self._routes.set(table)
        return table

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
        announced: list[str] = []
        senders: set[str] = set()  # projects with data in this batch
        cap = self._settings.max_projects_per_partition
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
                announced.append(envelope.project_id)
            else:
                rows.append(
                    LandedRow(
                        envelope,
                        ownership.generation,
                        self._id,
                        now,
                        log_id=subscription.log_id,
                        position=delivery.position,
                    )
                )
                senders.add(envelope.project_id)
        if announced:
            await self._register(partition, announced)
            for project_id in dict.fromkeys(announced):
                await self._transport.reply_registration(partition, project_id, self._id)
        # Only registered projects count toward project_count and are refreshed, so only
        # they are remembered: a flood of unregistered ids grows neither map. (A project
        # whose registration expired or was refused is announced again by its gateway within
        # SHOAL_GATEWAY_REANNOUNCE_INTERVAL of its next message.)
        registered = self._projects.get(partition, set())
        for project_id in senders & registered:
            self._project_seen[project_id] = seen_at
            if len(ownership.active) < cap:
                ownership.active.add(project_id)
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
        volume = self._volume[-1]
        for row in rows:
            project_id = row.envelope.project_id
            if project_id in self._projects.get(row.envelope.partition, ()):
                volume[project_id] += 1

    async def _register(self, partition: Partition, project_ids: Sequence[str]) -> None:
        """Register (or refresh) ``project_ids`` on ``partition`` for the registration TTL;
        past the partition's cap the new ones are left out (counted and logged, at most
        once a minute per partition): their data lands all the same."""
        settings = self._settings
        done = await self._registry.register(
            partition,
            project_ids,
            now=time.time(),
            ttl=settings.registration_ttl,
            cap=settings.max_projects_per_partition,
        )
        self._projects.setdefault(partition, set()).update(
            p for p in project_ids if p not in done.refused
        )
        for project_id in sorted(done.added):
            log.info("project registered", extra=fields(project=project_id, partition=partition))
        if done.refused:
            self._metrics.registrations_refused.inc(len(done.refused))
            now = time.monotonic()
            if now >= self._refusals_logged.get(partition, -math.inf) + _FULL_LOG_INTERVAL:
                self._refusals_logged[partition] = now
                log.warning(
                    "partition at its cap of project registrations; new projects not registered",
                    extra=fields(
                        partition=partition,
                        cap=settings.max_projects_per_partition,
                        refused=len(done.refused),
                        example=min(done.refused),
                    ),
                )

    async def _refresh(self, ownership: _Ownership) -> None:
        """Refresh the registrations of the registered projects that sent data on the
        partition since the last refresh, in batches, then reload the partition's live
        registrations."""
        partition = ownership.partition
        active, ownership.active = sorted(ownership.active), set()
        for start in range(0, len(active), _REGISTER_BATCH):
            await self._register(partition, active[start : start + _REGISTER_BATCH])
        self._projects[partition] = set(await self._registry.projects(partition, now=time.time()))

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
            top_projects=self._top_projects(),
        )

    def _top_projects(self) -> tuple[ProjectVolume, ...]:
        """The ranking over the window; the next rows count in a new interval."""
        ranking = top_projects(sum(self._volume, Counter()), self._settings.top_projects)
        self._volume.append(Counter())
        return ranking

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

    async def _watch_routes(self, *, task_status: TaskStatus[None]) -> None:
        """Follow the route table; started once the first table (or none) is read."""
        assert self._datacenters is not None
        started = False
        assert self._route_view is not None
        async for stored in self._datacenters.routes.watch():
            table = self._route_view.apply(stored)
            self._routes.set(table)
            if not started:
                started = True
                task_status.started()
            log.info("route table applied", extra=fields(version=table.version))

    async def _watch_members(self) -> None:
        async for members in self._membership.watch():
            self._members = members
            self._coordination.set(self._coordination.value + 1)
