"""Handoff rules: when a handler may start a partition it was granted, in which order it
gives one back, and when the leader must publish a new assignment.

``PartitionHandoff`` is the state machine of one granted partition in a handler: immutable
state, ``on(event)`` -> next state, whose ``command`` is the one thing the handler does
next (claim the hold, consume, land what is buffered and close, release, back off). The
handler performs the command and feeds back what happened; it carries no rule of its own.
Pure functions and values; the services do the I/O."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeAlias

from core.coordination import Hold
from core.model import Assignment, MemberId, Partition

__all__ = [
    "AwaitPredecessor",
    "BackOff",
    "Claim",
    "ClaimAction",
    "ClaimDecision",
    "ClaimSettled",
    "Consume",
    "Failed",
    "Finish",
    "HandBack",
    "HandedBack",
    "HandoffCommand",
    "HandoffEvent",
    "HoldObserved",
    "LeaseLost",
    "Observe",
    "OwnershipChanges",
    "PartitionHandoff",
    "Phase",
    "PredecessorDone",
    "Release",
    "Released",
    "RetryDue",
    "Revoked",
    "decide_claim",
    "needs_rebalance",
    "ownership_changes",
    "stale_holds",
]


class ClaimAction(StrEnum):
    START = "start"  # the hold is free or already ours: claim it (or keep it) and start
    TAKE_OVER = "take-over"  # the holder's lease is gone: claim by compare-and-set on its hold
    WAIT = "wait"  # a live member still holds it: it is draining; wait for its release


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    action: ClaimAction
    replacing: Hold | None
    reason: str


def decide_claim(
    me: MemberId, hold: Hold | None, live_members: Collection[MemberId]
) -> ClaimDecision:
    """What the new owner of a partition does, given who holds it now.

    The previous owner releases the hold once it has finished and acked its in-flight
    messages; if it died, its lease expired and it is no longer a live member, so its
    stale hold may be replaced. Never two live processors of one partition.
    """
    if hold is None:
        return ClaimDecision(ClaimAction.START, None, "partition is free")
    if hold.member_id == me:
        return ClaimDecision(ClaimAction.START, hold, "already held by this member")
    if hold.member_id not in live_members:
        return ClaimDecision(
            ClaimAction.TAKE_OVER, hold, f"holder {hold.member_id} is gone (lease expired)"
        )
    return ClaimDecision(ClaimAction.WAIT, hold, f"waiting for {hold.member_id} to release")


def stale_holds(me: MemberId, holds: Mapping[Partition, Hold]) -> tuple[Partition, ...]:
    """The partitions held under ``me`` when ``me`` has just joined: an earlier run of the
    same id (killed, or its release never got through) left them. This run owns nothing
    yet, and its new lease makes ``me`` a live member again, so the next owners would wait
    for a release that nobody will send: release them first (sorted)."""
    return tuple(sorted(p for p, hold in holds.items() if hold.member_id == me))


def needs_rebalance(previous: Assignment | None, members: Collection[MemberId]) -> bool:
    """True when the live members differ from the ones the assignment names, or some
    partition has no owner. A leader reconciles only then, so a periodic pass that finds
    nothing changed publishes nothing."""
    if not members:
        return False
    if previous is None or previous.generation == 0:
        return True
    if any(not owners for owners in previous.owners):
        return True
    return previous.members() != frozenset(members)


@dataclass(frozen=True, slots=True)
class OwnershipChanges:
    """What a handler does with its partitions when a new generation arrives (sorted)."""

    revoke: tuple[Partition, ...]  # owned, no longer ours: drain, land, release
    keep: tuple[Partition, ...]  # still ours: carry on under the new generation
    grant: tuple[Partition, ...]  # newly ours: claim the hold once it is free, then start


def ownership_changes(
    me: MemberId, owned: Collection[Partition], assignment: Assignment, *, accepting: bool
) -> OwnershipChanges:
    """Split ``me``'s partitions between what ``owned`` holds and what ``assignment`` gives.

    A handler that is not ``accepting`` (it is stopping) takes no grant: it only gives
    back. Every owned partition is either revoked or kept, never both."""
    mine = set(assignment.owned_by(me))
    current = set(owned)
    return OwnershipChanges(
        revoke=tuple(sorted(current - mine)),
        keep=tuple(sorted(current & mine)),
        grant=tuple(sorted(mine - current)) if accepting else (),
    )


# -- the state machine of one granted partition ------------------------------------------


class Phase(StrEnum):
    AWAITING_PREDECESSOR = "awaiting-predecessor"  # this process still gives it back
    CLAIMING = "claiming"  # taking the hold (waiting for the previous holder to release)
    CONSUMING = "consuming"  # holding it: fetch, land, ack
    HANDING_BACK = "handing-back"  # consuming stopped: land what is buffered, close
    RELEASING = "releasing"  # dropping the hold (again after a backoff, until it works)
    BACKING_OFF = "backing-off"  # after a failure, before claiming again
    DONE = "done"


# Commands: what the handler does next.


@dataclass(frozen=True, slots=True)
class AwaitPredecessor:
    """Wait until this process's earlier ownership of the partition has ended."""


