"""Model-based: hypothesis drives leaders and handlers (the production ``Handler`` and
``LeaderLoop``, on the in-memory adapters and a real Parquet sink) through joins, graceful
leaves, crashes, store outages longer than a lease (every process pauses, as far as its
leases can tell), leader changes, releases that fail, and load; after every step the
invariants hold, and at the end everything published has landed exactly once with every
partition held.

Invariants:
- at most one unfenced owner per partition: handlers whose lease the store still holds
  own disjoint partitions;
- terms strictly increase: every new leadership's term is above every earlier one;
- every partition is owned within a bound once the faults stop;
- nothing acked is lost and nothing lands twice (the table's rows, by message id).

The rules run on one event loop (a blocking portal): a rule is a step, invariants are
checked between steps while the services keep running.
"""

from __future__ import annotations

import tempfile
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from core.ports import HoldStore
from tests.service._world import World, world_of
from tests.service.test_stuck_partitions import FailingReleases

PARTITIONS = 6
PROJECTS = tuple(f"proj-{i}" for i in range(12))
MAX_HANDLERS = 4
SETTLE_BOUND = 30.0  # seconds for ownership to cover every partition once faults stop


class Pipeline(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._exit = ExitStack()
        self.portal: BlockingPortal = self._exit.enter_context(start_blocking_portal())
        data_dir = Path(self._exit.enter_context(tempfile.TemporaryDirectory()))
        cm: AbstractContextManager[World] = self.portal.wrap_async_context_manager(
            world_of(data_dir, partitions=PARTITIONS)
        )
        self.world = self._exit.enter_context(cm)
        self.running: set[str] = set()  # handlers started and neither stopped nor killed
        self.leaders: set[str] = set()
        self.published: set[str] = set()
        self.serial = 0
        self.last_leadership: tuple[str, int] | None = None
        self.portal.call(self.world.start_leader, self._name("leader"))

    def _name(self, kind: str) -> str:
        self.serial += 1
        name = f"{kind}-{self.serial}"
        if kind == "leader":
            self.leaders.add(name)
        return name

    # -- rules -------------------------------------------------------------------------

    @precondition(lambda self: len(self.running) < MAX_HANDLERS)
    @rule(failing_releases=st.integers(0, 2))
    def join(self, failing_releases: int) -> None:
        """A handler joins; some cannot release their first partitions (store errors)."""
        name = self._name("handler")

        def wrap(store: HoldStore) -> HoldStore:
            return FailingReleases(store, failing_releases) if failing_releases else store

        self.portal.call(lambda: self.world.start_handler(name, holds=wrap))
        self.running.add(name)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A graceful stop (it drains and leaves; not awaited: the pipeline runs on)."""
        name = data.draw(st.sampled_from(sorted(self.running)))
        self.portal.call(self.world.stops[name].set)
        self.running.discard(name)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """SIGKILL, as far as one process can: cancelled at once, its lease ended."""
        name = data.draw(st.sampled_from(sorted(self.running)))
        self.portal.call(lambda: self.world.kill(name))
        self.running.discard(name)

    @rule()
    def store_outage_past_the_lease(self) -> None:
        """The store answers nobody for longer than a lease: every lease is lost, as if
        every process had been paused; then it answers again."""
        state = self.world.state

        async def outage() -> None:
            state.set_available(False)
            await anyio.sleep(1.3)  # the fault's length: a lease TTL (1 s) and more
            state.set_available(True)

        self.portal.call(outage)

    @precondition(lambda self: len(self.leaders) < 3)
    @rule()
    def another_leader_candidate(self) -> None:
        self.portal.call(self.world.start_leader, self._name("leader"))

    @rule()
    def leadership_expires(self) -> None:
        """The leader's lease ends (a crashed or paused leader): a candidate takes over."""
        leader = self.world.state.model.leader
        if leader is not None:
            self.portal.call(lambda: self.world.state.expire(leader.leader_id))

    @rule(count=st.integers(1, 60))
    def publish(self, count: int) -> None:
        self.published |= self.portal.call(lambda: self.world.publish(count, PROJECTS))

    @rule()
    def time_passes(self) -> None:
        self.portal.call(anyio.sleep, 0.3)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def unfenced_owners_are_disjoint(self) -> None:
        leased = set(self.world.state.member_leases)
        owners: dict[int, str] = {}
        for name in sorted(self.running & leased):
            handler = self.world.handlers.get(name)
            for partition in handler.owned() if handler is not None else ():
                assert partition not in owners, (
                    f"partition {partition} owned by {owners[partition]} and {name}, "
                    "both holding a lease"
                )
                owners[partition] = name

    @invariant()
    def terms_strictly_increase(self) -> None:
        leader = self.world.state.model.leader
        if leader is None:
            return
        now = (leader.leader_id, leader.term)
        if self.last_leadership is not None and now != self.last_leadership:
            assert leader.term > self.last_leadership[1], (
                f"term {leader.term} of {leader.leader_id} after {self.last_leadership}"
            )
        self.last_leadership = now

    # -- the end -------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self.portal.call(self.world.state.set_available, True)
            if not self.running:
                self.join(0)
            self.publish(20)
            self.portal.call(self._everything_lands_once_and_every_partition_is_owned)
        finally:
            self._exit.close()

    async def _everything_lands_once_and_every_partition_is_owned(self) -> None:
        rows = await self.world.until_landed(self.published, within=SETTLE_BOUND)
        ids = [str(r["message_id"]) for r in rows]
        assert len(ids) == len(set(ids)), "a message landed twice"
        with anyio.fail_after(SETTLE_BOUND):
            while True:
                leased = set(self.world.state.member_leases)
                owned: set[int] = set()
                for name in self.running & leased:
                    owned |= set(self.world.handlers[name].owned())
                if owned == set(range(PARTITIONS)):
                    return
                # Ownership lives in other tasks of the same loop; checked between steps.
                await anyio.sleep(0.1)


TestPipeline = Pipeline.TestCase
TestPipeline.settings = settings(
    max_examples=6,
    stateful_step_count=10,
    deadline=None,
    derandomize=True,  # the same walks on every run: CI stays reproducible
    suppress_health_check=[HealthCheck.too_slow],
)
