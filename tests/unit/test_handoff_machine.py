"""The handler's per-partition handoff (``core.handoff.PartitionHandoff``): examples, and a
hypothesis state machine that performs its commands against ``core.coordination``'s store
model while another member, revocations, lost leases and failures interfere."""

from __future__ import annotations

from dataclasses import dataclass, replace

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.coordination import CoordinationState, Hold
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
    Phase,
    PredecessorDone,
    Release,
    Released,
    RetryDue,
    Revoked,
)

ME, OTHER = "me", "other"
P = 3
PATIENCE = 30.0


def granted(*, predecessor: bool = False, patience: float = 30.0) -> PartitionHandoff:
    return PartitionHandoff.granted(P, ME, predecessor=predecessor, patience=patience)


def seen(hold: Hold | None, *live: str, now: float = 0.0) -> HoldObserved:
    return HoldObserved(hold, frozenset(live) | {ME}, now)


def test_a_free_partition_is_claimed_consumed_handed_back_and_released_in_that_order() -> None:
    h = granted()
    assert h.command == Observe(after_change=False)
    h = h.on(seen(None))
    assert h.command == Claim(None, "partition is free")
    h = h.on(ClaimSettled(accepted=True))
    assert (h.phase, h.command, h.holding) == (Phase.CONSUMING, Consume(), True)
    h = h.on(Revoked())
    assert h.command == HandBack(flush=True)
    h = h.on(HandedBack())
    assert h.command == Release()
    h = h.on(Released())
    assert (h.done, h.command, h.holding) == (True, Finish(), False)


def test_an_earlier_grant_in_this_process_is_waited_for_first() -> None:
    h = granted(predecessor=True)
    assert h.command == AwaitPredecessor()
    assert h.on(HoldObserved(None, frozenset({ME}), 0.0)) == h  # a late answer: nothing
    assert h.on(PredecessorDone()).command == Observe(after_change=False)
    assert h.on(Revoked()).done


def test_a_live_holder_is_waited_for_until_patience_runs_out_then_taken_over() -> None:
    theirs = Hold(P, OTHER, 4, version=17)
    h = granted(patience=30.0).on(seen(theirs, OTHER, now=100.0))
    assert h.command == Observe(after_change=True)
    h = h.on(seen(theirs, OTHER, now=129.0))
    assert h.command == Observe(after_change=True)
    h = h.on(seen(theirs, OTHER, now=130.0))
    assert isinstance(h.command, Claim)
    assert h.command.replacing == theirs
    assert "live but kept the partition 30 s" in h.command.reason


def test_patience_restarts_when_the_hold_changes() -> None:
    first, second = Hold(P, OTHER, 4, version=17), Hold(P, OTHER, 5, version=21)
    h = granted(patience=30.0).on(seen(first, OTHER, now=0.0))
    h = h.on(seen(second, OTHER, now=25.0))
    assert h.on(seen(second, OTHER, now=40.0)).command == Observe(after_change=True)
    assert isinstance(h.on(seen(second, OTHER, now=55.0)).command, Claim)


def test_a_gone_holder_is_replaced_by_its_exact_hold() -> None:
    stale = Hold(P, OTHER, 4, version=17)
    h = granted().on(seen(stale))
    assert h.command == Claim(stale, "holder other is gone (lease expired)")


def test_a_failed_release_is_retried_after_a_backoff_that_revocation_does_not_cut() -> None:
    h = granted().on(seen(None)).on(ClaimSettled(accepted=True)).on(Revoked()).on(HandedBack())
    h = h.on(Failed("store timed out"))
    assert (h.phase, h.command) == (Phase.RELEASING, BackOff(1, interruptible=False))
    assert h.on(Revoked()).command == Release()
    h = h.on(RetryDue())
    assert h.command == Release()
    assert h.on(Released()).done