@dataclass(frozen=True, slots=True)
class Observe:
    """Read the partition's hold and the live members (after the next change when
    ``after_change``, or within a bounded wait), answer with ``HoldObserved``."""

    after_change: bool


@dataclass(frozen=True, slots=True)
class Claim:
    """Compare-and-set the hold: take it if free (``replacing`` None) or still exactly
    ``replacing``. Answer with ``ClaimSettled``."""

    replacing: Hold | None
    reason: str


@dataclass(frozen=True, slots=True)
class Consume:
    """Open the partition and land its messages until revoked (answer ``Revoked``)."""


@dataclass(frozen=True, slots=True)
class HandBack:
    """Stop consuming; land what is buffered if ``flush`` (with a lost lease it is
    redelivered to the next owner instead), then close. Answer ``HandedBack``."""

    flush: bool


@dataclass(frozen=True, slots=True)
class Release:
    """Drop this member's hold on the partition. Answer ``Released``."""


@dataclass(frozen=True, slots=True)
class BackOff:
    """Wait ``core.retry.retry_delay(failures)``, answer ``RetryDue``. An ``interruptible``
    wait (before claiming again) ends early on revocation; a wait before retrying a
    release does not, so a failing store is not hammered."""

    failures: int
    interruptible: bool


@dataclass(frozen=True, slots=True)
class Finish:
    """The ownership is over: the partition is not held by this member any more (or its
    lease is lost, so the hold lapses with it)."""


HandoffCommand: TypeAlias = (
    AwaitPredecessor | Observe | Claim | Consume | HandBack | Release | BackOff | Finish
)


# Events: what happened. Any command may also fail (``Failed``); the lease may be lost and
# the assignment may revoke the partition at any time.


@dataclass(frozen=True, slots=True)
class PredecessorDone:
    pass


@dataclass(frozen=True, slots=True)
class HoldObserved:
    hold: Hold | None
    live_members: frozenset[MemberId]
    now: float  # monotonic seconds: how long a live holder has been waited for


@dataclass(frozen=True, slots=True)
class ClaimSettled:
    accepted: bool


@dataclass(frozen=True, slots=True)
class HandedBack:
    pass


@dataclass(frozen=True, slots=True)
class Released:
    pass


@dataclass(frozen=True, slots=True)
class RetryDue:
    pass


@dataclass(frozen=True, slots=True)
class Revoked:
    """The assignment gave the partition to somebody else (or the handler is stopping)."""


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """The member's lease is gone: its holds lapse with it, buffered messages must not
    land (they are redelivered to the next owner)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The command raised (the store, the broker, the sink, a bug). A claim that failed may
    still have been applied: the hold is then treated as possibly ours."""

    error: str


HandoffEvent: TypeAlias = (
    PredecessorDone
    | HoldObserved
    | ClaimSettled
    | HandedBack
    | Released
    | RetryDue
    | Revoked
    | LeaseLost
    | Failed
)


