"""Contract suites of the coordination ports: Membership, LoadReports, Election,
AssignmentStore, HoldStore, ProjectRegistry, and every store against the core model of
the rules.

Written once, run against every adapter (Watermill's habit). A test module subclasses the
``*Contract`` classes and provides a ``harness`` fixture (a ``CoordinationHarness``): it
opens adapters on one fresh, isolated store and injects faults. ``Features`` tells which
checks apply.

Every wait is bounded by ``anyio.fail_after``; the only sleeps are the time under test
(a lease outliving its TTL), a bounded check that something does NOT happen, and the poll
of ``LoadReports.reports()`` (a port with no watch: its readers poll).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import pytest

from core.coordination import (
    Applied,
    CoordinationState,
    Hold,
    Leader,
    Registration,
    registration,
)
from core.errors import FencedError, LeaseLostError, MemberExistsError, StoreUnavailableError
from core.model import Assignment, MemberStats
from core.ports import (
    AssignmentStore,
    Election,
    HoldStore,
    LeaderInfo,
    Leadership,
    LoadReports,
    Membership,
    MembershipLease,
    ProjectRegistry,
)
from infra.local._testservers import ServerInfo
from tests._unavailable import needs_local, not_applicable, unavailable
from tests.faults._matrix import commit_number

__all__ = [
    "AssignmentStoreContract",
    "CoordinationHarness",
    "CoordinationModelContract",
    "ElectionContract",
    "Features",
    "HoldStoreContract",
    "LoadReportsContract",
    "MembershipContract",
    "ProjectRegistryContract",
    "server_features",
]

T = TypeVar("T")

WAIT = 5.0  # bound on anything that should happen promptly
LONG_TTL = 10.0  # a lease that must not expire during the test
SHORT_TTL = 1.0  # a lease whose expiry is the test
STATS_A = MemberStats(cpu=0.5, project_count=3, last_message_id="m-1", rate=2.5)
STATS_A2 = MemberStats(
    cpu=0.75, project_count=4, last_message_id="m-9", rate=3.0, top_projects=(("pz", 7), ("pa", 2))
)
STATS_B = MemberStats(cpu=0.1)


@dataclass(frozen=True, slots=True)
class Features:
    """What the adapter under test can show.

    ``restartable``: the store is a server the harness restarts mid-test (watches must
    resume); without it the restart checks do not apply.
    ``restart_unavailable``: why this run cannot restart a restartable store (its server is
    no local process): the restart checks then cannot run here, and fail under CI.
    ``expiry_slack``: how long after a lease's client-side deadline the store may still
    keep its keys (etcd rounds TTLs up to 2 s and checks expiry every 500 ms).
    ``restart_ttl``: the leases (and the waits) of the restart checks, which must outlive a
    restart of the store (a local Kafka broker takes about 10 s on 2 cores).
    """

    restartable: bool = False
    restart_unavailable: str | None = None
    expiry_slack: float = 0.0
    restart_ttl: float = LONG_TTL


def server_features(server: ServerInfo, expiry_slack: float) -> Features:
    """The features of a harness on a real ``server``: restartable when it is local."""
    local = server.process is not None
    why = None if local else needs_local(server.kind, server.mode, "restart")
    return Features(restartable=True, restart_unavailable=why, expiry_slack=expiry_slack)


def restart_checks_run(features: Features) -> None:
    __tracebackhide__ = True  # a skip names the restart check's line
    if not features.restartable:
        not_applicable("the harness cannot restart this store")
    if features.restart_unavailable is not None:
        unavailable(features.restart_unavailable)


class CoordinationHarness(Protocol):
    """Adapters over one fresh store, and the faults a test may inject into them."""

    @property
    def features(self) -> Features: ...

    def membership(self) -> AbstractAsyncContextManager[Membership]: ...

    def reports(self) -> AbstractAsyncContextManager[LoadReports]: ...

    def election(self) -> AbstractAsyncContextManager[Election]: ...

    def store(self) -> AbstractAsyncContextManager[AssignmentStore]: ...

    def hold_store(self) -> AbstractAsyncContextManager[HoldStore]: ...

    def registry(self) -> AbstractAsyncContextManager[ProjectRegistry]: ...

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        """End ``lease`` on the store's side, as if its TTL had run out."""
        ...

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        """Stop renewing ``lease``, as a paused (SIGSTOP) process would."""
        ...

    async def restart_store(self) -> None:
        """Restart the store on the same address and data (only if ``restartable``)."""
        ...

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        """The object and the name of the method through which ``store.publish`` makes its
        write (the one that must hold only while the fence does), after every read it
        makes before: where a paused leader would stop."""
        ...


@dataclass
class Gate:
    """Holds the first call through a ``gated`` method: ``reached`` once it arrived,
    and it goes on when ``opened`` is set."""

    reached: anyio.Event = field(default_factory=anyio.Event)
    opened: anyio.Event = field(default_factory=anyio.Event)


@contextmanager
def gated(owner: object, name: str) -> Iterator[Gate]:
    """Make the next call of ``owner.name`` (an async method) wait at a ``Gate``."""
    original: Callable[..., Awaitable[Any]] = getattr(owner, name)
    gate = Gate()

    async def held(*args: Any, **kwargs: Any) -> Any:
        if not gate.reached.is_set():
            gate.reached.set()
            await gate.opened.wait()
        return await original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, held)
        yield gate