def test_with_a_lost_lease_nothing_buffered_lands_and_a_failed_release_is_left_to_lapse() -> None:
    consuming = granted().on(seen(None)).on(ClaimSettled(accepted=True))
    h = consuming.on(LeaseLost())
    assert (h.command, h.revoked, h.lease_lost) == (HandBack(flush=False), True, True)
    h = h.on(HandedBack()).on(Failed("lease gone"))
    assert h.done
    # losing the lease in the middle of a flush hands back again, without flushing
    flushing = consuming.on(Revoked())
    assert flushing.on(LeaseLost()).command == HandBack(flush=False)


def test_a_claim_whose_answer_was_lost_is_released_on_revocation() -> None:
    h = granted().on(seen(None)).on(Failed("timed out"))
    assert (h.phase, h.holding, h.command) == (
        Phase.BACKING_OFF,
        True,
        BackOff(1, interruptible=True),
    )
    assert h.on(Revoked()).command == Release()
    # or, once the backoff is over, the hold turns out to be ours and is claimed again
    mine = Hold(P, ME, 1, version=3)
    again = h.on(RetryDue()).on(seen(mine))
    assert again.command == Claim(mine, "already held by this member")


def test_a_failure_while_consuming_lands_what_it_can_gives_back_and_claims_again() -> None:
    h = granted().on(seen(None)).on(ClaimSettled(accepted=True)).on(Failed("broker"))
    assert h.command == HandBack(flush=True)
    h = h.on(HandedBack()).on(Released())
    assert (h.phase, h.command) == (Phase.BACKING_OFF, BackOff(1, interruptible=True))
    h = h.on(RetryDue())
    assert h.command == Observe(after_change=False)
    h = h.on(seen(None)).on(ClaimSettled(accepted=True)).on(Failed("broker again"))
    assert h.on(HandedBack()).on(Released()).command == BackOff(2, interruptible=True)


def test_patience_must_be_positive() -> None:
    try:
        granted(patience=0.0)
    except ValueError as exc:
        assert "patience must be positive" in str(exc)
    else:
        raise AssertionError("a zero patience was accepted")


@dataclass(frozen=True, slots=True)
class World:
    """The store model and the partition's subscription, as the machine's commands see them."""

    store: CoordinationState
    now: float = 0.0
    open: bool = False  # a subscription is open (between Consume and HandBack)
    versions: int = 0  # the store's version counter (etcd's revision, Kafka's offset)

    def hold(self) -> Hold | None:
        return self.store.holds.get(P)

    def claimed(self, member: str, replacing: Hold | None) -> World:
        applied = self.store.claim(
            P,
            member,
            1,
            replacing=None if replacing is None else replacing.version,
            version=self.versions + 1,
        )
        return replace(self, store=applied.state, versions=self.versions + 1)


def perform(
    h: PartitionHandoff, world: World, *, ok: bool = True, applied: bool = False
) -> tuple[HandoffEvent | None, World]:
    """Perform ``h``'s command in ``world``: it works, or it fails (a claim or a release
    whose answer was lost may still have been applied). None: consuming goes on."""
    match h.command:
        case AwaitPredecessor():
            return PredecessorDone(), world
        case Observe():
            return HoldObserved(world.hold(), world.store.members, world.now), world
        case Claim(replacing=replacing):
            after = world.claimed(ME, replacing)
            accepted = after.store != world.store
            if ok:
                return ClaimSettled(accepted), after
            return Failed("claim answer lost"), after if applied else world
        case Consume():
            if ok:
                return None, replace(world, open=True)
            return Failed("broker"), world
        case HandBack():
            return (HandedBack() if ok else Failed("flush")), replace(world, open=False)
        case Release():
            assert not world.open, "released while a subscription was open"
            released = replace(world, store=world.store.release(P, ME).state)
            if ok:
                return Released(), released
            return Failed("release answer lost"), released if applied else world
        case BackOff():
            return RetryDue(), replace(world, now=world.now + 1.0)
    raise AssertionError(f"nothing to perform for {h.command}")


