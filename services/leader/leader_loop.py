"""The active leader's loop: watch members (debounced), reconcile on change and every
``reconcile_interval``, publish the strategy's assignment guarded by the term, run the
autoscaling loop and the landing table's upkeep, and step down the moment leadership is
lost. Standby replicas just campaign."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import anyio
from prometheus_client import CollectorRegistry, Counter

from core.assignment import AssignmentOptions, AssignmentRequest, Strategy
from core.errors import FencedError, StoreUnavailableError
from core.handoff import needs_rebalance
from core.model import Assignment, Member, MemberId, Partition
from core.ports import AssignmentStore, Election, Leadership, Membership
from core.retry import retry_delay
from services.common.logs import fields
from services.common.observed import Observed
from services.common.settings import LeaderSettings
from services.common.upkeep import TableKeeper
from services.leader.scaling import ScalingLoop

log = logging.getLogger("shoal.leader")


@dataclass(frozen=True)
class RebalanceRecord:
    """One published generation, for the status API and dashboard."""

    at: float
    generation: int
    members: int
    moved: int
    revoked: dict[MemberId, tuple[int, ...]]
    granted: dict[MemberId, tuple[int, ...]]
    compute_seconds: float


class LeaderLoop:
    def __init__(
        self,
        *,
        settings: LeaderSettings,
        partitions: int,
        strategy: Strategy,
        election: Election,
        membership: Membership,
        store: AssignmentStore,
        options: AssignmentOptions | None = None,
        scaling: ScalingLoop | None = None,
        weights: Callable[[], Mapping[Partition, float]] | None = None,
        registry: CollectorRegistry | None = None,
        upkeep: TableKeeper | None = None,
    ) -> None:
        """``upkeep``: the landing table's, run while this replica leads."""
        self._settings = settings
        self._partitions = partitions
        self._strategy = strategy
        self._election = election
        self._membership = membership
        self._store = store
        self._options = options or AssignmentOptions()
        self._weights = weights
        self.scaling = scaling
        self.upkeep = upkeep
        self.leadership: Leadership | None = None
        self.rebalances: deque[RebalanceRecord] = deque(maxlen=20)
        self._listeners: list[Callable[[], None]] = []
        registry = registry if registry is not None else CollectorRegistry()
        self._published = Counter(
            "shoal_leader_rebalances", "Assignments published by this replica", registry=registry
        )
        self._moved = Counter(
            "shoal_leader_partitions_moved", "Partitions that changed owner", registry=registry
        )

    @property
    def leader_id(self) -> MemberId:
        return self._settings.id

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (synchronously: it must not block) whenever this replica wins
        or loses leadership, sees the live members change while it leads, or publishes a
        generation: what the status document shows changed."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    async def run(self, stop: anyio.Event) -> None:
        """Campaign, lead while elected, campaign again after losing; until ``stop``."""
        async with anyio.create_task_group() as tg:

            async def on_stop() -> None:
                await stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_stop)
            failures = 0
            while True:
                try:
                    leadership = await self._election.campaign(
                        self.leader_id, self._settings.lease_ttl
                    )
                except StoreUnavailableError as exc:
                    # A store outage is no reason to exit: candidates wait it out.
                    failures += 1
                    delay = retry_delay(failures, base=0.2, cap=self._settings.lease_ttl)
                    log.warning(
                        "campaign failed; retrying", extra=fields(error=str(exc), retry_in=delay)
                    )
                    await anyio.sleep(delay)
                    continue
                failures = 0
                self.leadership = leadership
                self._changed()
                log.info("elected", extra=fields(leader=self.leader_id, term=leadership.term))
                try:
                    await self._lead(leadership)
                finally:
                    self.leadership = None
                    self._changed()
                    with anyio.CancelScope(shield=True), anyio.move_on_after(3):
                        await leadership.resign()
                log.warning(
                    "leadership lost; campaigning again", extra=fields(term=leadership.term)
                )

    async def _lead(self, leadership: Leadership) -> None:
        members: Observed[frozenset[MemberId]] = Observed(frozenset())
        async with anyio.create_task_group() as tg:

            async def on_lost() -> None:
                await leadership.wait_lost()
                tg.cancel_scope.cancel()

            async def watch_members() -> None:
                failures = 0
                while True:
                    try:
                        async for live in self._membership.watch():
                            failures = 0
                            if live != members.value:
                                members.set(live)
                                self._changed()
                    except StoreUnavailableError as exc:
                        failures += 1
                        delay = retry_delay(failures, base=0.2, cap=self._settings.lease_ttl)
                        log.warning(
                            "member watch failed; retrying",
                            extra=fields(error=str(exc), retry_in=delay),
                        )
                        await anyio.sleep(delay)

            tg.start_soon(on_lost)
            tg.start_soon(watch_members)

            async def reconcile_until_fenced() -> None:
                await self._reconcile_loop(leadership, members)
                tg.cancel_scope.cancel()  # fenced: step down, then campaign again

            tg.start_soon(reconcile_until_fenced)
            if self.scaling is not None and self.scaling.enabled:
                # Inside the leadership's task group: cancelled the moment it is lost.
                tg.start_soon(self.scaling.run, leadership)
            if self.upkeep is not None:
                # Likewise; a failed round is the keeper's to retry, never a reason to step down.
                tg.start_soon(self.upkeep.run)

    async def _reconcile_loop(
        self, leadership: Leadership, members: Observed[frozenset[MemberId]]
    ) -> None:
        """Reconcile after each (debounced) member change and every ``reconcile_interval``;
        return when a publish is fenced (a newer leader exists)."""
        while True:
            # Debounce: a burst of joins (a scale-up) becomes one rebalance.
            while await members.wait_change(within=self._settings.debounce):
                pass
            live = members.value
            try:
                await self.reconcile(leadership, live)
            except FencedError as exc:
                log.warning("publish fenced; stepping down", extra=fields(error=str(exc)))
                return
            except StoreUnavailableError as exc:
                log.warning("reconcile failed; retrying", extra=fields(error=str(exc)))
                await members.wait_change(within=1.0)
                continue
            if members.value != live:
                continue  # changed while reconciling: that change was not waited for
            await members.wait_change(within=self._settings.reconcile_interval)

    def _refresh_weights(self) -> bool:
        """Re-read the weights (``shoal analytics weights`` output); True when they changed.
        A file that cannot be read keeps the weights in force, and says why."""
        if self._weights is None:
            return False
        try:
            weights = dict(self._weights())
        except (OSError, ValueError) as exc:
            log.warning(
                "partition weights not read; keeping the last", extra=fields(error=str(exc))
            )
            return False
        if weights == dict(self._options.partition_weights):
            return False
        self._options = replace(self._options, partition_weights=weights)
        log.info("partition weights changed", extra=fields(partitions=len(weights)))
        return True

    async def reconcile(
        self, leadership: Leadership, live: frozenset[MemberId]
    ) -> Assignment | None:
        """Publish a new generation if the live members and the stored assignment disagree,
        or the measured partition weights changed (they only matter to ``weighted``)."""
        previous = await self._store.current()
        weights_changed = self._refresh_weights()
        if not needs_rebalance(previous, live) and not (weights_changed and live):
            return None
        previous = previous or Assignment.empty(self._partitions)
        started = time.perf_counter()
        result = self._strategy.assign(
            AssignmentRequest(
                partitions=self._partitions,
                members=tuple(Member(m) for m in sorted(live)),
                previous=previous,
                options=self._options,
            )
        )
        compute_seconds = time.perf_counter() - started
        if result.moved == 0 and previous.generation > 0:
            return None
        if leadership.is_lost():  # a process resumed past its deadline: the store may not know
            log.warning("leadership lost before publishing; generation not published")
            return None
        await self._store.publish(result.assignment, leadership.fence)
        record = RebalanceRecord(
            at=time.time(),
            generation=result.assignment.generation,
            members=len(live),
            moved=result.moved,
            revoked={m: p for m, p in result.revoked.items() if p},
            granted={m: p for m, p in result.granted.items() if p},
            compute_seconds=compute_seconds,
        )
        self.rebalances.append(record)
        self._changed()
        self._published.inc()
        self._moved.inc(record.moved)
        log.info(
            "published assignment",
            extra=fields(
                generation=record.generation,
                term=leadership.term,
                members=record.members,
                moved=record.moved,
                strategy=self._strategy.name,
            ),
        )
        return result.assignment