@dataclass(frozen=True, slots=True)
class PartitionHandoff:
    """One granted partition in one handler, from grant to release (see the module doc).

    The rules it keeps:

    - it consumes only after its claim was accepted; it claims only a free hold, its own,
      one whose holder's lease is gone, or one a live holder has kept ``patience`` seconds
      past the revocation without releasing (a stuck holder must not stop the partition:
      the landed table's commit rule keeps the output exactly-once even then);
    - it releases only once consuming has stopped and what was buffered has landed (or,
      with a lost lease, was dropped for redelivery), and retries a failed release until
      it works or the lease is gone, so no partition stays held by a member that gave it
      up;
    - after a revocation it claims and consumes no more; a lost lease ends it too;
    - any other failure gives the partition back, backs off (``failures`` grows) and
      claims again.

    ``holding`` is whether the hold is (or, after a claim that failed, may be) this
    member's: the ownership finishes only once it is not, or the lease is lost.
    """

    partition: Partition
    member_id: MemberId
    patience: float
    phase: Phase
    command: HandoffCommand
    holding: bool = False
    revoked: bool = False
    lease_lost: bool = False
    failures: int = 0
    waiting_for: Hold | None = None  # the live holder being waited for...
    waiting_since: float = 0.0  # ...since this time

    @staticmethod
    def granted(
        partition: Partition, member_id: MemberId, *, predecessor: bool, patience: float
    ) -> PartitionHandoff:
        """The partition was granted; ``predecessor``: this process still gives it back
        from an earlier grant."""
        if patience <= 0:
            raise ValueError(f"patience must be positive, got {patience}")
        if predecessor:
            return PartitionHandoff(
                partition, member_id, patience, Phase.AWAITING_PREDECESSOR, AwaitPredecessor()
            )
        return PartitionHandoff(
            partition, member_id, patience, Phase.CLAIMING, Observe(after_change=False)
        )

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def on(self, event: HandoffEvent) -> PartitionHandoff:
        """The next state. An event that means nothing in the current phase (a late
        answer) changes nothing."""
        match event:
            case Revoked():
                return self._revoked()
            case LeaseLost():
                return replace(self, lease_lost=True)._revoked()
            case Failed():
                return self._failed()
            case PredecessorDone() if self.phase is Phase.AWAITING_PREDECESSOR:
                return self._to(Phase.CLAIMING, Observe(after_change=False))
            case HoldObserved() if self.phase is Phase.CLAIMING:
                return self._observed(event)
            case ClaimSettled(accepted=True) if self.phase is Phase.CLAIMING:
                return replace(self._to(Phase.CONSUMING, Consume()), holding=True)
            case ClaimSettled(accepted=False) if self.phase is Phase.CLAIMING:
                return self._to(Phase.CLAIMING, Observe(after_change=True))
            case HandedBack() if self.phase is Phase.HANDING_BACK:
                return self._to(Phase.RELEASING, Release())
            case Released() if self.phase is Phase.RELEASING:
                return replace(self, holding=False)._after_release()
            case RetryDue() if self.phase is Phase.BACKING_OFF:
                return self._to(Phase.CLAIMING, Observe(after_change=False))
            case RetryDue() if self.phase is Phase.RELEASING:
                return self._to(Phase.RELEASING, Release())
        return self

    def _to(self, phase: Phase, command: HandoffCommand) -> PartitionHandoff:
        return replace(self, phase=phase, command=command)

    def _revoked(self) -> PartitionHandoff:
        state = replace(self, revoked=True)
        match self.phase:
            case Phase.DONE:
                return self
            case Phase.CONSUMING | Phase.HANDING_BACK:
                # again if handing back: a lost lease interrupts the flush, close again
                return state._to(Phase.HANDING_BACK, HandBack(flush=not state.lease_lost))
            case Phase.RELEASING:
                return state._to(Phase.RELEASING, Release())
            case _:
                return state._give_up_hold()

    def _give_up_hold(self) -> PartitionHandoff:
        """Not consuming: release a hold that may be ours, or finish."""
        if self.holding:
            return self._to(Phase.RELEASING, Release())
        return self._to(Phase.DONE, Finish())

    def _failed(self) -> PartitionHandoff:
        failures = self.failures + 1
        state = replace(self, failures=failures)
        match self.phase:
            case Phase.CLAIMING:
                # A claim whose answer was lost may have been applied: maybe ours now.
                holding = self.holding or isinstance(self.command, Claim)
                retry = BackOff(failures, interruptible=True)
                return replace(state, holding=holding)._to(Phase.BACKING_OFF, retry)
            case Phase.CONSUMING:
                return state._to(Phase.HANDING_BACK, HandBack(flush=not self.lease_lost))
            case Phase.HANDING_BACK:
                return state._to(Phase.RELEASING, Release())
            case Phase.RELEASING if self.lease_lost:
                # The hold lapses with the lease: its holder is no longer a live member.
                return replace(state, holding=False)._to(Phase.DONE, Finish())
            case Phase.RELEASING:
                return state._to(Phase.RELEASING, BackOff(failures, interruptible=False))
        return self

    def _after_release(self) -> PartitionHandoff:
        if self.revoked:
            return self._to(Phase.DONE, Finish())
        if self.failures:
            return self._to(Phase.BACKING_OFF, BackOff(self.failures, interruptible=True))
        return self._to(Phase.CLAIMING, Observe(after_change=False))

    def _observed(self, seen: HoldObserved) -> PartitionHandoff:
        decision = decide_claim(self.member_id, seen.hold, seen.live_members)
        if decision.action is not ClaimAction.WAIT:
            claim = Claim(decision.replacing, decision.reason)
            return replace(self, waiting_for=None)._to(Phase.CLAIMING, claim)
        if seen.hold != self.waiting_for:
            state = replace(self, waiting_for=seen.hold, waiting_since=seen.now)
            return state._to(Phase.CLAIMING, Observe(after_change=True))
        waited = seen.now - self.waiting_since
        if waited >= self.patience and seen.hold is not None:
            reason = (
                f"holder {seen.hold.member_id} is live but kept the partition {waited:.0f} s "
                "without releasing it"
            )
            return replace(self, waiting_for=None)._to(Phase.CLAIMING, Claim(seen.hold, reason))
        return self._to(Phase.CLAIMING, Observe(after_change=True))