class Handoff(RuleBasedStateMachine):
    """One member's handoff of partition P, its commands performed against the store
    model; another member holds, releases and dies; answers get lost."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World(CoordinationState(members=frozenset({ME, OTHER})))
        self.h = granted(patience=PATIENCE)
        self.failures_seen = 0
        self.observed: HoldObserved | None = None
        self.waiting_since: dict[Hold, float] = {}  # a live other holder, first seen at

    @precondition(lambda self: not self.h.done)
    @rule(ok=st.booleans(), applied=st.booleans())
    def step(self, ok: bool, applied: bool) -> None:
        command = self.h.command
        if isinstance(command, Claim):
            self._check_claim(command)
        event, self.world = perform(self.h, self.world, ok=ok, applied=applied)
        if isinstance(event, HoldObserved):
            self.observed = event
            if event.hold is not None and event.hold.member_id in event.live_members - {ME}:
                self.waiting_since.setdefault(event.hold, event.now)
        if isinstance(event, Failed):
            self.failures_seen += 1
        if event is not None:
            self.h = self.h.on(event)

    def _check_claim(self, claim: Claim) -> None:
        """A claim over another live member's hold comes only after patience ran out."""
        seen = self.observed
        assert seen is not None and claim.replacing == seen.hold
        replacing = claim.replacing
        if replacing is not None and replacing.member_id in seen.live_members - {ME}:
            assert seen.now - self.waiting_since[replacing] >= PATIENCE, (
                "claimed over a live holder before patience ran out"
            )

    @precondition(lambda self: not self.h.revoked)
    @rule()
    def revoke(self) -> None:
        self.h = self.h.on(Revoked())

    @precondition(lambda self: not self.h.lease_lost)
    @rule()
    def lose_lease(self) -> None:
        self.world = replace(self.world, store=self.world.store.leave(ME).state)
        self.h = self.h.on(LeaseLost())

    @precondition(lambda self: OTHER in self.world.store.members and self.world.hold() is None)
    @rule()
    def other_claims_the_free_partition(self) -> None:
        self.world = self.world.claimed(OTHER, None)

    @rule()
    def other_releases(self) -> None:
        self.world = replace(self.world, store=self.world.store.release(P, OTHER).state)

    @precondition(lambda self: OTHER in self.world.store.members)
    @rule()
    def other_dies(self) -> None:
        self.world = replace(self.world, store=self.world.store.leave(OTHER).state)

    @rule(seconds=st.floats(0.5, 20.0))
    def time_passes(self, seconds: float) -> None:
        self.world = replace(self.world, now=self.world.now + seconds)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def consuming_only_while_holding(self) -> None:
        hold = self.world.hold()
        if self.h.phase is Phase.CONSUMING and not self.h.lease_lost:
            assert hold is not None and hold.member_id == ME, "consuming without the hold"

    @invariant()
    def a_live_member_finishes_without_the_hold_and_with_nothing_open(self) -> None:
        hold = self.world.hold()
        if self.h.done:
            assert not self.world.open
            if not self.h.lease_lost:
                assert hold is None or hold.member_id != ME, "finished but still holding"

    @invariant()
    def no_claim_or_consume_after_revocation(self) -> None:
        if self.h.revoked:
            assert not isinstance(self.h.command, Observe | Claim | Consume)

    @invariant()
    def failures_only_grow_with_failures(self) -> None:
        assert self.h.failures <= self.failures_seen

    @invariant()
    def a_revocation_finishes_within_a_few_steps_once_calls_work(self) -> None:
        """No stuck partition: revoked now, with every call working, the ownership ends
        (hold released, subscription closed) within five steps."""
        h, world = self.h.on(Revoked()), self.world
        for _ in range(5):
            if h.done:
                break
            event, world = perform(h, world)
            assert event is not None
            h = h.on(event)
        assert h.done and not world.open
        hold = world.hold()
        if not h.lease_lost:
            assert hold is None or hold.member_id != ME


TestHandoff = Handoff.TestCase
TestHandoff.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