@asynccontextmanager
async def watching(source: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close a port's watch iterator (an async generator) when the block ends."""
    try:
        yield source
    finally:
        aclose: Callable[[], Awaitable[None]] | None = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


async def next_within(updates: AsyncIterator[T], seconds: float = WAIT) -> T:
    with anyio.fail_after(seconds):
        return await anext(updates)


async def until(updates: AsyncIterator[T], wanted: Callable[[T], bool], seconds: float) -> T:
    """The first update that satisfies ``wanted``, within ``seconds``."""
    with anyio.fail_after(seconds):
        async for update in updates:
            if wanted(update):
                return update
    raise AssertionError("the watch ended")


async def retry_while_unavailable(call: Callable[[], Awaitable[T]], seconds: float = 30) -> T:
    """Run ``call`` until the store answers (it may still be starting after a restart)."""
    with anyio.fail_after(seconds):
        while True:
            try:
                return await call()
            except StoreUnavailableError:
                await anyio.sleep(0.1)


def owners(generation: int, *per_partition: str) -> Assignment:
    return Assignment(generation, tuple((o,) if o else () for o in per_partition))


# --- Membership ------------------------------------------------------------------------


@pytest.mark.anyio
class MembershipContract:
    async def test_watch_sees_join_and_leave_when_members_change(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.membership() as observer,
            harness.membership() as one,
            harness.membership() as two,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await one.join("a", LONG_TTL)
            assert await next_within(updates) == {"a"}
            b = await two.join("b", LONG_TTL)
            assert await next_within(updates) == {"a", "b"}
            await a.leave()
            # at once: far sooner than the 10 s TTL
            assert await next_within(updates, 2.0) == {"b"}
            await b.leave()
            assert await next_within(updates, 2.0) == set()

    async def test_watch_is_not_woken_by_load_reports(self, harness: CoordinationHarness) -> None:
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            harness.reports() as reports,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await membership.join("a", LONG_TTL)
            assert await next_within(updates) == {"a"}
            await reports.report(a, STATS_A)
            await reports.report(a, STATS_A2)
            await membership.join("b", LONG_TTL)
            # the next change seen is the join: neither report made one
            assert await next_within(updates) == {"a", "b"}

    async def test_members_lists_live_members_when_joined(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership:
            assert await membership.members() == set()
            a = await membership.join("a", LONG_TTL)
            await membership.join("b", LONG_TTL)
            assert await membership.members() == {"a", "b"}
            await a.leave()
            assert await membership.members() == {"b"}

    async def test_join_raises_member_exists_when_id_is_live(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.membership() as first,
            harness.membership() as second,
            harness.reports() as reports,
        ):
            a = await first.join("a", LONG_TTL)
            with pytest.raises(MemberExistsError):
                await second.join("a", LONG_TTL)
            assert await second.members() == {"a"}
            assert not a.is_lost()
            await reports.report(a, STATS_A2)  # the first member is untouched
            assert await reports.reports() == {"a": STATS_A2}

    async def test_join_succeeds_when_the_previous_member_left(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership, harness.reports() as reports:
            old = await membership.join("a", LONG_TTL)
            await old.leave()
            new = await membership.join("a", LONG_TTL)
            assert await membership.members() == {"a"}
            await reports.report(new, STATS_B)
            with pytest.raises(LeaseLostError):
                await reports.report(old, STATS_A2)  # the old lease does not report over the new
            assert await reports.reports() == {"a": STATS_B}
            assert not new.is_lost()

    async def test_leave_is_idempotent_when_called_twice(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership, harness.reports() as reports:
            a = await membership.join("a", LONG_TTL)
            await a.leave()
            await a.leave()
            assert a.is_lost()
            with anyio.fail_after(WAIT):
                await a.wait_lost()
            with pytest.raises(LeaseLostError):
                await reports.report(a, STATS_A2)
            assert await membership.members() == set()

    async def test_lease_stays_alive_when_renewed_past_its_ttl(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership:
            a = await membership.join("a", SHORT_TTL)
            await anyio.sleep(SHORT_TTL * 2.5)  # the passing time is what is under test
            assert not a.is_lost()
            assert await membership.members() == {"a"}

    async def test_member_disappears_and_lease_is_lost_when_lease_expires(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            harness.reports() as reports,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await membership.join("a", LONG_TTL)
            await membership.join("b", LONG_TTL)
            await until(updates, lambda m: m == {"a", "b"}, WAIT)
            await harness.expire(a)
            assert await next_within(updates) == {"b"}
            with anyio.fail_after(WAIT):
                await a.wait_lost()
            assert a.is_lost()
            with pytest.raises(LeaseLostError):
                await reports.report(a, STATS_A2)

    async def test_lease_is_lost_at_its_deadline_when_renewal_stops(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            harness.reports() as reports,
            watching(observer.watch()) as updates,
        ):
            a = await membership.join("a", SHORT_TTL)
            await until(updates, lambda m: "a" in m, WAIT)
            harness.pause_renewal(a)
            with anyio.fail_after(SHORT_TTL + 0.5):  # its deadline, by the local clock
                await a.wait_lost()
            assert a.is_lost()
            with pytest.raises(LeaseLostError):
                await reports.report(a, STATS_A2)
            # and the store drops the member once the lease expired there too
            slack = harness.features.expiry_slack
            await until(updates, lambda m: "a" not in m, SHORT_TTL + slack + WAIT)

    async def test_is_lost_at_once_when_the_process_was_paused_past_the_deadline(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership:
            a = await membership.join("a", SHORT_TTL)
            assert not a.is_lost()
            # Block the event loop (a paused process): no renewal, no I/O can run.
            started = time.monotonic()
            time.sleep(SHORT_TTL * 1.2)  # noqa: ASYNC251 - the blocking pause is the test
            assert time.monotonic() - started >= SHORT_TTL
            assert a.is_lost()  # from the clock alone, before any await

    async def test_is_lost_with_a_margin_when_less_than_the_margin_is_left(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership:
            a = await membership.join("a", SHORT_TTL)
            assert not a.is_lost(0.0)
            assert not a.is_lost(SHORT_TTL / 20)
            # no lease can have a whole TTL (and more) left: it was granted before now
            assert a.is_lost(SHORT_TTL * 1.01)
            assert not a.is_lost()  # asking changed nothing

    async def test_watch_resumes_when_store_restarts(self, harness: CoordinationHarness) -> None:
        restart_checks_run(harness.features)
        ttl = harness.features.restart_ttl
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            await membership.join("a", ttl)
            assert await next_within(updates) == {"a"}
            await harness.restart_store()
            await retry_while_unavailable(lambda: membership.join("b", ttl), max(30, ttl))
            await until(updates, lambda m: m == {"a", "b"}, max(30, ttl))


# --- LoadReports -----------------------------------------------------------------------


@pytest.mark.anyio
class LoadReportsContract:
    async def test_reports_hold_each_members_latest_report(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.membership() as membership,
            harness.reports() as writer,
            harness.reports() as reader,
        ):
            assert await reader.reports() == {}
            a = await membership.join("a", LONG_TTL)
            b = await membership.join("b", LONG_TTL)
            assert await reader.reports() == {}  # joined, not reported yet
            await writer.report(a, STATS_A)
            await writer.report(b, STATS_B)
            await writer.report(a, STATS_A2)
            await until_reported(reader, {"a": STATS_A2, "b": STATS_B})

    async def test_report_goes_when_the_member_leaves(self, harness: CoordinationHarness) -> None:
        async with harness.membership() as membership, harness.reports() as reports:
            a = await membership.join("a", LONG_TTL)
            b = await membership.join("b", LONG_TTL)
            await reports.report(a, STATS_A)
            await reports.report(b, STATS_B)
            await a.leave()
            await until_reported(reports, {"b": STATS_B})

    async def test_report_goes_when_the_member_expires(self, harness: CoordinationHarness) -> None:
        async with harness.membership() as membership, harness.reports() as reports:
            a = await membership.join("a", SHORT_TTL)
            b = await membership.join("b", LONG_TTL)
            await reports.report(a, STATS_A)
            await reports.report(b, STATS_B)
            harness.pause_renewal(a)
            slack = harness.features.expiry_slack
            await until_reported(reports, {"b": STATS_B}, SHORT_TTL + slack + WAIT)

    async def test_a_rejoined_member_does_not_show_its_old_report(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.membership() as membership, harness.reports() as reports:
            old = await membership.join("a", SHORT_TTL)
            await reports.report(old, STATS_A)
            harness.pause_renewal(old)
            slack = harness.features.expiry_slack
            with anyio.fail_after(SHORT_TTL + slack + WAIT):
                while True:  # the store drops the member at its own pace
                    try:
                        new = await membership.join("a", LONG_TTL)
                        break
                    except MemberExistsError:
                        await anyio.sleep(0.1)
            await until_reported(reports, {}, WAIT)
            await reports.report(new, STATS_B)
            assert await reports.reports() == {"a": STATS_B}


async def until_reported(
    reports: LoadReports, wanted: Mapping[str, MemberStats], seconds: float = WAIT
) -> None:
    """Poll ``reports()`` until it is ``wanted`` (reports have no watch: readers poll)."""
    with anyio.fail_after(seconds):
        while True:
            if await reports.reports() == wanted:
                return
            await anyio.sleep(0.05)


# --- Election --------------------------------------------------------------------------


@pytest.mark.anyio
class ElectionContract:
    async def test_leader_is_none_when_nobody_campaigned(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election:
            assert await election.leader() is None

    async def test_exactly_one_wins_when_two_candidates_campaign(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as one, harness.election() as two:
            send, receive = anyio.create_memory_object_stream[Leadership](2)

            async def run(election: Election, candidate: str) -> None:
                await send.send(await election.campaign(candidate, LONG_TTL))

            async with send, receive, anyio.create_task_group() as tasks:
                tasks.start_soon(run, one, "a")
                tasks.start_soon(run, two, "b")
                first = await next_within(receive)
                with anyio.move_on_after(0.5):  # the other one must not win meanwhile
                    second = await receive.receive()
                    pytest.fail(f"two leaders at once: {first.leader_id} and {second.leader_id}")
                assert not first.is_lost()
                assert await one.leader() == LeaderInfo(first.leader_id, first.term)
                await first.resign()
                second = await next_within(receive)
                assert {first.leader_id, second.leader_id} == {"a", "b"}
                assert second.term > first.term
                assert await two.leader() == LeaderInfo(second.leader_id, second.term)
                await second.resign()

    async def test_leadership_is_lost_and_leader_cleared_when_resigned(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election:
            leadership = await election.campaign("a", LONG_TTL)
            await leadership.resign()
            await leadership.resign()  # idempotent
            assert leadership.is_lost()
            with anyio.fail_after(WAIT):
                await leadership.wait_lost()
            assert await election.leader() is None

    async def test_other_candidate_wins_when_leader_lease_expires(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as one, harness.election() as two:
            first = await one.campaign("a", LONG_TTL)
            async with anyio.create_task_group() as tasks:
                send, receive = anyio.create_memory_object_stream[Leadership](1)

                async def run() -> None:
                    async with send:
                        await send.send(await two.campaign("b", LONG_TTL))

                tasks.start_soon(run)
                await harness.expire(first)
                with anyio.fail_after(WAIT):
                    await first.wait_lost()
                assert first.is_lost()
                async with receive:
                    second = await next_within(receive, WAIT + harness.features.expiry_slack)
            assert second.leader_id == "b"
            assert second.term > first.term
            await second.resign()

    async def test_leadership_is_lost_at_its_deadline_when_renewal_stops(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as one, harness.election() as two:
            first = await one.campaign("a", SHORT_TTL)
            harness.pause_renewal(first)
            with anyio.fail_after(SHORT_TTL + 0.5):
                await first.wait_lost()
            assert first.is_lost()
            with anyio.fail_after(SHORT_TTL + harness.features.expiry_slack + WAIT):
                second = await two.campaign("b", LONG_TTL)
            assert second.term > first.term
            await second.resign()

    async def test_terms_strictly_increase_when_leaders_follow_each_other(
        self, harness: CoordinationHarness
    ) -> None:
        terms: list[int] = []
        async with harness.election() as election:
            for candidate in ("a", "b", "a", "c"):
                with anyio.fail_after(WAIT):
                    leadership = await election.campaign(candidate, LONG_TTL)
                terms.append(leadership.term)
                await leadership.resign()
        assert terms == sorted(set(terms)), terms

    async def test_cancelled_candidate_never_wins_when_campaign_is_cancelled(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.election() as one,
            harness.election() as two,
            harness.election() as three,
        ):
            first = await one.campaign("a", LONG_TTL)
            with anyio.move_on_after(0.3) as scope:
                await two.campaign("b", LONG_TTL)
            assert scope.cancelled_caught
            async with anyio.create_task_group() as tasks:
                send, receive = anyio.create_memory_object_stream[Leadership](1)

                async def run() -> None:
                    async with send:
                        await send.send(await three.campaign("c", LONG_TTL))

                tasks.start_soon(run)
                await first.resign()
                async with receive:
                    third = await next_within(receive)
            assert third.leader_id == "c"
            assert await one.leader() == LeaderInfo("c", third.term)
            await third.resign()


# --- AssignmentStore -------------------------------------------------------------------


@pytest.mark.anyio
class AssignmentStoreContract:
    async def test_a_leader_deposed_between_its_reads_and_its_write_stores_nothing(
        self, harness: CoordinationHarness
    ) -> None:
        """The pause the fence exists for, aimed at its gap: a leader's publish has read
        what it checks (the leader key, the stored generation) and waits at its write while
        its lease ends and another candidate takes office. The write is refused and stores
        nothing; the new leader's publish goes on."""
        async with (
            harness.election() as old_side,
            harness.election() as new_side,
            harness.store() as stale,
            harness.store() as store,
        ):
            old = await old_side.campaign("old", LONG_TTL)
            await stale.publish(owners(1, "old"), old.fence)
            refusals: list[FencedError] = []

            async def publish_stale() -> None:
                try:
                    await stale.publish(owners(2, "old"), old.fence)
                except FencedError as exc:
                    refusals.append(exc)

            owner, name = harness.write_call(stale)
            with gated(owner, name) as gate:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(publish_stale)
                    with anyio.fail_after(WAIT):
                        await gate.reached.wait()
                    harness.pause_renewal(old)
                    await harness.expire(old)
                    with anyio.fail_after(4 * WAIT):
                        new = await new_side.campaign("new", LONG_TTL)
                    gate.opened.set()
            assert len(refusals) == 1, "the deposed leader's write was stored"
            assert await store.current() == owners(1, "old")
            await store.publish(owners(2, "new"), new.fence)
            assert await store.current() == owners(2, "new")

    async def test_current_is_none_when_nothing_was_published(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.store() as store:
            assert await store.current() is None

    async def test_publish_stores_assignment_when_term_is_current(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(owners(1, "a", "b", ""), leader.fence)
            assert await store.current() == owners(1, "a", "b", "")
            await store.publish(owners(2, "b", "a", "a"), leader.fence)
            assert await store.current() == owners(2, "b", "a", "a")

    async def test_publish_keeps_fan_out_owners_when_several_own_a_partition(
        self, harness: CoordinationHarness
    ) -> None:
        assignment = Assignment(1, (("a", "b"), (), ("c",)))
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(assignment, leader.fence)
            assert await store.current() == assignment

    async def test_publish_is_fenced_and_stores_nothing_when_term_is_stale(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            old = await election.campaign("old", LONG_TTL)
            await store.publish(owners(1, "a"), old.fence)
            await old.resign()
            with pytest.raises(FencedError):
                await store.publish(owners(2, "b"), old.fence)  # nobody leads
            new = await election.campaign("new", LONG_TTL)
            with pytest.raises(FencedError):
                await store.publish(owners(2, "b"), old.fence)  # someone else leads
            assert await store.current() == owners(1, "a")
            await store.publish(owners(2, "c"), new.fence)
            assert await store.current() == owners(2, "c")

    async def test_publish_is_fenced_when_generation_is_not_higher(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(owners(5, "a"), leader.fence)
            with pytest.raises(FencedError):
                await store.publish(owners(5, "b"), leader.fence)
            with pytest.raises(FencedError):
                await store.publish(owners(4, "b"), leader.fence)
            assert await store.current() == owners(5, "a")

    async def test_one_publish_wins_when_two_race_for_one_generation(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.election() as election,
            harness.store() as one,
            harness.store() as two,
        ):
            leader = await election.campaign("leader", LONG_TTL)
            await one.publish(owners(1, "x"), leader.fence)
            outcomes: dict[str, str] = {}

            async def publish(store: AssignmentStore, owner: str) -> None:
                try:
                    await store.publish(owners(2, owner), leader.fence)
                    outcomes[owner] = "stored"
                except FencedError:
                    outcomes[owner] = "fenced"

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(publish, one, "a")
                    tasks.start_soon(publish, two, "b")
            assert sorted(outcomes.values()) == ["fenced", "stored"], outcomes
            winner = next(o for o, result in outcomes.items() if result == "stored")
            assert await one.current() == owners(2, winner)

    async def test_watch_yields_increasing_generations_once_when_published(
        self, harness: CoordinationHarness
    ) -> None:
        async with (
            harness.election() as election,
            harness.store() as store,
            watching(store.watch()) as updates,
        ):
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(owners(1, "a"), leader.fence)
            seen = [await next_within(updates)]
            assert seen == [owners(1, "a")]
            for generation in range(2, 7):
                owner = "a" if generation % 2 else "b"
                await store.publish(owners(generation, owner), leader.fence)
            with pytest.raises(FencedError):
                await store.publish(owners(3, "z"), leader.fence)
            with anyio.fail_after(WAIT):
                async for assignment in updates:
                    seen.append(assignment)
                    if assignment.generation == 6:
                        break
            generations = [a.generation for a in seen]
            assert generations == sorted(set(generations)), generations
            assert all(a.owners != (("z",),) for a in seen)
            # and nothing more: a later publish is the next thing the watch yields
            await store.publish(owners(9, "c"), leader.fence)
            assert await next_within(updates) == owners(9, "c")

    async def test_watch_starts_with_the_current_assignment_when_one_is_stored(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.election() as election, harness.store() as store:
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(owners(3, "a"), leader.fence)
            await store.publish(owners(4, "b"), leader.fence)
            async with watching(store.watch()) as updates:
                assert await next_within(updates) == owners(4, "b")

    async def test_watch_resumes_when_store_restarts(self, harness: CoordinationHarness) -> None:
        restart_checks_run(harness.features)
        ttl = harness.features.restart_ttl
        async with (
            harness.election() as election,
            harness.store() as store,
            watching(store.watch()) as updates,
        ):
            leader = await election.campaign("leader", ttl)
            await store.publish(owners(1, "a"), leader.fence)
            assert await next_within(updates) == owners(1, "a")  # read
            await store.publish(owners(2, "b"), leader.fence)
            assert await next_within(updates) == owners(2, "b")  # watched: the stream is open
            await harness.restart_store()
            await retry_while_unavailable(
                lambda: store.publish(owners(3, "c"), leader.fence), max(30, ttl)
            )
            assert await next_within(updates, max(30, ttl)) == owners(3, "c")
            assert not leader.is_lost()


@pytest.mark.anyio
class HoldStoreContract:
    async def test_second_claim_fails_when_partition_is_held(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store:
            assert await store.holds() == {}
            assert await store.claim(0, "a", 1, None)
            assert not await store.claim(0, "b", 1, None)
            assert not await store.claim(0, "a", 2, None)
            holds = await store.holds()
            assert set(holds) == {0}
            assert (holds[0].partition, holds[0].member_id, holds[0].generation) == (0, "a", 1)
            assert await store.claim(1, "b", 1, None)
            assert {p: h.member_id for p, h in (await store.holds()).items()} == {0: "a", 1: "b"}

    async def test_claim_replacing_succeeds_once_when_hold_is_unchanged(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store:
            assert await store.claim(3, "dead", 1, None)
            observed = (await store.holds())[3]
            assert await store.claim(3, "b", 2, observed)
            assert not await store.claim(3, "c", 2, observed)  # b's hold is not `observed`
            now = (await store.holds())[3]
            assert (now.member_id, now.generation) == ("b", 2)
            assert now.version != observed.version

    async def test_claim_replacing_fails_when_observed_hold_was_released(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store:
            assert await store.claim(2, "a", 1, None)
            observed = (await store.holds())[2]
            await store.release(2, "a")
            assert not await store.claim(2, "b", 2, observed)
            assert await store.holds() == {}
            assert await store.claim(2, "b", 2, None)

    async def test_claim_replacing_fails_when_observed_hold_was_replaced(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store:
            assert await store.claim(2, "a", 1, None)
            observed = (await store.holds())[2]
            await store.release(2, "a")
            assert await store.claim(2, "a", 1, None)  # same member and generation again
            assert not await store.claim(2, "b", 2, observed)
            assert (await store.holds())[2].member_id == "a"

    async def test_release_is_a_no_op_when_member_does_not_hold(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store:
            await store.release(0, "a")  # nothing held
            assert await store.claim(0, "a", 1, None)
            await store.release(0, "b")  # held by someone else
            assert (await store.holds())[0].member_id == "a"
            await store.release(0, "a")
            assert await store.holds() == {}
            await store.release(0, "a")  # again

    async def test_watch_holds_yields_the_map_when_holds_change(
        self, harness: CoordinationHarness
    ) -> None:
        async with harness.hold_store() as store, watching(store.watch_holds()) as updates:

            def members(holds: Mapping[int, Hold]) -> dict[int, str]:
                return {p: h.member_id for p, h in holds.items()}

            assert await next_within(updates) == {}
            assert await store.claim(0, "a", 1, None)
            assert members(await next_within(updates)) == {0: "a"}
            assert await store.claim(7, "b", 1, None)
            assert members(await next_within(updates)) == {0: "a", 7: "b"}
            observed = (await store.holds())[0]
            assert await store.claim(0, "c", 2, observed)
            assert members(await next_within(updates)) == {0: "c", 7: "b"}
            await store.release(7, "b")
            assert members(await next_within(updates)) == {0: "c"}


REGISTRATION_TTL = 3600.0  # a registration that must not expire during the test
CAP = 1000


@pytest.mark.anyio
class ProjectRegistryContract:
    async def test_a_project_is_added_once_then_refreshed(
        self, harness: CoordinationHarness
    ) -> None:
        now, ttl = time.time(), REGISTRATION_TTL
        async with harness.registry() as registry:
            assert await registry.projects(1, now=now) == frozenset()
            done = await registry.register(1, ["p-1"], now=now, ttl=ttl, cap=CAP)
            assert done == Registration(added=frozenset({"p-1"}))
            done = await registry.register(1, ["p-1", "p-2", "p-2"], now=now, ttl=ttl, cap=CAP)
            assert done == Registration(added=frozenset({"p-2"}))
            assert await registry.register(1, [], now=now, ttl=ttl, cap=CAP) == Registration()
            done = await registry.register(10, ["p-1"], now=now, ttl=ttl, cap=CAP)
            assert done.added == {"p-1"}  # another partition
            assert await registry.projects(1, now=now) == {"p-1", "p-2"}
            assert await registry.projects(10, now=now) == {"p-1"}
            assert await registry.projects(0, now=now) == frozenset()

    async def test_a_registration_expires_unless_refreshed(
        self, harness: CoordinationHarness
    ) -> None:
        """With a tiny TTL, in real time (etcd's leases and Redis's key expiry run on the
        server's clock): the project refreshed a third of the way stays, the other expires
        and is added anew when it registers again. The refresh is timed from the first
        registration's ``now``, so a slow first call leaves it two thirds of the TTL."""
        ttl, start = 3.0, time.time()
        async with harness.registry() as registry:
            await registry.register(3, ["idle", "active"], now=start, ttl=ttl, cap=CAP)
            await anyio.sleep(max(0.0, start + ttl / 3 - time.time()))
            done = await registry.register(3, ["active"], now=time.time(), ttl=ttl, cap=CAP)
            assert done == Registration()  # refreshed
            await anyio.sleep(max(0.0, start + ttl + 0.1 - time.time()))
            assert await registry.projects(3, now=time.time()) == {"active"}
            done = await registry.register(3, ["idle"], now=time.time(), ttl=ttl, cap=CAP)
            assert done.added == {"idle"}

    async def test_past_the_cap_new_projects_are_refused_and_live_ones_refreshed(
        self, harness: CoordinationHarness
    ) -> None:
        now, ttl = time.time(), REGISTRATION_TTL
        async with harness.registry() as registry:
            done = await registry.register(5, ["a", "b", "c"], now=now, ttl=ttl, cap=3)
            assert done.added == {"a", "b", "c"}
            done = await registry.register(5, ["d", "a", "e"], now=now + 1, ttl=ttl, cap=3)
            assert done == Registration(refused=frozenset({"d", "e"}))
            assert await registry.projects(5, now=now + 1) == {"a", "b", "c"}
            done = await registry.register(6, ["d"], now=now, ttl=ttl, cap=3)
            assert done.added == {"d"}  # the cap is per partition
            # once b and c expire (a was refreshed one second later), their room is free
            later = now + ttl + 0.5
            done = await registry.register(5, ["d", "e", "f"], now=later, ttl=ttl, cap=3)
            assert done == Registration(added=frozenset({"d", "e"}), refused=frozenset({"f"}))
            assert await registry.projects(5, now=later) == {"a", "d", "e"}

    async def test_a_flood_of_new_project_ids_stops_at_the_cap_and_claims_still_work(
        self, harness: CoordinationHarness
    ) -> None:
        """5,000 random project ids on one partition with a cap of 300: 300 are
        registered, the rest refused; the store still takes holds and assignments."""
        now = time.time()
        async with (
            harness.registry() as registry,
            harness.election() as election,
            harness.store() as store,
            harness.hold_store() as hold_store,
        ):
            done = await flood(registry, 2, 5_000, cap=300, now=now)
            assert (len(done.added), len(done.refused)) == (300, 4_700)
            assert await registry.projects(2, now=now) == done.added
            leader = await election.campaign("leader", LONG_TTL)
            await store.publish(owners(1, "a", "a", "a"), leader.fence)
            assert await hold_store.claim(2, "a", 1, None)


async def flood(
    registry: ProjectRegistry, partition: int, count: int, cap: int, now: float
) -> Registration:
    """Register ``count`` random new project ids on ``partition`` in the handler's batches
    of 500; every registration made, in one ``Registration``."""
    added: set[str] = set()
    refused: set[str] = set()
    ids = [f"flood-{uuid.uuid4().hex[:20]}" for _ in range(count)]
    for start in range(0, count, 500):
        done = await registry.register(
            partition, ids[start : start + 500], now=now, ttl=REGISTRATION_TTL, cap=cap
        )
        added |= done.added
        refused |= done.refused
    return Registration(added=frozenset(added), refused=frozenset(refused))


def _maybe_forged(fence: Leader, rng: random.Random) -> Leader:
    """The leadership's own fence, or one a stale or confused leader could carry: another
    term, another id with this term, or (where the store has incarnations) another
    incarnation with this term."""
    forgeries = [
        replace(fence, term=fence.term - 1),
        replace(fence, term=fence.term + 1),
        replace(fence, leader_id="someone-else"),
    ]
    if fence.incarnation:
        forgeries.append(replace(fence, incarnation=f"not-{fence.incarnation}"))
    return rng.choice([fence, fence, *forgeries])


MODEL_WALKS = 10


def _model_seeds() -> list[int]:
    """Ten walks a run, their seeds moving with the commit (``git rev-list --count HEAD``):
    consecutive commits walk other seeds, which find what fixed ones never would (seed 1941
    found NATS KV listings leaving a consumer each behind). ``SHOAL_MODEL_SEEDS="3,17"``
    walks the seeds named (a walk's test id is its seed)."""
    if named := os.environ.get("SHOAL_MODEL_SEEDS"):
        return [int(seed) for seed in named.split(",")]
    start = commit_number(Path(__file__).resolve().parents[2]) * MODEL_WALKS
    return list(range(start, start + MODEL_WALKS))


MODEL_SEEDS = _model_seeds()
MODEL_STEPS = 200
MODEL_CHECK_EVERY = 25  # steps between comparisons of the whole state
# An operation's weight in the walk: leadership changes cost a store the most time (a
# Kafka campaign waits for a rebalance), and publishes need a leader most of the time.
_OPERATIONS = {
    "join": 3,
    "leave": 2,
    "expire": 2,
    "lead": 2,
    "vacate": 1,
    "publish": 4,
    "claim": 5,
    "release": 3,
    "project": 3,
}


async def reads_as(read: Callable[[], Awaitable[T]], wanted: T, what: str) -> None:
    """Poll ``read`` until it gives ``wanted`` (a store may show a lease's end a moment
    after the call that ended it, and Kafka finds a new group's coordinator a moment after
    its first request); an ``AssertionError`` naming ``what`` past the bound."""
    got: T | None = None
    with anyio.move_on_after(2 * WAIT):
        while True:
            with contextlib.suppress(StoreUnavailableError):
                got = await read()
                if got == wanted:
                    return
            await anyio.sleep(0.02)
    raise AssertionError(f"{what}: the store shows {got!r}, the model {wanted!r}")


class ModelWalk:
    """One random walk of writes on a store and on ``core.coordination``'s model, step by
    step: each write's outcome (accepted or refused) must be the model's, and what the
    store shows after it the model's state."""

    def __init__(
        self,
        harness: CoordinationHarness,
        rng: random.Random,
        membership: Membership,
        election: Election,
        store: AssignmentStore,
        hold_store: HoldStore,
        registry: ProjectRegistry,
    ) -> None:
        self.harness, self.rng = harness, rng
        self.membership, self.election, self.store = membership, election, store
        self.hold_store, self.registry = hold_store, registry
        self.model = CoordinationState()
        self.leases: dict[str, MembershipLease] = {}
        self.leadership: Leadership | None = None
        self.last_fence = Leader("nobody", 0)  # the fence of the latest leadership, kept
        self.seen: list[Hold] = []  # holds observed once: replacing one may be stale now
        self.start = time.time()
        self.history: list[str] = []  # each step's operation and the store's outcome

    async def step(self, step: int) -> None:
        ops, weights = zip(*_OPERATIONS.items(), strict=True)
        op = self.rng.choices(ops, weights)[0]
        applied, stored = await getattr(self, op)(step)
        self.history.append(f"{op}:{'accepted' if stored else 'refused'}")
        where = f"step {step} {op} (after {', '.join(self.history[-6:-1])})"
        assert stored == applied.accepted, f"{where}: store {stored}, model: {applied.reason}"
        self.model = applied.state
        await self.compare(op, where, step)
        if step % MODEL_CHECK_EVERY == 0:
            await self.compare_all(where, step)

    # -- the writes: each returns the model's outcome and whether the store accepted --------

    async def join(self, step: int) -> tuple[Applied, bool]:
        member = self.rng.choice("abcd")
        applied = self.model.join(member)
        try:
            self.leases[member] = await self.membership.join(member, LONG_TTL)
        except MemberExistsError:
            return applied, False
        return applied, True

    async def leave(self, step: int) -> tuple[Applied, bool]:
        member = self.rng.choice("abcd")
        lease = self.leases.pop(member, None)
        if lease is not None:
            await lease.leave()
        return self.model.leave(member), lease is not None

    async def expire(self, step: int) -> tuple[Applied, bool]:
        """End a member's lease or the leadership on the store's side, as its TTL running
        out would (the model's ``leave`` and ``vacate``)."""
        choices: list[MembershipLease | Leadership] = list(self.leases.values())
        if self.leadership is not None:
            choices.append(self.leadership)
        if not choices:
            return self.model.leave("a"), False  # nothing live: refused by both
        lease = self.rng.choice(choices)
        self.harness.pause_renewal(lease)
        await self.harness.expire(lease)
        if self.leadership is not None and lease is self.leadership:
            self.leadership = None
            return self.model.vacate(self.last_fence.term), True
        member = next(m for m, held in self.leases.items() if held is lease)
        del self.leases[member]
        return self.model.leave(member), True

    async def lead(self, step: int) -> tuple[Applied, bool]:
        """A candidate campaigns when nobody leads (a campaign waits while someone does):
        its term must be above every term before (the model refuses it otherwise)."""
        if self.leadership is not None:
            return self.model.lead(self.leadership.fence), True  # restating it: no change
        with anyio.fail_after(4 * WAIT):
            self.leadership = await self.election.campaign(self.rng.choice("xyz"), LONG_TTL)
        self.last_fence = self.leadership.fence
        return self.model.lead(self.leadership.fence), True

    async def vacate(self, step: int) -> tuple[Applied, bool]:
        if self.leadership is None:
            return self.model.vacate(self.last_fence.term), False
        leadership, self.leadership = self.leadership, None
        await leadership.resign()
        return self.model.vacate(leadership.term), True

    async def publish(self, step: int) -> tuple[Applied, bool]:
        fence = _maybe_forged(self.last_fence, self.rng)
        member = self.rng.choice("abc")
        assignment = owners(self.rng.randint(1, MODEL_STEPS), member, "", member)
        applied = self.model.publish(assignment, fence)
        try:
            await self.store.publish(assignment, fence)
        except FencedError:
            return applied, False
        return applied, True

    async def claim(self, step: int) -> tuple[Applied, bool]:
        partition, member = self.rng.randrange(3), self.rng.choice("abc")
        holds = await self.hold_store.holds()
        replacing = self.rng.choice([None, holds.get(partition), *self.seen[-3:]])
        if replacing is not None and replacing.partition != partition:
            replacing = None
        stored = await self.hold_store.claim(partition, member, step, replacing)
        after = (await self.hold_store.holds()).get(partition)
        applied = self.model.claim(
            partition,
            member,
            step,
            replacing=None if replacing is None else replacing.version,
            version=after.version if stored and after is not None else -1,
        )
        if after is not None:
            self.seen.append(after)
        return applied, stored

    async def release(self, step: int) -> tuple[Applied, bool]:
        partition, member = self.rng.randrange(3), self.rng.choice("abc")
        applied = self.model.release(partition, member)
        await self.hold_store.release(partition, member)
        return applied, applied.accepted  # release answers nothing: the holds compare it

    async def project(self, step: int) -> tuple[Applied, bool]:
        partition = self.rng.randrange(3)
        ids = self.rng.sample(("p-1", "p-2", "p-3"), self.rng.randint(1, 2))
        now = self.now(step)  # a registration lives 2 or 3 steps
        applied = self.model.register_projects(partition, ids, now=now, ttl=250.0, cap=2)
        done = await self.registry.register(partition, ids, now=now, ttl=250.0, cap=2)
        expected = registration(self.model, applied.state, partition, ids, now)
        assert done == expected, f"step {step} project: {applied.reason}"
        return applied, applied.accepted

    # -- what the store shows --------------------------------------------------------------

    def now(self, step: int) -> float:
        return self.start + 100.0 * step

    async def leader(self) -> LeaderInfo | None:
        return await self.election.leader()

    def model_leader(self) -> LeaderInfo | None:
        leader = self.model.leader
        return None if leader is None else LeaderInfo(leader.leader_id, leader.term)

    async def compare(self, op: str, where: str, step: int) -> None:
        """The part of the state ``op`` may have changed."""
        if op in ("join", "leave", "expire"):
            await reads_as(self.membership.members, self.model.members, f"{where}: members")
        if op in ("lead", "vacate", "expire"):
            await reads_as(self.leader, self.model_leader(), f"{where}: leader")
        if op in ("claim", "release"):
            assert await self.hold_store.holds() == self.model.holds, f"{where}: holds"
        if op == "publish":
            assert await self.store.current() == self.model.assignment, f"{where}: assignment"

    async def compare_all(self, where: str, step: int) -> None:
        await reads_as(self.membership.members, self.model.members, f"{where}: members")
        await reads_as(self.leader, self.model_leader(), f"{where}: leader")
        assert await self.hold_store.holds() == self.model.holds, f"{where}: holds"
        assert await self.store.current() == self.model.assignment, f"{where}: assignment"
        now = self.now(step)
        for p in range(3):
            projects = await self.registry.projects(p, now=now)
            assert projects == self.model.live_projects(p, now), f"{where}: projects of {p}"


@pytest.mark.anyio
class CoordinationModelContract:
    """Every store against ``core.coordination``'s model, the oracle of its rules."""

    @pytest.mark.parametrize("seed", MODEL_SEEDS)
    async def test_a_random_walk_has_the_outcomes_and_states_the_core_model_gives(
        self, harness: CoordinationHarness, seed: int
    ) -> None:
        """The model in ``core.coordination`` is the oracle: the same random joins, leaves,
        lease expiries (members and the leader), campaigns, resignations, publishes (in
        the name of the leadership, a stale one or a forged one), claims (free, over the
        hold now, over a stale hold), releases and registrations (batches, a cap of 2,
        expiring as the steps' clock advances), with the same outcomes and the same state
        after each one."""
        async with (
            harness.membership() as membership,
            harness.election() as election,
            harness.store() as store,
            harness.hold_store() as hold_store,
            harness.registry() as registry,
        ):
            walk = ModelWalk(
                harness, random.Random(seed), membership, election, store, hold_store, registry
            )
            for step in range(MODEL_STEPS):
                await walk.step(step)
            await walk.compare_all("the end", MODEL_STEPS)
